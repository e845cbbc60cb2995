#include "compiler/import/safetensors.h"

#include "runtime/base/half.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; kiln reads it in place");

constexpr const char *kSingleFile = "model.safetensors";
constexpr const char *kIndexFile = "model.safetensors.index.json";

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Result<TensorDType> parseDType(const std::string &name, const std::string &where) {
  if (name == "F32")
    return TensorDType::kF32;
  if (name == "F16")
    return TensorDType::kF16;
  if (name == "BF16")
    return TensorDType::kBF16;
  if (name == "I32") // a GPTQ / AWQ checkpoint's packed words (hf_quantized_checkpoint.h)
    return TensorDType::kI32;
  if (name == "F8_E4M3") // an fp8 checkpoint's weights (hf_fp8_checkpoint.h)
    return TensorDType::kF8E4M3;
  return unimplemented(where + " has dtype '" + name +
                       "'; kiln reads F32, F16, BF16, I32 and F8_E4M3");
}

Status parseShape(const Json &entry, const std::string &where, TensorInfo &info) {
  auto it = entry.find("shape");
  if (it == entry.end() || !it->is_array())
    return dataLoss(where + ": 'shape' must be a list of non-negative integers");
  for (const Json &dim : *it) {
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return dataLoss(where + ": 'shape' must be a list of non-negative integers, got " +
                      it->dump());
    info.shape.push_back(dim.get<int64_t>());
  }
  return okStatus();
}

// Byte count implied by shape x dtype, or an error when it does not fit in 64 bits.
Result<uint64_t> expectedBytes(const TensorInfo &info, const std::string &where) {
  uint64_t bytes = tensorDTypeSize(info.dtype);
  for (int64_t dim : info.shape) {
    uint64_t d = static_cast<uint64_t>(dim);
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d)
      return dataLoss(where + ": shape " + shapeString(info.shape) + " overflows 64 bits");
    bytes *= d;
  }
  return bytes;
}

// data_offsets are relative to the data section that follows the header; anything that is not
// a pair of unsigned integers inside that section would read the header or past the file.
Status parseOffsets(const Json &entry, const std::string &where, uint64_t dataStart,
                    uint64_t dataSize, TensorInfo &info) {
  auto it = entry.find("data_offsets");
  if (it == entry.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned())
    return dataLoss(where + ": 'data_offsets' must be two non-negative integers [begin, end] "
                            "relative to the data section");
  uint64_t begin = (*it)[0].get<uint64_t>();
  uint64_t end = (*it)[1].get<uint64_t>();
  if (begin > end || end > dataSize)
    return dataLoss(where + ": data_offsets [" + std::to_string(begin) + ", " +
                    std::to_string(end) + "] are outside the data section (" +
                    std::to_string(dataSize) + " bytes)");
  info.offset = dataStart + begin;
  info.size = end - begin;
  return okStatus();
}

Result<TensorInfo> parseTensorEntry(const std::string &path, const std::string &name,
                                    const Json &entry, uint64_t dataStart, uint64_t dataSize) {
  std::string where = path + ": tensor '" + name + "'";
  if (!entry.is_object())
    return dataLoss(where + ": header entry must be an object");
  TensorInfo info;
  info.name = name;
  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string())
    return dataLoss(where + ": 'dtype' must be a string");
  KILN_ASSIGN_OR_RETURN(info.dtype, parseDType(dtype->get<std::string>(), where));
  KILN_RETURN_IF_ERROR(parseShape(entry, where, info));
  KILN_RETURN_IF_ERROR(parseOffsets(entry, where, dataStart, dataSize, info));
  KILN_ASSIGN_OR_RETURN(uint64_t expected, expectedBytes(info, where));
  if (expected != info.size)
    return dataLoss(where + ": shape " + shapeString(info.shape) + " x " +
                    tensorDTypeName(info.dtype) + " needs " + std::to_string(expected) +
                    " bytes but data_offsets span " + std::to_string(info.size));
  return info;
}

Status checkNoOverlap(const std::string &path, std::vector<const TensorInfo *> tensors) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo *a, const TensorInfo *b) { return a->offset < b->offset; });
  for (size_t i = 1; i < tensors.size(); ++i) {
    const TensorInfo &prev = *tensors[i - 1];
    if (prev.size && tensors[i]->size && prev.offset + prev.size > tensors[i]->offset)
      return dataLoss(path + ": tensors '" + prev.name + "' and '" + tensors[i]->name +
                      "' overlap in the data section");
  }
  return okStatus();
}

Result<Json> parseJsonObject(std::string_view text, const std::string &what) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return dataLoss(what + " is not a valid JSON object");
  return json;
}

// Shard names come from a file in the model directory; keep them inside it.
bool isPlainShardName(const std::string &name) {
  return !name.empty() && name.front() != '/' && name.find("..") == std::string::npos;
}

Result<std::map<std::string, std::string>> readWeightMap(const std::string &indexPath) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(indexPath));
  KILN_ASSIGN_OR_RETURN(Json index, parseJsonObject(text, indexPath));
  auto weightMap = index.find("weight_map");
  if (weightMap == index.end() || !weightMap->is_object())
    return dataLoss(indexPath + ": field 'weight_map' must be an object of tensor -> shard file");
  std::map<std::string, std::string> out;
  for (const auto &[tensor, shard] : weightMap->items()) {
    if (!shard.is_string() || !isPlainShardName(shard.get<std::string>()))
      return dataLoss(indexPath + ": weight_map entry '" + tensor +
                      "' must name a shard file inside the model directory, got " + shard.dump());
    out[tensor] = shard.get<std::string>();
  }
  if (out.empty())
    return dataLoss(indexPath + ": field 'weight_map' is empty");
  return out;
}

} // namespace

Status SafetensorsCheckpoint::addFile(const std::string &path,
                                      std::map<std::string, std::string> &metadata) {
  KILN_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto file = std::make_shared<MappedFile>(std::move(mapped));
  const uint64_t fileSize = file->size();
  if (fileSize < 8)
    return dataLoss(path + ": " + std::to_string(fileSize) +
                    " bytes is too small for a safetensors file (8-byte header length missing)");
  uint64_t headerLen = 0;
  std::memcpy(&headerLen, file->data(), 8);
  if (headerLen > fileSize - 8)
    return dataLoss(path + ": header length " + std::to_string(headerLen) +
                    " is larger than the file (" + std::to_string(fileSize) + " bytes)");
  std::string_view headerText(reinterpret_cast<const char *>(file->data()) + 8, headerLen);
  KILN_ASSIGN_OR_RETURN(Json header, parseJsonObject(headerText, path + ": header"));
  const uint64_t dataStart = 8 + headerLen;
  const int fileIndex = static_cast<int>(files_.size());
  std::vector<const TensorInfo *> added;
  for (const auto &[name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        return dataLoss(path + ": '__metadata__' must be an object of strings");
      for (const auto &[key, value] : entry.items())
        if (value.is_string())
          metadata.emplace(key, value.get<std::string>());
      continue;
    }
    KILN_ASSIGN_OR_RETURN(TensorInfo info,
                          parseTensorEntry(path, name, entry, dataStart, fileSize - dataStart));
    info.fileIndex = fileIndex;
    auto existing = tensors_.find(name);
    if (existing != tensors_.end())
      return dataLoss(path + ": tensor '" + name + "' is also stored in " +
                      filePath(existing->second));
    added.push_back(&tensors_.emplace(name, std::move(info)).first->second);
  }
  files_.push_back(std::move(file));
  return checkNoOverlap(path, std::move(added));
}

// A `__metadata__` entry is an alias when its key is not a stored tensor and its value is:
// safetensors cannot store shared storage twice, so tied weights are saved once and named here.
Status SafetensorsCheckpoint::resolveAliases(const std::map<std::string, std::string> &metadata) {
  for (const auto &[key, value] : metadata)
    if (!tensors_.count(key) && tensors_.count(value))
      aliases_[key] = value;
  return okStatus();
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string &modelDir) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.modelDir_ = modelDir;
  std::map<std::string, std::string> metadata;
  std::string indexPath = modelDir + "/" + kIndexFile;
  if (!fileExists(indexPath)) {
    std::string single = modelDir + "/" + kSingleFile;
    if (!fileExists(single))
      return notFound(modelDir + ": neither " + kSingleFile + " nor " + kIndexFile + " found");
    KILN_RETURN_IF_ERROR(checkpoint.addFile(single, metadata));
    KILN_RETURN_IF_ERROR(checkpoint.resolveAliases(metadata));
    return checkpoint;
  }
  KILN_ASSIGN_OR_RETURN(auto weightMap, readWeightMap(indexPath));
  std::set<std::string> shards;
  for (const auto &entry : weightMap)
    shards.insert(entry.second);
  std::map<std::string, int> shardIndex;
  for (const std::string &shard : shards) {
    std::string path = modelDir + "/" + shard;
    if (!fileExists(path))
      return notFound(indexPath + ": shard file '" + shard + "' is missing (" + path + ")");
    shardIndex[shard] = static_cast<int>(checkpoint.files_.size());
    KILN_RETURN_IF_ERROR(checkpoint.addFile(path, metadata));
  }
  KILN_RETURN_IF_ERROR(checkpoint.resolveAliases(metadata));
  for (const auto &[tensor, shard] : weightMap) {
    auto info = checkpoint.info(tensor);
    if (!info.isOk())
      return dataLoss(indexPath + ": weight_map lists tensor '" + tensor + "' in '" + shard +
                      "' but no shard stores it");
    if ((*info)->fileIndex != shardIndex[shard])
      return dataLoss(indexPath + ": weight_map lists tensor '" + tensor + "' in '" + shard +
                      "' but it is stored in " + checkpoint.filePath(**info));
  }
  return checkpoint;
}

bool SafetensorsCheckpoint::contains(const std::string &name) const {
  return tensors_.count(name) || aliases_.count(name);
}

Result<const TensorInfo *> SafetensorsCheckpoint::info(const std::string &name) const {
  auto alias = aliases_.find(name);
  const std::string &stored = alias == aliases_.end() ? name : alias->second;
  auto it = tensors_.find(stored);
  if (it == tensors_.end())
    return notFound(modelDir_ + ": tensor '" + name + "' is not in the checkpoint");
  return &it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto &entry : tensors_)
    out.push_back(entry.first);
  return out;
}

const std::string &SafetensorsCheckpoint::filePath(const TensorInfo &info) const {
  return files_[static_cast<size_t>(info.fileIndex)]->path();
}

Result<std::span<const uint8_t>> SafetensorsCheckpoint::rawBytes(const std::string &name) const {
  KILN_ASSIGN_OR_RETURN(const TensorInfo *info, this->info(name));
  const MappedFile &file = *files_[static_cast<size_t>(info->fileIndex)];
  return file.bytes().subspan(info->offset, info->size);
}

Result<std::vector<float>> SafetensorsCheckpoint::readF32(const std::string &name) const {
  KILN_ASSIGN_OR_RETURN(const TensorInfo *info, this->info(name));
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, rawBytes(name));
  const size_t count = static_cast<size_t>(info->numElements());
  if (info->dtype == TensorDType::kI32)
    return invalidArgument("tensor '" + name +
                           "' holds I32 values, not weights (a quantized checkpoint's packed "
                           "words need its config.json quantization_config)");
  if (info->dtype == TensorDType::kF8E4M3)
    return invalidArgument("tensor '" + name +
                           "' holds F8_E4M3 values, which stand for weights only with their "
                           "scales (an fp8 checkpoint needs its config.json quantization_config)");
  std::vector<float> out(count);
  if (info->dtype == TensorDType::kF32) {
    if (count > 0) // an empty vector's data() may be null, which memcpy must not get
      std::memcpy(out.data(), bytes.data(), count * sizeof(float));
    return out;
  }
  // Tensors may start at any byte offset, so read the halves with memcpy rather than casting.
  const bool isF16 = info->dtype == TensorDType::kF16;
  for (size_t i = 0; i < count; ++i) {
    uint16_t half;
    std::memcpy(&half, bytes.data() + 2 * i, 2);
    out[i] = isF16 ? f16ToF32(half) : bf16ToF32(half);
  }
  return out;
}

} // namespace kiln::compiler
