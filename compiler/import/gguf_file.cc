#include "compiler/import/gguf_file.h"

#include "compiler/import/gguf_dequant.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; kiln reads it in place");

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// The smallest encodings of a key/value pair (empty key, type, a one-byte value) and of a tensor
// info (empty name, n_dims, one dimension, type, offset): a count read from the file larger than
// the remaining bytes divided by these cannot be genuine, and is refused before anything is
// allocated for it.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// A name from the file, quoted for an error message: at most 80 bytes, non-printable bytes as \xNN.
std::string quotedName(const std::string &name) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out + (name.size() > 80 ? "...'" : "'");
}

// Reads little-endian values from the file's bytes; every read checks the bytes left first.
class ByteReader {
public:
  ByteReader(std::span<const uint8_t> bytes, const std::string &source)
      : bytes_(bytes), source_(source) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  uint64_t size() const { return bytes_.size(); }

  Status error(uint64_t at, const std::string &what) const {
    return dataLoss(source_ + ": offset " + std::to_string(at) + ": " + what);
  }

  template <typename T> Result<T> read(const std::string &what) {
    if (remaining() < sizeof(T))
      return error(pos_, "file ends inside " + what + " (" + std::to_string(sizeof(T)) +
                             " bytes needed, " + std::to_string(remaining()) + " left)");
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  Result<std::string> readString(const std::string &what) {
    const uint64_t at = pos_;
    KILN_ASSIGN_OR_RETURN(uint64_t length, read<uint64_t>(what + " length"));
    if (length > remaining())
      return error(at, what + " length " + std::to_string(length) + " exceeds the " +
                           std::to_string(remaining()) + " bytes left");
    std::string out(reinterpret_cast<const char *>(bytes_.data() + pos_), length);
    pos_ += length;
    return out;
  }

  // A count of items of at least `minBytes` each must fit in the bytes left.
  Status checkCount(uint64_t at, uint64_t count, uint64_t minBytes, const std::string &what) {
    if (count > remaining() / minBytes)
      return error(at, what + " " + std::to_string(count) + " exceeds what the " +
                           std::to_string(remaining()) + " bytes left can hold (" +
                           std::to_string(minBytes) + " bytes or more each)");
    return okStatus();
  }

private:
  std::span<const uint8_t> bytes_;
  const std::string &source_;
  uint64_t pos_ = 0;
};

constexpr uint32_t kNumValueTypes = 13;

uint64_t minValueBytes(GgufValueType type) {
  switch (type) {
  case GgufValueType::kUint8:
  case GgufValueType::kInt8:
  case GgufValueType::kBool:
    return 1;
  case GgufValueType::kUint16:
  case GgufValueType::kInt16:
    return 2;
  case GgufValueType::kUint32:
  case GgufValueType::kInt32:
  case GgufValueType::kFloat32:
    return 4;
  default:
    return 8; // 64-bit scalars; a string's length; an array's type + count (12)
  }
}

Result<GgufValueType> readValueType(ByteReader &reader, const std::string &what) {
  const uint64_t at = reader.offset();
  KILN_ASSIGN_OR_RETURN(uint32_t type, reader.read<uint32_t>(what + " type"));
  if (type >= kNumValueTypes)
    return reader.error(at, what + " has unknown value type " + std::to_string(type) +
                                " (GGUF defines 0 to 12)");
  return static_cast<GgufValueType>(type);
}

template <typename T> Result<int64_t> readSigned(ByteReader &reader, const std::string &what) {
  KILN_ASSIGN_OR_RETURN(T value, reader.read<T>(what));
  return static_cast<int64_t>(value);
}

// Integers and bools, widened to int64 (uint64 above INT64_MAX is refused).
Result<int64_t> readInteger(ByteReader &reader, GgufValueType type, const std::string &what) {
  const uint64_t at = reader.offset();
  switch (type) {
  case GgufValueType::kUint8:
    return readSigned<uint8_t>(reader, what);
  case GgufValueType::kInt8:
    return readSigned<int8_t>(reader, what);
  case GgufValueType::kUint16:
    return readSigned<uint16_t>(reader, what);
  case GgufValueType::kInt16:
    return readSigned<int16_t>(reader, what);
  case GgufValueType::kUint32:
    return readSigned<uint32_t>(reader, what);
  case GgufValueType::kInt32:
    return readSigned<int32_t>(reader, what);
  case GgufValueType::kInt64:
    return readSigned<int64_t>(reader, what);
  case GgufValueType::kUint64: {
    KILN_ASSIGN_OR_RETURN(uint64_t value, reader.read<uint64_t>(what));
    if (value > kInt64Max)
      return reader.error(at, what + ": uint64 value " + std::to_string(value) +
                                  " is larger than INT64_MAX, the largest kiln reads");
    return static_cast<int64_t>(value);
  }
  default: { // kBool
    KILN_ASSIGN_OR_RETURN(uint8_t value, reader.read<uint8_t>(what));
    if (value > 1)
      return reader.error(at, what + ": bool value " + std::to_string(value) + " is not 0 or 1");
    return static_cast<int64_t>(value);
  }
  }
}

Result<double> readFloat(ByteReader &reader, GgufValueType type, const std::string &what) {
  if (type == GgufValueType::kFloat32) {
    KILN_ASSIGN_OR_RETURN(float value, reader.read<float>(what));
    return static_cast<double>(value);
  }
  return reader.read<double>(what);
}

bool isIntegerType(GgufValueType type) {
  return type != GgufValueType::kFloat32 && type != GgufValueType::kFloat64 &&
         type != GgufValueType::kString && type != GgufValueType::kArray;
}

Status readArray(ByteReader &reader, GgufValue &value, const std::string &what) {
  const uint64_t typeAt = reader.offset();
  KILN_ASSIGN_OR_RETURN(value.elementType, readValueType(reader, what + " element"));
  if (value.elementType == GgufValueType::kArray)
    return reader.error(typeAt, what + " is an array of arrays, which kiln does not read");
  const uint64_t countAt = reader.offset();
  KILN_ASSIGN_OR_RETURN(uint64_t count, reader.read<uint64_t>(what + " array count"));
  KILN_RETURN_IF_ERROR(
      reader.checkCount(countAt, count, minValueBytes(value.elementType), what + " array count"));
  // No reserve(): the vectors grow with what was actually read.
  for (uint64_t i = 0; i < count; ++i) {
    if (value.elementType == GgufValueType::kString) {
      KILN_ASSIGN_OR_RETURN(std::string element, reader.readString(what + " element"));
      value.strings.push_back(std::move(element));
    } else if (isIntegerType(value.elementType)) {
      KILN_ASSIGN_OR_RETURN(int64_t element, readInteger(reader, value.elementType, what));
      value.ints.push_back(element);
    } else {
      KILN_ASSIGN_OR_RETURN(double element, readFloat(reader, value.elementType, what));
      value.floats.push_back(element);
    }
  }
  return okStatus();
}

Status readValue(ByteReader &reader, GgufValue &value, const std::string &what) {
  switch (value.type) {
  case GgufValueType::kArray:
    return readArray(reader, value, what);
  case GgufValueType::kString: {
    KILN_ASSIGN_OR_RETURN(value.stringValue, reader.readString(what + " string"));
    return okStatus();
  }
  case GgufValueType::kFloat32:
  case GgufValueType::kFloat64: {
    KILN_ASSIGN_OR_RETURN(value.floatValue, readFloat(reader, value.type, what));
    return okStatus();
  }
  default: {
    KILN_ASSIGN_OR_RETURN(value.intValue, readInteger(reader, value.type, what));
    return okStatus();
  }
  }
}

struct Header {
  uint32_t version = 0;
  uint64_t tensorCount = 0;
  uint64_t kvCount = 0;
};

Result<Header> readHeader(ByteReader &reader) {
  KILN_ASSIGN_OR_RETURN(uint32_t magic, reader.read<uint32_t>("the magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0)
    return reader.error(0, "not a GGUF file (the first four bytes are not \"GGUF\")");
  Header header;
  KILN_ASSIGN_OR_RETURN(header.version, reader.read<uint32_t>("the version"));
  if (header.version != 2 && header.version != 3) {
    const std::string hint = (header.version & 0xffff) == 0 && header.version != 0
                                 ? " (a big-endian GGUF? kiln reads little-endian files)"
                                 : "";
    return reader.error(4, "GGUF version " + std::to_string(header.version) +
                               " is not supported; kiln reads versions 2 and 3" + hint);
  }
  KILN_ASSIGN_OR_RETURN(header.tensorCount, reader.read<uint64_t>("the tensor count"));
  KILN_ASSIGN_OR_RETURN(header.kvCount, reader.read<uint64_t>("the metadata count"));
  KILN_RETURN_IF_ERROR(reader.checkCount(16, header.kvCount, kMinKvBytes, "metadata count"));
  KILN_RETURN_IF_ERROR(
      reader.checkCount(8, header.tensorCount, kMinTensorInfoBytes, "tensor count"));
  return header;
}

// Reads the key/values; returns general.alignment (default 32) after checking it.
Result<uint64_t> readMetadata(ByteReader &reader, uint64_t count,
                              std::map<std::string, GgufValue> &metadata) {
  uint64_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t at = reader.offset();
    KILN_ASSIGN_OR_RETURN(std::string key, reader.readString("metadata key"));
    const std::string what = "metadata key " + quotedName(key);
    GgufValue value;
    KILN_ASSIGN_OR_RETURN(value.type, readValueType(reader, what));
    const uint64_t valueAt = reader.offset();
    KILN_RETURN_IF_ERROR(readValue(reader, value, what));
    if (key == "general.alignment") {
      if (!isIntegerType(value.type) || value.type == GgufValueType::kBool || value.intValue <= 0 ||
          !std::has_single_bit(static_cast<uint64_t>(value.intValue)))
        return reader.error(valueAt, "general.alignment must be a nonzero power of two");
      alignment = static_cast<uint64_t>(value.intValue);
    }
    if (!metadata.emplace(std::move(key), std::move(value)).second)
      return reader.error(at, "duplicate " + what);
  }
  return alignment;
}

struct TensorEntry {
  GgufTensor tensor;
  uint64_t infoAt = 0;         // where its tensor info starts, for errors
  uint64_t relativeOffset = 0; // from the start of the data section
};

Status readTensorInfo(ByteReader &reader, TensorEntry &entry) {
  entry.infoAt = reader.offset();
  KILN_ASSIGN_OR_RETURN(entry.tensor.name, reader.readString("tensor name"));
  const std::string what = "tensor " + quotedName(entry.tensor.name);
  const uint64_t dimsAt = reader.offset();
  KILN_ASSIGN_OR_RETURN(uint32_t nDims, reader.read<uint32_t>(what + " n_dims"));
  if (nDims < 1 || nDims > kMaxDims)
    return reader.error(dimsAt,
                        what + " has " + std::to_string(nDims) + " dimensions; GGUF allows 1 to 4");
  uint64_t elements = 1;
  for (uint32_t d = 0; d < nDims; ++d) {
    const uint64_t at = reader.offset();
    KILN_ASSIGN_OR_RETURN(uint64_t dim, reader.read<uint64_t>(what + " dimension"));
    if (dim < 1 || dim > kInt64Max || __builtin_mul_overflow(elements, dim, &elements) ||
        elements > kInt64Max)
      return reader.error(at, what + " dimension " + std::to_string(d) + " is " +
                                  std::to_string(dim) +
                                  (dim < 1 ? "; dimensions must be at least 1"
                                           : ", and the element count overflows int64"));
    entry.tensor.dims.push_back(static_cast<int64_t>(dim));
  }
  KILN_ASSIGN_OR_RETURN(entry.tensor.type, reader.read<uint32_t>(what + " type"));
  KILN_ASSIGN_OR_RETURN(entry.relativeOffset, reader.read<uint64_t>(what + " offset"));
  return okStatus();
}

// Sizes the tensor from its type and places it in the file: whole blocks per row, an aligned
// offset, and data inside the file. A type number ggml does not define is an error here, since
// its size (and so whether its data lies inside the file) cannot be known; a type ggml defines
// but kiln does not dequantize is kept, and reported by dequantizeGgml when it is read.
Status placeTensor(const ByteReader &reader, uint64_t dataStart, uint64_t alignment,
                   TensorEntry &entry) {
  GgufTensor &tensor = entry.tensor;
  const std::string what = "tensor " + quotedName(tensor.name);
  const GgmlTypeTraits *traits = ggmlTypeTraits(tensor.type);
  if (traits == nullptr)
    return reader.error(entry.infoAt, what + " has ggml type " + std::to_string(tensor.type) +
                                          ", which ggml does not define (or no longer does)");
  if (tensor.dims[0] % traits->blockSize != 0)
    return reader.error(entry.infoAt, what + " of type " + traits->name + " has rows of " +
                                          std::to_string(tensor.dims[0]) +
                                          " elements, not a multiple of its block size " +
                                          std::to_string(traits->blockSize));
  const uint64_t blocks = static_cast<uint64_t>(tensor.numElements() / traits->blockSize);
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->typeSize), &tensor.size))
    return reader.error(entry.infoAt, what + " byte size overflows 64 bits");
  if (entry.relativeOffset % alignment != 0)
    return reader.error(entry.infoAt,
                        what + " data offset " + std::to_string(entry.relativeOffset) +
                            " is not a multiple of the alignment " + std::to_string(alignment));
  const uint64_t dataBytes = dataStart <= reader.size() ? reader.size() - dataStart : 0;
  if (dataStart > reader.size() || entry.relativeOffset > dataBytes ||
      tensor.size > dataBytes - entry.relativeOffset)
    return reader.error(entry.infoAt,
                        what + " data (" + std::to_string(tensor.size) + " bytes at offset " +
                            std::to_string(entry.relativeOffset) + " of the data section at " +
                            std::to_string(dataStart) + ") runs past the end of the file (" +
                            std::to_string(reader.size()) + " bytes)");
  tensor.offset = dataStart + entry.relativeOffset;
  return okStatus();
}

// NAME-00001-of-00003.gguf (llama.cpp's split naming: "%s-%05d-of-%05d.gguf").
struct SplitName {
  std::string prefix;
  int index = 0; // 1-based
  int count = 0;
};

std::optional<SplitName> parseSplitName(const std::string &path) {
  constexpr size_t kTail = 20; // "-00001-of-00003.gguf"
  if (path.size() <= kTail)
    return std::nullopt;
  const std::string tail = path.substr(path.size() - kTail);
  auto digits = [&](size_t at) {
    int value = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (tail[i] < '0' || tail[i] > '9')
        return -1;
      value = value * 10 + (tail[i] - '0');
    }
    return value;
  };
  if (tail[0] != '-' || tail.compare(6, 4, "-of-") != 0 || tail.compare(15, 5, ".gguf") != 0)
    return std::nullopt;
  SplitName name{path.substr(0, path.size() - kTail), digits(1), digits(10)};
  if (name.index < 1 || name.count < 1 || name.index > name.count)
    return std::nullopt;
  return name;
}

std::string splitPartPath(const SplitName &name, int index) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", index, name.count);
  return name.prefix + tail;
}

bool endsWithGguf(const std::string &path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::vector<std::string> ggufFilesIn(const std::string &dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::error_code fileEc;
    if (entry.is_regular_file(fileEc) && endsWithGguf(entry.path().filename().string()))
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The file to open for a directory: its one .gguf, or the first part of its one split set.
Result<std::string> modelFileInDirectory(const std::string &dir) {
  const std::vector<std::string> files = ggufFilesIn(dir);
  if (files.empty())
    return notFound(dir + ": the directory holds no .gguf file");
  if (files.size() == 1)
    return files[0];
  std::optional<SplitName> first = parseSplitName(files[0]);
  bool oneSet = first && first->index == 1 && static_cast<size_t>(first->count) == files.size();
  for (size_t i = 0; oneSet && i < files.size(); ++i)
    oneSet = files[i] == splitPartPath(*first, static_cast<int>(i) + 1);
  if (oneSet)
    return files[0];
  std::string list;
  for (const std::string &file : files)
    list += (list.empty() ? "" : ", ") + fs::path(file).filename().string();
  return invalidArgument(dir + ": the directory holds more than one model (" + list +
                         "); name the .gguf file to read");
}

Result<GgufFile> openOneFile(const std::string &path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.isOk())
    return mapped.status();
  auto shared = std::make_shared<MappedFile>(std::move(mapped).value());
  const std::span<const uint8_t> bytes = shared->bytes();
  return GgufFile::parse(bytes, path, std::move(shared));
}

// split.count / split.no (0-based), when a part has them, must agree with the file name.
Status checkSplitKeys(const GgufFile &part, const std::string &path, int index, int count) {
  const int64_t splitCount = part.getIntOr("split.count", count);
  const int64_t splitNo = part.getIntOr("split.no", index - 1);
  if (splitCount != count || splitNo != index - 1)
    return dataLoss(path + ": metadata says part " + std::to_string(splitNo) + " (0-based) of " +
                    std::to_string(splitCount) + ", but the file name says part " +
                    std::to_string(index - 1) + " of " + std::to_string(count));
  return okStatus();
}

} // namespace

const char *ggufValueTypeName(GgufValueType type) {
  static const char *const kNames[kNumValueTypes] = {
      "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
      "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto index = static_cast<uint32_t>(type);
  return index < kNumValueTypes ? kNames[index] : "unknown";
}

bool GgufValue::isInteger() const {
  return isIntegerType(type);
}

bool GgufValue::isFloat() const {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

size_t GgufValue::arraySize() const {
  if (!isArray())
    return 0;
  if (elementType == GgufValueType::kString)
    return strings.size();
  return isIntegerType(elementType) ? ints.size() : floats.size();
}

int64_t GgufTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : dims)
    count *= dim;
  return count;
}

std::vector<int64_t> GgufTensor::shape() const {
  return {dims.rbegin(), dims.rend()};
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, const std::string &source,
                                 std::shared_ptr<const void> keepAlive) {
  ByteReader reader(bytes, source);
  KILN_ASSIGN_OR_RETURN(Header header, readHeader(reader));
  GgufFile file;
  file.version_ = header.version;
  file.path_ = source;
  KILN_ASSIGN_OR_RETURN(file.alignment_, readMetadata(reader, header.kvCount, file.metadata_));
  KILN_RETURN_IF_ERROR(
      reader.checkCount(reader.offset(), header.tensorCount, kMinTensorInfoBytes, "tensor count"));
  std::vector<TensorEntry> entries;
  for (uint64_t i = 0; i < header.tensorCount; ++i) {
    TensorEntry entry;
    KILN_RETURN_IF_ERROR(readTensorInfo(reader, entry));
    if (!file.tensorIndex_.emplace(entry.tensor.name, entries.size()).second)
      return reader.error(entry.infoAt, "duplicate tensor " + quotedName(entry.tensor.name));
    entries.push_back(std::move(entry));
  }
  // The data section starts at the next multiple of the alignment (overflow-safe: the offset is
  // at most the file size, and a start past the file is caught for each tensor).
  const uint64_t end = reader.offset();
  const uint64_t padding = (file.alignment_ - end % file.alignment_) % file.alignment_;
  const uint64_t dataStart = padding > std::numeric_limits<uint64_t>::max() - end
                                 ? std::numeric_limits<uint64_t>::max()
                                 : end + padding;
  for (TensorEntry &entry : entries) {
    KILN_RETURN_IF_ERROR(placeTensor(reader, dataStart, file.alignment_, entry));
    file.tensors_.push_back(std::move(entry.tensor));
  }
  file.fileBytes_.push_back(bytes);
  file.keepAlive_.push_back(std::move(keepAlive));
  return file;
}

Result<GgufFile> GgufFile::open(const std::string &path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    KILN_ASSIGN_OR_RETURN(file, modelFileInDirectory(path));
  } else if (!fs::exists(path, ec)) {
    return notFound(path + ": no such file or directory");
  }
  const std::optional<SplitName> split = parseSplitName(file);
  if (!split || split->count == 1) {
    KILN_ASSIGN_OR_RETURN(GgufFile model, openOneFile(file));
    const int64_t parts = model.getIntOr("split.count", 1);
    if (parts != 1)
      return dataLoss(file + ": metadata says this is one part of a split model of " +
                      std::to_string(parts) +
                      " parts, but the file name is not NAME-0000i-of-0000N.gguf");
    model.path_ = path;
    return model;
  }
  GgufFile model;
  for (int index = 1; index <= split->count; ++index) {
    const std::string partPath = splitPartPath(*split, index);
    if (!fileExists(partPath))
      return notFound(partPath + ": part " + std::to_string(index) + " of the " +
                      std::to_string(split->count) + "-part split model is missing");
    KILN_ASSIGN_OR_RETURN(GgufFile part, openOneFile(partPath));
    KILN_RETURN_IF_ERROR(checkSplitKeys(part, partPath, index, split->count));
    if (index == 1) {
      model = std::move(part);
      continue;
    }
    for (GgufTensor &tensor : part.tensors_) {
      tensor.fileIndex = index - 1;
      if (!model.tensorIndex_.emplace(tensor.name, model.tensors_.size()).second)
        return dataLoss(partPath + ": tensor " + quotedName(tensor.name) +
                        " is also in an earlier part of the split model");
      model.tensors_.push_back(std::move(tensor));
    }
    model.fileBytes_.push_back(part.fileBytes_[0]);
    model.keepAlive_.push_back(std::move(part.keepAlive_[0]));
  }
  const int64_t expected = model.getIntOr("split.tensors.count", 0);
  if (expected != 0 && static_cast<size_t>(expected) != model.tensors_.size())
    return dataLoss(splitPartPath(*split, 1) + ": split.tensors.count is " +
                    std::to_string(expected) + " but the parts hold " +
                    std::to_string(model.tensors_.size()) + " tensors");
  model.path_ = path;
  return model;
}

const GgufValue *GgufFile::find(const std::string &key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

std::string describeType(const GgufValue &value) {
  if (value.isArray())
    return std::string("array of ") + ggufValueTypeName(value.elementType);
  return ggufValueTypeName(value.type);
}

Status wrongType(const std::string &path, const std::string &key, const GgufValue &value,
                 const char *expected) {
  return invalidArgument(path + ": GGUF metadata key '" + key + "' is " + describeType(value) +
                         ", expected " + expected);
}

Status missingKey(const std::string &path, const std::string &key) {
  return notFound(path + ": GGUF metadata has no key '" + key + "'");
}

} // namespace

Result<int64_t> GgufFile::getInt(const std::string &key) const {
  const GgufValue *value = find(key);
  if (value == nullptr)
    return missingKey(path_, key);
  if (!value->isInteger())
    return wrongType(path_, key, *value, "an integer");
  return value->intValue;
}

Result<double> GgufFile::getFloat(const std::string &key) const {
  const GgufValue *value = find(key);
  if (value == nullptr)
    return missingKey(path_, key);
  if (value->isFloat())
    return value->floatValue;
  if (value->isInteger() && value->type != GgufValueType::kBool)
    return static_cast<double>(value->intValue);
  return wrongType(path_, key, *value, "a number");
}

Result<std::string> GgufFile::getString(const std::string &key) const {
  const GgufValue *value = find(key);
  if (value == nullptr)
    return missingKey(path_, key);
  if (value->type != GgufValueType::kString)
    return wrongType(path_, key, *value, "a string");
  return value->stringValue;
}

Result<bool> GgufFile::getBool(const std::string &key) const {
  const GgufValue *value = find(key);
  if (value == nullptr)
    return missingKey(path_, key);
  if (value->type != GgufValueType::kBool)
    return wrongType(path_, key, *value, "a bool");
  return value->intValue != 0;
}

int64_t GgufFile::getIntOr(const std::string &key, int64_t fallback) const {
  const GgufValue *value = find(key);
  return value && value->isInteger() ? value->intValue : fallback;
}

double GgufFile::getFloatOr(const std::string &key, double fallback) const {
  auto result = getFloat(key);
  return result.isOk() ? *result : fallback;
}

std::string GgufFile::getStringOr(const std::string &key, const std::string &fallback) const {
  const GgufValue *value = find(key);
  return value && value->type == GgufValueType::kString ? value->stringValue : fallback;
}

bool GgufFile::getBoolOr(const std::string &key, bool fallback) const {
  const GgufValue *value = find(key);
  return value && value->type == GgufValueType::kBool ? value->intValue != 0 : fallback;
}

const GgufTensor *GgufFile::tensor(const std::string &name) const {
  auto it = tensorIndex_.find(name);
  return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensorBytes(const GgufTensor &tensor) const {
  return fileBytes_.at(static_cast<size_t>(tensor.fileIndex)).subspan(tensor.offset, tensor.size);
}

bool isGgufPath(const std::string &path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return endsWithGguf(path);
  if (fs::exists(fs::path(path) / "config.json", ec))
    return false;
  return !ggufFilesIn(path).empty();
}

} // namespace kiln::compiler
