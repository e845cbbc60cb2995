#include "runtime/base/file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln {
namespace {

Status errnoStatus(const std::string &what, const std::string &path) {
  int err = errno;
  std::string message = what + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT)
    return notFound(message);
  return unavailable(message);
}

} // namespace

MappedFile::~MappedFile() {
  if (data_ && size_)
    munmap(const_cast<uint8_t *>(data_), size_);
}

MappedFile::MappedFile(MappedFile &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    if (data_ && size_)
      munmap(const_cast<uint8_t *>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

Result<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errnoStatus("cannot open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = errnoStatus("cannot stat", path);
    ::close(fd);
    return s;
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void *p = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = errnoStatus("cannot mmap", path);
      ::close(fd);
      return s;
    }
    file.data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return file;
}

Result<std::string> readFile(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  return std::string(reinterpret_cast<const char *>(file.data()), file.size());
}

Status writeFileAtomic(const std::string &path, std::string_view bytes) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return errnoStatus("cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      Status s = errnoStatus("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    Status s = errnoStatus("cannot flush", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = errnoStatus("cannot rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return okStatus();
}

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

} // namespace kiln
