#include "runtime/artifact/artifact_writer.h"

#include "runtime/base/file.h"
#include "runtime/base/sha256.h"
#include "runtime/ops/plan_types.h"
#include "schema/version.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <set>
#include <unistd.h>

namespace kiln::rt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// FlatBuffers offsets are 32-bit: kernel images near 2 GiB would silently corrupt the plan.
constexpr uint64_t kMaxKernelImageBytes = uint64_t(1) << 30;

struct FileRecord {
  std::string name;
  uint64_t size = 0;
  std::string sha256;
};

std::string errnoText() {
  return std::strerror(errno);
}

std::string mebibytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// A file written front to back, hashed as it goes so no file is read back for the manifest.
class HashedFile {
public:
  HashedFile() = default;
  HashedFile(const HashedFile &) = delete;
  HashedFile &operator=(const HashedFile &) = delete;
  ~HashedFile() {
    if (fd_ >= 0)
      ::close(fd_);
    if (ctx_)
      EVP_MD_CTX_free(ctx_);
  }

  Status create(const std::string &path, const std::string &name) {
    path_ = path;
    name_ = name;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return unavailable("cannot create '" + path + "': " + errnoText());
    ctx_ = EVP_MD_CTX_new();
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
      return internalError("SHA-256 initialisation failed for " + name);
    return okStatus();
  }

  Status write(const void *data, size_t size) {
    if (size && EVP_DigestUpdate(ctx_, data, size) != 1)
      return internalError("SHA-256 update failed for " + name_);
    const char *bytes = static_cast<const char *>(data);
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, bytes + done, size - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return unavailable("cannot write '" + path_ + "' at byte " + std::to_string(size_ + done) +
                           ": " + errnoText());
      done += static_cast<size_t>(n);
    }
    size_ += size;
    return okStatus();
  }

  Status writeZeros(size_t count) {
    static const uint8_t kZeros[kWeightAlignment] = {};
    return write(kZeros, count);
  }

  uint64_t size() const { return size_; }

  // fsync so the directory rename never publishes files whose data is not on disk.
  Result<FileRecord> finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx_, digest, &length) != 1)
      return internalError("SHA-256 finalisation failed for " + name_);
    int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      return unavailable("cannot flush '" + path_ + "': " + errnoText());
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) {
      hex += kHex[digest[i] >> 4];
      hex += kHex[digest[i] & 15];
    }
    return FileRecord{name_, size_, hex};
  }

private:
  int fd_ = -1;
  EVP_MD_CTX *ctx_ = nullptr;
  std::string path_;
  std::string name_;
  uint64_t size_ = 0;
};

Result<FileRecord> writeWholeFile(const std::string &dir, const std::string &name, const void *data,
                                  size_t size) {
  HashedFile file;
  KILN_RETURN_IF_ERROR(file.create(dir + "/" + name, name));
  KILN_RETURN_IF_ERROR(file.write(data, size));
  return file.finish();
}

std::string shapeString(const std::vector<uint64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Result<uint64_t> expectedBytes(const WeightSource &source, const std::string &where) {
  const WeightSize size = weightSize(source.dtype, source.shape, source.groupSize);
  if (!size.error.empty())
    return invalidArgument(where + ": shape " + shapeString(source.shape) + ": " + size.error);
  return size.bytes;
}

struct RankWriter {
  const std::string &dir;
  const ProgressFn &progress;
  std::vector<uint8_t> bytes; // reused: memory stays at the largest tensor

  Status appendTensor(HashedFile &file, const std::string &fileName, const WeightSource &source,
                      schema::RankT &rank) {
    std::string where = fileName + ": tensor '" + source.name + "'";
    KILN_ASSIGN_OR_RETURN(uint64_t expected, expectedBytes(source, where));
    if (!source.produce)
      return invalidArgument(where + " has no producer");
    bytes.clear();
    Status produced = source.produce(bytes);
    if (!produced.isOk())
      return produced.withContext(where);
    if (bytes.size() != expected)
      return invalidArgument(where + ": the producer gave " + std::to_string(bytes.size()) +
                             " bytes but the dtype's size of shape " + shapeString(source.shape) +
                             " is " + std::to_string(expected));
    uint64_t offset = (file.size() + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
    KILN_RETURN_IF_ERROR(file.writeZeros(static_cast<size_t>(offset - file.size())));
    KILN_RETURN_IF_ERROR(file.write(bytes.data(), bytes.size()));
    auto entry = std::make_unique<schema::WeightEntryT>();
    entry->name = source.name;
    entry->dtype = source.dtype;
    entry->group_size = static_cast<uint32_t>(source.groupSize);
    entry->shape = source.shape;
    entry->offset = offset;
    entry->size = bytes.size();
    entry->sha256 = sha256Hex(bytes.data(), bytes.size());
    rank.weights.push_back(std::move(entry));
    return okStatus();
  }

  Result<FileRecord> write(uint32_t index, const std::vector<WeightSource> &sources,
                           schema::RankT &rank) {
    std::string fileName = "weights.rank" + std::to_string(index) + ".bin";
    HashedFile file;
    KILN_RETURN_IF_ERROR(file.create(dir + "/" + fileName, fileName));
    rank.weights.clear();
    for (size_t i = 0; i < sources.size(); ++i) {
      KILN_RETURN_IF_ERROR(appendTensor(file, fileName, sources[i], rank));
      if (progress)
        progress(fileName + ": " + std::to_string(i + 1) + "/" + std::to_string(sources.size()) +
                 " tensors, " + mebibytes(file.size()));
    }
    rank.weights_file = fileName;
    rank.weights_file_size = file.size();
    return file.finish();
  }
};

Status checkRanks(const ArtifactContents &contents) {
  const schema::PlanT &plan = contents.plan;
  if (plan.ranks.size() != contents.rankWeights.size())
    return invalidArgument("artifact writer: plan has " + std::to_string(plan.ranks.size()) +
                           " rank(s) but rankWeights has " +
                           std::to_string(contents.rankWeights.size()) + " list(s)");
  if (plan.ranks.empty())
    return invalidArgument("artifact writer: plan has no ranks");
  if (plan.tp != plan.ranks.size())
    return invalidArgument("artifact writer: plan tp is " + std::to_string(plan.tp) +
                           " but it has " + std::to_string(plan.ranks.size()) + " rank(s)");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    if (!plan.ranks[r] || plan.ranks[r]->rank != r)
      return invalidArgument("artifact writer: plan.ranks[" + std::to_string(r) +
                             "] is missing or records another rank number");
    for (const auto &buffer : plan.ranks[r]->buffers)
      if (buffer && buffer->kind == schema::BufferKind::Weight &&
          (buffer->weight < 0 ||
           static_cast<size_t>(buffer->weight) >= contents.rankWeights[r].size()))
        return invalidArgument("artifact writer: rank " + std::to_string(r) + " buffer '" +
                               buffer->name + "' refers to weight " +
                               std::to_string(buffer->weight) + " of " +
                               std::to_string(contents.rankWeights[r].size()));
  }
  uint64_t kernelBytes = 0;
  for (const auto &module : plan.kernel_modules)
    kernelBytes += module ? module->image.size() : 0;
  if (kernelBytes > kMaxKernelImageBytes)
    return outOfRange("artifact writer: kernel images total " + mebibytes(kernelBytes) +
                      ", over the " + mebibytes(kMaxKernelImageBytes) + " a plan may hold");
  return okStatus();
}

Result<FileRecord> writePlan(schema::PlanT &plan, const std::string &dir) {
  if (plan.schema_version == 0)
    plan.schema_version = kSchemaVersion;
  if (plan.compiler_version.empty())
    plan.compiler_version = kKilnVersion;
  flatbuffers::FlatBufferBuilder builder(1 << 16);
  schema::FinishPlanBuffer(builder, schema::Plan::Pack(builder, &plan));
  // Verify what we wrote so a writer bug fails the compile, not the load.
  flatbuffers::Verifier verifier(builder.GetBufferPointer(), builder.GetSize());
  if (!schema::VerifyPlanBuffer(verifier))
    return internalError(std::string(kPlanFileName) + ": the packed plan fails verification");
  return writeWholeFile(dir, kPlanFileName, builder.GetBufferPointer(), builder.GetSize());
}

bool isReservedName(const std::string &name) {
  return name == kPlanFileName || name == kManifestFileName ||
         (name.rfind("weights.rank", 0) == 0 && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".bin") == 0);
}

Status copyExtraFiles(const std::vector<std::string> &paths, const std::string &dir,
                      std::vector<FileRecord> &records) {
  std::set<std::string> seen;
  for (const std::string &path : paths) {
    std::string name = fs::path(path).filename().string();
    if (name.empty() || isReservedName(name) || !seen.insert(name).second)
      return invalidArgument("artifact writer: extra file '" + path + "' would be stored as '" +
                             name + "', which is empty, reserved or already used");
    KILN_ASSIGN_OR_RETURN(MappedFile source, MappedFile::open(path));
    KILN_ASSIGN_OR_RETURN(FileRecord record,
                          writeWholeFile(dir, name, source.data(), source.size()));
    records.push_back(std::move(record));
  }
  return okStatus();
}

Json manifestJson(const schema::PlanT &plan, std::vector<FileRecord> records) {
  Json manifest;
  manifest["format"] = "kiln-artifact";
  manifest["kiln_version"] = kKilnVersion;
  manifest["compiler_version"] = plan.compiler_version;
  manifest["schema_version"] = plan.schema_version;
  manifest["cuda_version"] = plan.cuda_version;
  if (plan.model)
    manifest["model"] = {{"family", plan.model->family},
                         {"architecture", plan.model->architecture},
                         {"vocab_size", plan.model->vocab_size},
                         {"num_layers", plan.model->num_layers},
                         {"source_dtype", schema::EnumNameDType(plan.model->source_dtype)}};
  if (plan.limits)
    manifest["limits"] = {{"max_batch", plan.limits->max_batch},
                          {"max_seq_len", plan.limits->max_seq_len},
                          {"max_tokens_per_step", plan.limits->max_tokens_per_step},
                          {"max_blocks_per_seq", plan.limits->max_blocks_per_seq}};
  manifest["activation_dtype"] = schema::EnumNameDType(plan.activation_dtype);
  manifest["tp"] = plan.tp;
  manifest["targets"] = plan.targets;
  std::sort(records.begin(), records.end(),
            [](const FileRecord &a, const FileRecord &b) { return a.name < b.name; });
  Json files = Json::array();
  for (const FileRecord &record : records)
    files.push_back({{"name", record.name}, {"size", record.size}, {"sha256", record.sha256}});
  manifest["files"] = std::move(files);
  return manifest;
}

Status syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return unavailable("cannot open directory '" + dir + "': " + errnoText());
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? okStatus() : unavailable("cannot sync '" + dir + "': " + errnoText());
}

// Replaces outDir with the finished tmp dir. An existing outDir is moved aside first and put
// back if the final rename fails; only something that looks like an artifact is ever replaced.
Status publish(const std::string &tmpDir, const std::string &outDir) {
  std::error_code ec;
  fs::file_status status = fs::symlink_status(outDir, ec);
  if (!fs::exists(status)) {
    fs::rename(tmpDir, outDir, ec);
    return ec ? unavailable("cannot rename '" + tmpDir + "' to '" + outDir + "': " + ec.message())
              : okStatus();
  }
  if (!fs::is_directory(status))
    return failedPrecondition("output '" + outDir + "' exists and is not a directory");
  bool looksLikeArtifact = fs::exists(outDir + "/" + kPlanFileName, ec) ||
                           fs::exists(outDir + "/" + kManifestFileName, ec);
  if (!looksLikeArtifact && !fs::is_empty(outDir, ec))
    return failedPrecondition("output '" + outDir +
                              "' exists and is not a kiln artifact; refusing to replace it");
  std::string oldDir = outDir + ".old-" + std::to_string(::getpid());
  fs::remove_all(oldDir, ec);
  fs::rename(outDir, oldDir, ec);
  if (ec)
    return unavailable("cannot move the existing '" + outDir + "' aside: " + ec.message());
  fs::rename(tmpDir, outDir, ec);
  if (ec) {
    std::error_code restore;
    fs::rename(oldDir, outDir, restore);
    return unavailable("cannot rename '" + tmpDir + "' to '" + outDir + "': " + ec.message());
  }
  fs::remove_all(oldDir, ec);
  return okStatus();
}

Status writeInto(ArtifactContents &contents, const std::string &dir, const ProgressFn &progress) {
  std::vector<FileRecord> records;
  RankWriter rankWriter{dir, progress, {}};
  for (uint32_t r = 0; r < contents.plan.ranks.size(); ++r) {
    KILN_ASSIGN_OR_RETURN(FileRecord record,
                          rankWriter.write(r, contents.rankWeights[r], *contents.plan.ranks[r]));
    records.push_back(std::move(record));
  }
  KILN_ASSIGN_OR_RETURN(FileRecord planRecord, writePlan(contents.plan, dir));
  records.push_back(std::move(planRecord));
  KILN_RETURN_IF_ERROR(copyExtraFiles(contents.extraFiles, dir, records));
  std::string manifest = manifestJson(contents.plan, records).dump(2) + "\n";
  KILN_RETURN_IF_ERROR(
      writeWholeFile(dir, kManifestFileName, manifest.data(), manifest.size()).status());
  return syncDirectory(dir);
}

} // namespace

Status writeArtifact(ArtifactContents &contents, const std::string &outDir, ProgressFn progress) {
  std::string out = outDir;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  if (out.empty())
    return invalidArgument("artifact writer: empty output directory");
  KILN_RETURN_IF_ERROR(checkRanks(contents));
  std::string tmpDir = out + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmpDir, ec);
  fs::create_directories(tmpDir, ec);
  if (ec)
    return unavailable("cannot create '" + tmpDir + "': " + ec.message());
  Status status = writeInto(contents, tmpDir, progress);
  if (status.isOk())
    status = publish(tmpDir, out);
  if (!status.isOk())
    fs::remove_all(tmpDir, ec);
  if (status.isOk() && progress)
    progress("wrote " + out);
  return status;
}

} // namespace kiln::rt
