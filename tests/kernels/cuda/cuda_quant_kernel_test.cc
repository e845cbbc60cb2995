// The quantized-weight kernels (kernels/cuda/quant.cuh) against the CPU's reading of the layout
// (kernels/cpu/linear_quant.h dequantizeRow: every weight the exact fp32 value its format defines)
// for every format (Q8, Q8F, Q4, Q4M, Q4Z), groups of 32 and 64 and one group a row, x and y in
// fp32 / fp16 / bf16:
// - gemv_quant: every row count 1..kGemvMaxRows against a double-precision dot product of x and
//   the dequantized rows (plus bias), y rounded once;
// - gemm_quant (the tile GEMM): 9 and 70 rows (one and two row tiles, partial) against a
//   double-precision product of x and the dequantized rows, rounded once to a half x's dtype for
//   its tensor cores (plus bias), y rounded once;
// - dequant_weights: bit for bit the dequantized rows rounded to the dtype;
// - embedding_quant: bit for bit the table rows, zeros for ids outside the rank's rows.
// Label gpu: skips without a device (cudasim runs it in CI).
#include "compiler/codegen/kernel_catalog.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cuda/params.h"
#include "runtime/base/quant_layout.h"
#include "tests/kernels/cuda/gpu_harness.h"

#include <map>
#include <set>

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;
namespace cpu = kiln::kernels::cpu;

constexpr QuantFormat kFormats[] = {QuantFormat::kQ8,     QuantFormat::kQ8Float,
                                    QuantFormat::kQ4,     QuantFormat::kQ4Min,
                                    QuantFormat::kQ4Zero, QuantFormat::kQ8FloatF32};

// A random [rows, cols] matrix in the layout: random value bytes (no fp8 NaN), fp16 scales of
// either sign around 0.02, Q4M mins in [-0.2, 0.2], Q4Z zero points 0..15.
struct QuantCase {
  QuantFormat format;
  int32_t rows, cols, group;
  std::vector<uint8_t> bytes;
  QuantLayout layout;

  QuantCase(QuantFormat f, int32_t r, int32_t c, int32_t g, uint32_t seed)
      : format(f), rows(r), cols(c), group(g), layout(quantLayout(f, r, c, g)) {
    std::mt19937 rng(seed);
    bytes.assign(layout.totalBytes, 0);
    for (uint64_t i = 0; i < layout.valuesBytes; ++i) {
      bytes[i] = static_cast<uint8_t>(rng());
      if (isFp8Quant(format) && (bytes[i] & 0x7F) == 0x7F)
        bytes[i] ^= 0x01;
    }
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    const int64_t slots = int64_t(rows) * (cols / group);
    for (int64_t s = 0; s < slots; ++s) {
      const float scale = 0.02f * (unit(rng) < 0 ? -1.0f : 1.0f) * (0.5f + std::fabs(unit(rng)));
      const uint16_t scaleBits = f32ToF16(scale);
      if (format == QuantFormat::kQ8FloatF32) // every bit of the fp32 scale
        std::memcpy(bytes.data() + layout.scalesOffset + 4 * s, &scale, 4);
      else
        std::memcpy(bytes.data() + layout.scalesOffset + 2 * s, &scaleBits, 2);
      if (!hasQuantMins(format))
        continue;
      const uint16_t min = format == QuantFormat::kQ4Min ? f32ToF16(0.2f * unit(rng))
                                                         : static_cast<uint16_t>(rng() % 16);
      std::memcpy(bytes.data() + layout.minsOffset + 2 * s, &min, 2);
    }
  }
  std::vector<float> dequantized() const {
    const cpu::QuantMatrix m = cpu::quantMatrixOf(bytes.data(), {format, group}, rows, cols);
    std::vector<float> w(size_t(rows) * cols);
    for (int32_t r = 0; r < rows; ++r)
      cpu::dequantizeRow(m, r, w.data() + size_t(r) * cols);
    return w;
  }
  kc::QuantSections upload(GpuHarness &gpu) const {
    auto *base = static_cast<const uint8_t *>(gpu.upload(bytes));
    return {base, base + layout.scalesOffset,
            layout.minsOffset ? base + layout.minsOffset : nullptr};
  }
  std::map<std::string, std::string> constants() const {
    return {{"format", std::to_string(int(format) + 1)}, {"group", std::to_string(group)}};
  }
  std::string name() const {
    return std::string(quantFormatName(format)) + " " + std::to_string(rows) + "x" +
           std::to_string(cols) + " g" + std::to_string(group);
  }
};

// (rows, cols, group): groups of 32, of 64, one group a row, and a longer row (several runs a
// lane); out features around a CTA's 4. Kept small: cudasim runs a thread as a fiber.
std::vector<QuantCase> quantCases() {
  std::vector<QuantCase> all;
  uint32_t seed = 1;
  for (QuantFormat format : kFormats)
    for (auto [rows, cols, group] :
         std::vector<std::tuple<int32_t, int32_t, int32_t>>{{9, 64, 32}, {6, 128, 64}, {5, 96, 96}})
      all.emplace_back(format, rows, cols, group, seed++);
  all.emplace_back(QuantFormat::kQ4Zero, 5, 2048, 128, seed++);
  all.emplace_back(QuantFormat::kQ8, 3, 2048, 32, seed++);
  all.emplace_back(QuantFormat::kQ4, 72, 96, 32, seed++); // two column tiles of the GEMM
  return all;
}

KernelInstance gemvInstance(const QuantCase &q, const std::string &dtype, const std::string &y) {
  auto constants = q.constants();
  constants["dtype"] = dtype;
  constants["in"] = std::to_string(q.cols);
  constants["y_dtype"] = y;
  return compiler::makeKernelInstance("gemv_quant", constants);
}
KernelInstance gemmInstance(const QuantCase &q, const std::string &dtype, const std::string &y) {
  auto constants = q.constants();
  constants["dtype"] = dtype;
  constants["in"] = std::to_string(q.cols);
  constants["y_dtype"] = y;
  constants["threads"] = std::to_string(kc::kTileThreads);
  return compiler::makeKernelInstance("gemm_quant", constants);
}
KernelInstance dequantInstance(const QuantCase &q, const std::string &dtype) {
  auto constants = q.constants();
  constants["dtype"] = dtype;
  constants["in"] = std::to_string(q.cols);
  return compiler::makeKernelInstance("dequant_weights", constants);
}
KernelInstance embeddingInstance(const QuantCase &q, const std::string &dtype) {
  auto constants = q.constants();
  constants["dtype"] = dtype;
  constants["hidden"] = std::to_string(q.cols);
  constants["threads"] = "32";
  return compiler::makeKernelInstance("embedding_quant", constants);
}

// The (dtype, y dtype) pairs: each activation dtype, and a half lm_head writing fp32 logits.
// Every case runs fp32 and one of the others, in turn.
const std::vector<std::pair<std::string, std::string>> kHalfDtypes = {
    {"f16", "f16"}, {"bf16", "bf16"}, {"bf16", "f32"}};
std::vector<std::pair<std::string, std::string>> dtypesOf(size_t caseIndex) {
  return {{"f32", "f32"}, kHalfDtypes[caseIndex % kHalfDtypes.size()]};
}

void loadAll(GpuHarness &gpu, const std::vector<QuantCase> &cases) {
  std::vector<KernelInstance> instances;
  std::set<std::string> seen;
  auto add = [&](const KernelInstance &k) {
    if (seen.insert(k.symbol).second)
      instances.push_back(k);
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (const auto &[dtype, y] : dtypesOf(i)) {
      add(gemvInstance(cases[i], dtype, y));
      add(gemmInstance(cases[i], dtype, y));
      add(dequantInstance(cases[i], dtype));
      add(embeddingInstance(cases[i], dtype));
    }
  Status loaded = gpu.load(instances);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
}

// y = x w^T (+ b) in double, rounded once to fp32: `rows` rows of x against q's W rows `w`.
std::vector<float> referenceProduct(const std::vector<float> &x, const std::vector<float> &w,
                                    const std::vector<float> *b, int32_t rows, const QuantCase &q) {
  std::vector<float> y(size_t(rows) * q.rows);
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t o = 0; o < q.rows; ++o) {
      double sum = b ? (*b)[o] : 0.0;
      for (int32_t k = 0; k < q.cols; ++k)
        sum += double(x[size_t(r) * q.cols + k]) * double(w[size_t(o) * q.cols + k]);
      y[size_t(r) * q.rows + o] = static_cast<float>(sum);
    }
  return y;
}

void checkGemv(GpuHarness &gpu, const QuantCase &q, const std::string &dtype, const std::string &y,
               bool bias) {
  SCOPED_TRACE(gemvInstance(q, dtype, y).symbol + (bias ? " with bias" : ""));
  const std::vector<float> w = q.dequantized();
  const std::vector<float> x = randomValues(size_t(kc::kGemvMaxRows) * q.cols, q.cols, dtype);
  const std::vector<float> b = randomValues(size_t(q.rows), q.rows, "f32");
  void *dx = gpu.upload(encode(x, dtype));
  void *db = gpu.uploadPod(b);
  const kc::QuantSections sections = q.upload(gpu);
  for (int32_t rows = 1; rows <= kc::kGemvMaxRows; ++rows) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const std::vector<float> expected = referenceProduct(x, w, bias ? &b : nullptr, rows, q);
    const size_t yBytes = expected.size() * (y == "f32" ? 4 : 2);
    void *dy = gpu.upload(std::vector<uint8_t>(yBytes, 0xff));
    kc::GemvQuantParams p{dx, sections, bias ? static_cast<const float *>(db) : nullptr,
                          dy, rows,     q.rows};
    const uint32_t grid = (q.rows + kc::gemvOutputsPerCta(1) - 1) / kc::gemvOutputsPerCta(1);
    ASSERT_TRUE(
        gpu.launch(gemvInstance(q, dtype, y).symbol, grid, 1, 1, kc::kGemvThreads, p).isOk());
    // fp32 sums of `cols` products of weights up to ~0.8 and x in [-1, 1], in another order than
    // the double reference; y rounded once to its dtype.
    expectClose(decode(gpu.download(dy, yBytes), y), decode(encode(expected, y), y), y, "y",
                std::sqrt(float(q.cols) / 64.0f) + 1.0f);
  }
}

void checkGemm(GpuHarness &gpu, const QuantCase &q, const std::string &dtype, const std::string &y,
               bool bias) {
  SCOPED_TRACE(gemmInstance(q, dtype, y).symbol + (bias ? " with bias" : ""));
  // The weights the tile GEMM multiplies: exact for fp32 x, rounded once to a half x's dtype.
  const std::vector<float> w = decode(encode(q.dequantized(), dtype), dtype);
  const kc::QuantSections sections = q.upload(gpu);
  const std::vector<float> b = randomValues(size_t(q.rows), q.rows + 7, "f32");
  void *db = gpu.uploadPod(b);
  for (int32_t rows : {9, 70}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const std::vector<float> x = randomValues(size_t(rows) * q.cols, q.cols + rows, dtype);
    const std::vector<float> expected = referenceProduct(x, w, bias ? &b : nullptr, rows, q);
    const size_t yBytes = expected.size() * (y == "f32" ? 4 : 2);
    void *dy = gpu.upload(std::vector<uint8_t>(yBytes, 0xff));
    kc::GemmQuantParams p{gpu.upload(encode(x, dtype)),
                          sections,
                          bias ? static_cast<const float *>(db) : nullptr,
                          dy,
                          rows,
                          q.rows};
    const auto rowTiles = static_cast<uint32_t>((rows + kc::kTileRows - 1) / kc::kTileRows);
    const auto colTiles = static_cast<uint32_t>((q.rows + kc::kTileCols - 1) / kc::kTileCols);
    ASSERT_TRUE(
        gpu.launch(gemmInstance(q, dtype, y).symbol, rowTiles, colTiles, 1, kc::kTileThreads, p)
            .isOk());
    // As the GEMV's: fp32 sums in another order than the double reference, y rounded once.
    expectClose(decode(gpu.download(dy, yBytes), y), decode(encode(expected, y), y), y, "y",
                std::sqrt(float(q.cols) / 64.0f) + 1.0f);
  }
}

void checkDequantize(GpuHarness &gpu, const QuantCase &q, const std::string &dtype) {
  SCOPED_TRACE(dequantInstance(q, dtype).symbol);
  const std::vector<uint8_t> expected = encode(q.dequantized(), dtype);
  void *out = gpu.upload(std::vector<uint8_t>(expected.size(), 0xff));
  kc::DequantParams p{q.upload(gpu), out, q.rows};
  const int64_t runs = int64_t(q.rows) * q.cols / kc::kQuantRun;
  const auto grid = static_cast<uint32_t>((runs + kc::kGemvThreads - 1) / kc::kGemvThreads);
  ASSERT_TRUE(gpu.launch(dequantInstance(q, dtype).symbol, grid, 1, 1, kc::kGemvThreads, p).isOk());
  EXPECT_EQ(gpu.download(out, expected.size()), expected);
}

void checkEmbedding(GpuHarness &gpu, const QuantCase &q, const std::string &dtype) {
  SCOPED_TRACE(embeddingInstance(q, dtype).symbol);
  constexpr int32_t kVocabStart = 3; // a tensor-parallel shard's first id
  const std::vector<float> w = q.dequantized();
  const std::vector<int32_t> ids = {kVocabStart + q.rows - 1, 0, kVocabStart, kVocabStart + q.rows,
                                    kVocabStart + 1};
  std::vector<float> rows(ids.size() * q.cols, 0.0f);
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t row = ids[t] - kVocabStart;
    if (row >= 0 && row < q.rows)
      std::copy_n(w.begin() + size_t(row) * q.cols, q.cols, rows.begin() + t * q.cols);
  }
  const std::vector<uint8_t> expected = encode(rows, dtype);
  void *out = gpu.upload(std::vector<uint8_t>(expected.size(), 0xff));
  const kc::QuantSections s = q.upload(gpu);
  kc::EmbeddingParams p{static_cast<const int32_t *>(gpu.uploadPod(ids)),
                        s.values,
                        out,
                        static_cast<int32_t>(ids.size()),
                        kVocabStart,
                        q.rows,
                        s.scales,
                        s.mins};
  ASSERT_TRUE(
      gpu.launch(embeddingInstance(q, dtype).symbol, static_cast<uint32_t>(ids.size()), 1, 1, 32, p)
          .isOk());
  EXPECT_EQ(gpu.download(out, expected.size()), expected);
}

// One test, so the kernels are compiled once (cudasim's JIT takes most of its time).
TEST(CudaQuantKernels, GemvGemmDequantizeAndEmbeddingMatchTheCpuReadingOfEveryFormat) {
  KILN_GPU_OR_SKIP(gpu);
  const std::vector<QuantCase> cases = quantCases();
  loadAll(*gpu, cases);
  if (HasFatalFailure())
    return;
  for (size_t i = 0; i < cases.size(); ++i)
    for (const auto &[dtype, y] : dtypesOf(i)) {
      SCOPED_TRACE(cases[i].name());
      checkGemv(*gpu, cases[i], dtype, y, dtype == "f32");
      checkGemm(*gpu, cases[i], dtype, y, dtype != "f32");
      checkDequantize(*gpu, cases[i], dtype);
      checkEmbedding(*gpu, cases[i], dtype);
      if (HasFatalFailure())
        return;
    }
}

// Quantized experts on the grouped MoE kernels (kernels/cuda/tile_product.cuh QuantWeights): each
// weight run decoded exactly into the tiles; against the cpu kernel reading the same bytes in place
// (kernels/cpu/moe.cc), every format, per-row and 32-column groups, fp32 and bf16 activations.
// tiny-mixtral's shape: hidden 64, 8 experts of 96, top 2; 40 rows.
struct MoeQuantCase {
  QuantFormat format;
  int32_t gateUpGroup, downGroup;
  const char *dtype;
};

std::map<std::string, KernelInstance> moeQuantInstances(const MoeQuantCase &c) {
  const std::string f = std::to_string(int(c.format) + 1);
  auto product = [&](const char *op, int32_t group) {
    return rt::makeKernelInstance(op, {{"dtype", c.dtype},
                                       {"weight_dtype", "q" + f + "g" + std::to_string(group)},
                                       {"hidden", "64"},
                                       {"intermediate", "96"},
                                       {"experts", "8"},
                                       {"threads", "256"}});
  };
  return {
      {"route", rt::makeKernelInstance(
                    "moe_route",
                    {{"dtype", c.dtype}, {"experts", "8"}, {"top_k", "2"}, {"threads", "128"}})},
      {"place", rt::makeKernelInstance("moe_place",
                                       {{"experts", "8"}, {"top_k", "2"}, {"threads", "1024"}})},
      {"gate_up", product("moe_gate_up", c.gateUpGroup)},
      {"down", product("moe_down", c.downGroup)},
      {"combine", rt::makeKernelInstance(
                      "moe_combine",
                      {{"dtype", c.dtype}, {"hidden", "64"}, {"top_k", "2"}, {"threads", "256"}})}};
}

TEST(CudaQuantKernels, MoeQuantizedExpertsMatchTheCpuReadingThemInPlace) {
  KILN_GPU_OR_SKIP(gpu);
  const std::vector<MoeQuantCase> cases = {
      {QuantFormat::kQ8, 64, 96, "f32"},          {QuantFormat::kQ8Float, 32, 32, "f32"},
      {QuantFormat::kQ8FloatF32, 64, 32, "bf16"}, {QuantFormat::kQ4, 32, 32, "bf16"},
      {QuantFormat::kQ4Min, 64, 32, "f32"},       {QuantFormat::kQ4Zero, 32, 96, "f32"}};
  std::vector<KernelInstance> instances;
  std::set<std::string> symbols;
  for (const MoeQuantCase &c : cases)
    for (const auto &[name, k] : moeQuantInstances(c))
      if (symbols.insert(k.symbol).second)
        instances.push_back(k);
  Status loaded = gpu->load(instances);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  const int32_t rows = 40, hidden = 64, inter = 96, experts = 8, k = 2, pairs = rows * k;
  uint32_t seed = 70;
  for (const MoeQuantCase &c : cases) {
    const std::string dt = c.dtype;
    SCOPED_TRACE(std::string(quantFormatName(c.format)) + " " + dt + " groups " +
                 std::to_string(c.gateUpGroup) + "/" + std::to_string(c.downGroup));
    std::map<std::string, KernelInstance> kernels = moeQuantInstances(c);
    const QuantCase gateUp(c.format, experts * 2 * inter, hidden, c.gateUpGroup, seed++);
    const QuantCase down(c.format, experts * hidden, inter, c.downGroup, seed++);
    // The random Q8 / Q8F weights reach +-2.5 / +-9: a small x keeps the products near 1, where
    // expectClose's fp32 bound means rounding.
    std::vector<float> x = randomValues(size_t(rows) * hidden, seed++, dt, -0.05f, 0.05f);
    std::vector<float> logits = randomValues(size_t(rows) * experts, seed++, dt, -3.0f, 3.0f);
    const size_t elem = dt == "f32" ? 4 : 2;
    void *dout = gpu->alloc(x.size() * elem);
    kc::MoeGroupedParams p{gpu->upload(encode(x, dt)),
                           gpu->upload(encode(logits, dt)),
                           nullptr,
                           nullptr,
                           dout,
                           static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                           static_cast<float *>(gpu->alloc(pairs * 4)),
                           static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                           static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                           static_cast<int32_t *>(gpu->alloc((experts + 1) * 4)),
                           static_cast<int32_t *>(gpu->alloc((experts + 1) * 4)),
                           gpu->alloc(size_t(pairs) * inter * elem),
                           gpu->alloc(size_t(pairs) * hidden * elem),
                           rows,
                           1,
                           gateUp.upload(*gpu),
                           down.upload(*gpu)};
    const auto tiles = static_cast<uint32_t>(kc::moeMaxTiles(pairs, experts));
    ASSERT_TRUE(gpu->launch(kernels.at("route").symbol, 1, 1, 1, 128, p).isOk());
    ASSERT_TRUE(gpu->launch(kernels.at("place").symbol, 1, 1, 1, 1024, p).isOk());
    ASSERT_TRUE(gpu->launch(kernels.at("gate_up").symbol, tiles, 2, 1, 256, p).isOk());
    ASSERT_TRUE(gpu->launch(kernels.at("down").symbol, tiles, 1, 1, 256, p).isOk());
    ASSERT_TRUE(gpu->launch(kernels.at("combine").symbol, rows, 1, 1, 256, p).isOk());

    std::vector<uint8_t> xs = encode(x, dt), ls = encode(logits, dt), ref(x.size() * elem);
    cpu::MoeExpertsArgs args{xs.data(),
                             ls.data(),
                             gateUp.bytes.data(),
                             down.bytes.data(),
                             cpu::WeightType::kF32,
                             ref.data(),
                             rows,
                             hidden,
                             inter,
                             experts,
                             k,
                             true,
                             dt == "f32" ? cpu::ElemType::kF32 : cpu::ElemType::kBF16};
    args.gateUpQuant = {c.format, c.gateUpGroup};
    args.downQuant = {c.format, c.downGroup};
    cpu::moeExperts(args);
    expectClose(decode(gpu->download(dout, ref.size()), dt), decode(ref, dt), dt,
                "moe quantized experts");
    gpu->freeAll();
  }
}

TEST(CudaQuantKernels, CatalogNamesAndChecksTheKernels) {
  const QuantCase q(QuantFormat::kQ4Zero, 4, 128, 64, 7);
  EXPECT_EQ(gemvInstance(q, "bf16", "f32").symbol, "kiln_gemv_quant_bf16_4_64_128_f32");
  auto shape = compiler::launchShapeOf(dequantInstance(q, "f16"));
  ASSERT_TRUE(shape.isOk()) << shape.status().toString();
  EXPECT_EQ(shape->threads, kc::kGemvThreads);
  KernelInstance bad = gemvInstance(q, "bf16", "f32");
  bad.constants["format"] = "0";
  EXPECT_FALSE(compiler::validateKernelInstance(bad).isOk());
  // Quantized experts' weight_dtype: only the MoE products take it, and only well formed.
  std::map<std::string, KernelInstance> moe = moeQuantInstances({QuantFormat::kQ4, 32, 32, "f32"});
  EXPECT_TRUE(compiler::validateKernelInstance(moe.at("gate_up")).isOk());
  EXPECT_EQ(moe.at("gate_up").constants.at("weight_dtype"), "q2g32");
  for (const char *wrong : {"q7g32", "q2g48", "q2g32x", "q2", "q0g32", "q2_32"}) {
    KernelInstance k = moe.at("down");
    k.constants["weight_dtype"] = wrong;
    Status status = compiler::validateKernelInstance(k);
    EXPECT_NE(status.message().find("or q<format 1..6>g<group, a multiple of 32>"),
              std::string::npos)
        << wrong << ": " << status.toString();
  }
  KernelInstance norm = rt::makeKernelInstance(
      "rms_norm",
      {{"dtype", "f32"}, {"weight_dtype", "q2g32"}, {"hidden", "64"}, {"threads", "64"}});
  EXPECT_FALSE(compiler::validateKernelInstance(norm).isOk());
}

} // namespace
} // namespace kiln::testing
