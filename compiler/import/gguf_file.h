// GGUF files (llama.cpp's single-file model format, version 2 and 3): the header, the typed
// metadata key/values and the tensor table, read with bounds checks. Every length, count and
// offset read from the file is checked against the bytes that remain before it is used: a
// truncated or hostile file gives an error naming the byte offset, never a crash or an
// allocation of a size taken from the file. Tensor data stays memory-mapped; dequantization is
// compiler/import/gguf_dequant.h. Plain C++ (no MLIR).
#pragma once

#include "runtime/base/file.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::compiler {

// gguf_type: the metadata value types, numbered as the GGUF spec numbers them.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char *ggufValueTypeName(GgufValueType type); // "uint32", "string", "array", ...

// One metadata value. Scalars: integers and bools in `intValue` (uint64 above INT64_MAX is an
// error at read time), floats in `floatValue`, strings in `stringValue`. Arrays: `elementType`
// and one of `ints` / `floats` / `strings` by element kind (arrays of arrays are refused).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint32;
  GgufValueType elementType = GgufValueType::kUint8; // arrays only
  int64_t intValue = 0;
  double floatValue = 0.0;
  std::string stringValue;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool isInteger() const; // any integer type or bool
  bool isFloat() const;   // float32 or float64
  bool isArray() const { return type == GgufValueType::kArray; }
  size_t arraySize() const; // 0 for scalars
};

// ggml_type numbers of the tensor types (ggml.h); others exist and are reported by number.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};

struct GgufTensor {
  std::string name;
  // A GgmlType value, or another type ggml defines (kept; dequantizeGgml reports it when read).
  // A number ggml does not define is a parse error: without its block size the tensor's byte
  // size, and so whether its data lies inside the file, cannot be known.
  uint32_t type = 0;
  std::vector<int64_t> dims; // GGUF order: dims[0] is the innermost (contiguous) dimension
  int fileIndex = 0;         // which file of a split model holds the data
  uint64_t offset = 0;       // absolute byte offset in that file
  uint64_t size = 0;         // bytes (from the type's block size and the element count)
  int64_t numElements() const;
  // Row-major shape, outermost first (dims reversed): [rows, cols] for a matrix.
  std::vector<int64_t> shape() const;
};

class GgufFile {
public:
  // Opens a .gguf file, a directory holding exactly one model (one .gguf, or one split set), or
  // the first part of a split model (NAME-00001-of-0000N.gguf: every part is opened; the
  // metadata is the first part's, tensors come from all of them; a missing part is an error).
  static Result<GgufFile> open(const std::string &path);
  // Parses one file's bytes (kept alive by `keepAlive`, may be null for bytes that outlive the
  // result). `source` names the file in errors. Used by open() and by tests.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, const std::string &source,
                                std::shared_ptr<const void> keepAlive = nullptr);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string &path() const { return path_; } // the file or directory given to open()

  const std::map<std::string, GgufValue> &metadata() const { return metadata_; }
  const GgufValue *find(const std::string &key) const; // nullptr when absent
  // Typed reads naming the key (and the type found) in errors. Integers accept any integer
  // type; floats accept float and integer types.
  Result<int64_t> getInt(const std::string &key) const;
  Result<double> getFloat(const std::string &key) const;
  Result<std::string> getString(const std::string &key) const;
  Result<bool> getBool(const std::string &key) const;
  int64_t getIntOr(const std::string &key, int64_t fallback) const;
  double getFloatOr(const std::string &key, double fallback) const;
  std::string getStringOr(const std::string &key, const std::string &fallback) const;
  bool getBoolOr(const std::string &key, bool fallback) const;

  const std::vector<GgufTensor> &tensors() const { return tensors_; }
  const GgufTensor *tensor(const std::string &name) const; // nullptr when absent
  // The tensor's stored bytes (inside its file; checked at open time).
  std::span<const uint8_t> tensorBytes(const GgufTensor &tensor) const;

private:
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::string path_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensorIndex_;
  std::vector<std::span<const uint8_t>> fileBytes_;
  std::vector<std::shared_ptr<const void>> keepAlive_; // mappings behind fileBytes_
};

// True for a path kiln compile should read as GGUF: a file ending in .gguf, or a directory that
// holds a .gguf file and no config.json.
bool isGgufPath(const std::string &path);

} // namespace kiln::compiler
