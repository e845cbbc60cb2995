// Builds GGUF bytes for the reader's tests, including malformed ones: every field can be set to
// a value no real writer would produce. Layout as the GGUF spec: header, key/values, tensor
// infos, padding to the alignment, tensor data.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::compiler::testing {

template <typename T> std::string podBytes(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

// A gguf_string: uint64 length, then the bytes.
inline std::string ggufString(const std::string &text) {
  return podBytes<uint64_t>(text.size()) + text;
}

class GgufBuilder {
public:
  std::string magic = "GGUF";
  uint32_t version = 3;
  uint64_t alignment = 32; // where the builder puts the data; add "general.alignment" to say so
  // When set, written instead of the real counts.
  int64_t tensorCountOverride = -1;
  int64_t kvCountOverride = -1;

  // A key/value with its value already encoded (`value` holds the bytes after the type).
  GgufBuilder &kvRaw(const std::string &key, uint32_t type, const std::string &value) {
    kvs_ += ggufString(key) + podBytes(type) + value;
    ++kvCount_;
    return *this;
  }
  GgufBuilder &kvU32(const std::string &key, uint32_t value) {
    return kvRaw(key, 4, podBytes(value));
  }
  GgufBuilder &kvU16(const std::string &key, uint16_t value) {
    return kvRaw(key, 2, podBytes(value));
  }
  GgufBuilder &kvString(const std::string &key, const std::string &value) {
    return kvRaw(key, 8, ggufString(value));
  }

  // A tensor whose data the builder places at the next aligned offset.
  GgufBuilder &tensor(const std::string &name, std::vector<uint64_t> dims, uint32_t type,
                      const std::string &data) {
    const uint64_t offset = (data_.size() + alignment - 1) / alignment * alignment;
    data_.resize(offset, '\0');
    data_ += data;
    return tensorInfo(name, dims, type, offset);
  }
  // A tensor info only, with any offset.
  GgufBuilder &tensorInfo(const std::string &name, const std::vector<uint64_t> &dims, uint32_t type,
                          uint64_t offset) {
    infos_ += ggufString(name) + podBytes<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (uint64_t dim : dims)
      infos_ += podBytes(dim);
    infos_ += podBytes(type) + podBytes(offset);
    ++tensorCount_;
    return *this;
  }
  // Bytes appended after the data section.
  GgufBuilder &trailing(const std::string &bytes) {
    trailing_ += bytes;
    return *this;
  }

  std::string build() const {
    std::string out = magic + podBytes(version);
    out += podBytes<uint64_t>(tensorCountOverride >= 0 ? tensorCountOverride : tensorCount_);
    out += podBytes<uint64_t>(kvCountOverride >= 0 ? kvCountOverride : kvCount_);
    out += kvs_ + infos_;
    if (tensorCount_ > 0) {
      out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
      out += data_;
    }
    return out + trailing_;
  }
  std::vector<uint8_t> bytes() const {
    const std::string text = build();
    return {text.begin(), text.end()};
  }

private:
  std::string kvs_, infos_, data_, trailing_;
  uint64_t kvCount_ = 0, tensorCount_ = 0;
};

} // namespace kiln::compiler::testing
