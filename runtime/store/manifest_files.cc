#include "runtime/store/manifest_files.h"

#include "runtime/base/file.h"
#include "schema/version.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace kiln::rt {

Result<std::vector<ManifestFile>> parseManifestFiles(const std::string &manifestJson,
                                                     const std::string &source) {
  nlohmann::json json = nlohmann::json::parse(manifestJson, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return dataLoss(source + " is not a JSON object");
  auto files = json.find("files");
  if (files == json.end() || !files->is_array())
    return dataLoss(source + ": field 'files' is missing or not an array");
  std::vector<ManifestFile> out;
  for (size_t i = 0; i < files->size(); ++i) {
    const nlohmann::json &entry = (*files)[i];
    std::string where = source + ": files[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("size") || !entry["size"].is_number_unsigned() ||
        !entry.contains("sha256") || !entry["sha256"].is_string())
      return dataLoss(where + " needs string 'name', unsigned 'size' and string 'sha256'");
    ManifestFile file{entry["name"], entry["size"], entry["sha256"]};
    if (file.name.empty() || file.name == "." || file.name == ".." ||
        file.name.find('/') != std::string::npos || file.name.find('\\') != std::string::npos ||
        file.name.find('\0') != std::string::npos || file.name == kManifestFileName)
      return dataLoss(where + ": name '" + file.name + "' is not a plain file name");
    if (file.sha256.size() != 64 ||
        file.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      return dataLoss(where + ": sha256 of '" + file.name + "' is not 64 lower-case hex digits");
    for (const ManifestFile &seen : out)
      if (seen.name == file.name)
        return dataLoss(where + ": '" + file.name + "' is listed twice");
    out.push_back(std::move(file));
  }
  if (out.empty())
    return dataLoss(source + " lists no files");
  return out;
}

Result<std::vector<ManifestFile>> readArtifactManifest(const std::string &dir,
                                                       std::string *manifestText) {
  std::string path = dir + "/" + kManifestFileName;
  Result<std::string> text = readFile(path);
  if (!text.isOk())
    return text.status().withContext("'" + dir + "' is not a kiln artifact (no readable " +
                                     kManifestFileName + ")");
  if (manifestText)
    *manifestText = *text;
  return parseManifestFiles(*text, path);
}

Result<std::string> sha256OfFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return notFound("cannot open '" + path + "': " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX *)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<unsigned char> buffer(size_t(4) << 20);
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      std::string error = std::strerror(errno);
      ::close(fd);
      return unavailable("cannot read '" + path + "': " + error);
    }
    if (n == 0)
      break;
    EVP_DigestUpdate(ctx.get(), buffer.data(), size_t(n));
  }
  ::close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &length);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

Status verifyArtifactFiles(const std::string &dir, const std::vector<ManifestFile> &files) {
  for (const ManifestFile &file : files) {
    std::string path = dir + "/" + file.name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return dataLoss("'" + path + "' is listed in " + kManifestFileName +
                      " but is missing or not a regular file");
    if (uint64_t(st.st_size) != file.size)
      return dataLoss("'" + path + "' has " + std::to_string(st.st_size) + " bytes; " +
                      kManifestFileName + " says " + std::to_string(file.size));
    KILN_ASSIGN_OR_RETURN(std::string sha, sha256OfFile(path));
    if (sha != file.sha256)
      return dataLoss("checksum mismatch for '" + path + "': " + kManifestFileName +
                      " says sha256 " + file.sha256 + ", the file has " + sha);
  }
  return okStatus();
}

} // namespace kiln::rt
