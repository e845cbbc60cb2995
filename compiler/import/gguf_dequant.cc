#include "compiler/import/gguf_dequant.h"

#include "compiler/import/gguf_file.h" // GgmlType
#include "runtime/base/half.h"

#include <array>
#include <bit>
#include <cstring>

namespace kiln::compiler {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF block data is little-endian; kiln reads it in place");

constexpr int64_t kQK = 32;   // elements per block of the legacy types (QK4_0, QK8_0, ...)
constexpr int64_t kQKK = 256; // elements per super-block of the K types (QK_K)
constexpr int kKScaleSize = 12;

// Indexed by ggml_type number (ggml.h). Sizes as ggml's type_traits table defines them; the
// numbers ggml retired (4, 5: Q4_2/Q4_3; 31-33, 36-38: the repacked ARM layouts, now chosen at
// load time) have no entry.
constexpr std::array<GgmlTypeTraits, 42> kTraits = {{
    {"F32", 1, 4, true},          // 0
    {"F16", 1, 2, true},          // 1
    {"Q4_0", kQK, 18, true},      // 2
    {"Q4_1", kQK, 20, true},      // 3
    {nullptr, 0, 0, false},       // 4
    {nullptr, 0, 0, false},       // 5
    {"Q5_0", kQK, 22, true},      // 6
    {"Q5_1", kQK, 24, true},      // 7
    {"Q8_0", kQK, 34, true},      // 8
    {"Q8_1", kQK, 36, false},     // 9
    {"Q2_K", kQKK, 84, true},     // 10
    {"Q3_K", kQKK, 110, true},    // 11
    {"Q4_K", kQKK, 144, true},    // 12
    {"Q5_K", kQKK, 176, true},    // 13
    {"Q6_K", kQKK, 210, true},    // 14
    {"Q8_K", kQKK, 292, false},   // 15
    {"IQ2_XXS", kQKK, 66, false}, // 16
    {"IQ2_XS", kQKK, 74, false},  // 17
    {"IQ3_XXS", kQKK, 98, false}, // 18
    {"IQ1_S", kQKK, 50, false},   // 19
    {"IQ4_NL", kQK, 18, false},   // 20
    {"IQ3_S", kQKK, 110, false},  // 21
    {"IQ2_S", kQKK, 82, false},   // 22
    {"IQ4_XS", kQKK, 136, false}, // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", kQKK, 56, false},   // 29
    {"BF16", 1, 2, true},         // 30
    {nullptr, 0, 0, false},       // 31
    {nullptr, 0, 0, false},       // 32
    {nullptr, 0, 0, false},       // 33
    {"TQ1_0", kQKK, 54, false},   // 34
    {"TQ2_0", kQKK, 66, false},   // 35
    {nullptr, 0, 0, false},       // 36
    {nullptr, 0, 0, false},       // 37
    {nullptr, 0, 0, false},       // 38
    {"MXFP4", kQK, 17, false},    // 39
    {"NVFP4", 64, 36, false},     // 40
    {"Q1_0", 128, 18, false},     // 41
}};

float loadF16(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16ToF32(bits);
}

uint32_t loadU32(const uint8_t *p) {
  uint32_t value;
  std::memcpy(&value, p, 4);
  return value;
}

// The arithmetic below follows ggml-quants.c dequantize_row_* operation by operation (same
// products, same order, fp32 throughout), so the results are bit-identical to ggml's.
// gguf_dequant.cc is built with -ffp-contract=off so that `a * b - c` is never fused.

void dequantizeF32(const uint8_t *src, int64_t count, float *out) {
  std::memcpy(out, src, static_cast<size_t>(count) * 4);
}

void dequantizeF16(const uint8_t *src, int64_t count, float *out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = loadF16(src + 2 * i);
}

void dequantizeBF16(const uint8_t *src, int64_t count, float *out) {
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    out[i] = bf16ToF32(bits);
  }
}

// block_q4_0: fp16 d; 16 bytes of nibbles (low nibbles are elements 0-15, high 16-31).
void dequantizeQ4_0Block(const uint8_t *block, float *out) {
  const float d = loadF16(block);
  const uint8_t *qs = block + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    out[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// block_q4_1: fp16 d, fp16 m; 16 bytes of nibbles.
void dequantizeQ4_1Block(const uint8_t *block, float *out) {
  const float d = loadF16(block);
  const float m = loadF16(block + 2);
  const uint8_t *qs = block + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    out[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// block_q5_0: fp16 d; uint32 qh (bit j is the fifth bit of element j); 16 bytes of nibbles.
void dequantizeQ5_0Block(const uint8_t *block, float *out) {
  const float d = loadF16(block);
  const uint32_t qh = loadU32(block + 2);
  const uint8_t *qs = block + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = static_cast<int>((qh >> j) << 4 & 0x10);
    const int high1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    out[j] = static_cast<float>(((qs[j] & 0x0F) | high0) - 16) * d;
    out[j + kQK / 2] = static_cast<float>(((qs[j] >> 4) | high1) - 16) * d;
  }
}

// block_q5_1: fp16 d, fp16 m; uint32 qh; 16 bytes of nibbles.
void dequantizeQ5_1Block(const uint8_t *block, float *out) {
  const float d = loadF16(block);
  const float m = loadF16(block + 2);
  const uint32_t qh = loadU32(block + 4);
  const uint8_t *qs = block + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = static_cast<int>((qh >> j) << 4 & 0x10);
    const int high1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    out[j] = static_cast<float>((qs[j] & 0x0F) | high0) * d + m;
    out[j + kQK / 2] = static_cast<float>((qs[j] >> 4) | high1) * d + m;
  }
}

// block_q8_0: fp16 d; 32 int8 quants.
void dequantizeQ8_0Block(const uint8_t *block, float *out) {
  const float d = loadF16(block);
  for (int j = 0; j < kQK; ++j)
    out[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
}

// block_q2_K: 16 scale bytes (low nibble scale, high nibble min, one per 16 elements); 64
// bytes of 2-bit quants (each 32-byte half covers 128 elements, four 2-bit planes); fp16 d,
// fp16 dmin.
void dequantizeQ2_KBlock(const uint8_t *block, float *out) {
  const uint8_t *scales = block;
  const uint8_t *q = block + 16;
  const float d = loadF16(block + 80);
  const float min = loadF16(block + 82);
  int is = 0;
  for (int n = 0; n < kQKK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          *out++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
  }
}

// The sixteen 6-bit signed scales of block_q3_K, unpacked from 12 bytes: scale j has its low
// four bits in byte j (j < 8) or the high nibble of byte j - 8, its top two bits in byte
// 8 + j % 4 at bit 2 * (j / 4); stored with an offset of 32.
std::array<int, 16> unpackQ3_KScales(const uint8_t *packed) {
  std::array<int, 16> scales{};
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | high << 4) - 32;
  }
  return scales;
}

// block_q3_K: 32 bytes hmask (the third bit, one bit plane per 32 elements), 64 bytes of the low
// two bits, 12 bytes of packed scales, fp16 d. A clear hmask bit subtracts 4.
void dequantizeQ3_KBlock(const uint8_t *block, float *out) {
  const uint8_t *hm = block;
  const uint8_t *q = block + 32;
  const std::array<int, 16> scales = unpackQ3_KScales(block + 96);
  const float dAll = loadF16(block + 108);
  int is = 0;
  uint8_t mask = 1;
  for (int n = 0; n < kQKK; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, mask <<= 1) {
      for (int half = 0; half < 2; ++half) {
        const float dl = dAll * static_cast<float>(scales[is++]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int value = ((q[l] >> shift) & 3) - ((hm[l] & mask) ? 0 : 4);
          *out++ = dl * static_cast<float>(value);
        }
      }
    }
  }
}

// get_scale_min_k4: the eight 6-bit scales and mins of Q4_K/Q5_K packed into 12 bytes.
void scaleMinK4(int j, const uint8_t *q, int &scale, int &min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// block_q4_K: fp16 d and dmin, 12 bytes of packed 6-bit scales/mins, 128 bytes of nibbles that
// hold 64 elements, low nibbles first. block_q5_K is the same with 32 bytes qh after the scales:
// bit 2i / 2i+1 of qh[l] is the fifth bit of element l / l + 32 of the i-th 64-element group.
// `qh` null: Q4_K.
void dequantizeK4Groups(const uint8_t *block, const uint8_t *qh, const uint8_t *ql, float *out) {
  const float d = loadF16(block);
  const float min = loadF16(block + 2);
  const uint8_t *scales = block + 4;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    int sc, m;
    scaleMinK4(is, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    scaleMinK4(is + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l)
      *out++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      *out++ = d2 * static_cast<float>((ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
  }
}

void dequantizeQ4_KBlock(const uint8_t *block, float *out) {
  dequantizeK4Groups(block, nullptr, block + 4 + kKScaleSize, out);
}

void dequantizeQ5_KBlock(const uint8_t *block, float *out) {
  const uint8_t *qh = block + 4 + kKScaleSize;
  dequantizeK4Groups(block, qh, qh + 32, out);
}

// block_q6_K: 128 bytes low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales, fp16 d.
// Each 128-element half uses 64 ql bytes, 32 qh bytes and 8 scales.
void dequantizeQ6_KBlock(const uint8_t *block, float *out) {
  const uint8_t *ql = block;
  const uint8_t *qh = block + 128;
  const int8_t *sc = reinterpret_cast<const int8_t *>(block + 192);
  const float d = loadF16(block + 208);
  for (int n = 0; n < kQKK; n += 128, out += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      out[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

using BlockFunction = void (*)(const uint8_t *block, float *out);

BlockFunction blockFunction(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
  case GgmlType::kQ4_0:
    return dequantizeQ4_0Block;
  case GgmlType::kQ4_1:
    return dequantizeQ4_1Block;
  case GgmlType::kQ5_0:
    return dequantizeQ5_0Block;
  case GgmlType::kQ5_1:
    return dequantizeQ5_1Block;
  case GgmlType::kQ8_0:
    return dequantizeQ8_0Block;
  case GgmlType::kQ2_K:
    return dequantizeQ2_KBlock;
  case GgmlType::kQ3_K:
    return dequantizeQ3_KBlock;
  case GgmlType::kQ4_K:
    return dequantizeQ4_KBlock;
  case GgmlType::kQ5_K:
    return dequantizeQ5_KBlock;
  case GgmlType::kQ6_K:
    return dequantizeQ6_KBlock;
  default:
    return nullptr;
  }
}

} // namespace

std::string dequantizableList() {
  std::string out;
  for (const GgmlTypeTraits &traits : kTraits)
    if (traits.dequantizable)
      out += (out.empty() ? "" : ", ") + std::string(traits.name);
  return out;
}

const GgmlTypeTraits *ggmlTypeTraits(uint32_t type) {
  if (type >= kTraits.size() || kTraits[type].name == nullptr)
    return nullptr;
  return &kTraits[type];
}

std::string ggmlTypeName(uint32_t type) {
  const GgmlTypeTraits *traits = ggmlTypeTraits(type);
  return traits ? traits->name : "ggml type " + std::to_string(type);
}

Status dequantizeGgml(uint32_t type, std::span<const uint8_t> bytes, int64_t count, float *out) {
  const GgmlTypeTraits *traits = ggmlTypeTraits(type);
  if (traits == nullptr)
    return unimplemented("ggml type " + std::to_string(type) +
                         " is not a type ggml defines; kiln reads " + dequantizableList());
  if (!traits->dequantizable)
    return unimplemented("ggml type " + std::string(traits->name) + " (" + std::to_string(type) +
                         ") is not one kiln reads; kiln reads " + dequantizableList());
  if (count < 0 || count % traits->blockSize != 0)
    return invalidArgument(std::to_string(count) + " elements is not a whole number of " +
                           traits->name + " blocks of " + std::to_string(traits->blockSize));
  const int64_t blocks = count / traits->blockSize;
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(blocks), static_cast<uint64_t>(traits->typeSize),
                             &expected) ||
      bytes.size() != expected)
    return invalidArgument(std::string(traits->name) + " data of " + std::to_string(count) +
                           " elements must be " + std::to_string(blocks) + " blocks of " +
                           std::to_string(traits->typeSize) + " bytes; got " +
                           std::to_string(bytes.size()) + " bytes");
  if (count == 0)
    return okStatus();
  switch (static_cast<GgmlType>(type)) {
  case GgmlType::kF32:
    dequantizeF32(bytes.data(), count, out);
    return okStatus();
  case GgmlType::kF16:
    dequantizeF16(bytes.data(), count, out);
    return okStatus();
  case GgmlType::kBF16:
    dequantizeBF16(bytes.data(), count, out);
    return okStatus();
  default:
    break;
  }
  const BlockFunction function = blockFunction(type);
  for (int64_t i = 0; i < blocks; ++i)
    function(bytes.data() + i * traits->typeSize, out + i * traits->blockSize);
  return okStatus();
}

} // namespace kiln::compiler
