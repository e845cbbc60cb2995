// Row kernels and RoPE + KV write on the GPU vs the CPU reference (kernels/cpu), for the test
// models' shapes and Llama-3.1-8B's, in fp32, bf16 and fp16, and RoPE's run-time scaling modes.
// Label gpu: skips without a device.
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/params.h"
#include "tests/kernels/cuda/decoder_kernels.h"
#include "tests/kernels/cuda/gpu_harness.h"

#include <cstring>
#include <map>
#include <set>

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;
namespace cpu = kiln::kernels::cpu;

static_assert(kc::kRopeStatic == static_cast<int32_t>(cpu::RopeMode::kStatic));
static_assert(kc::kRopeLongShort == static_cast<int32_t>(cpu::RopeMode::kLongShort));
static_assert(kc::kRopeDynamicNtk == static_cast<int32_t>(cpu::RopeMode::kDynamicNtk));

enum Kernel {
  kEmbedding,
  kRmsNorm,
  kAddRmsNorm,
  kRope,
  kDecode,
  kReduce,
  kPrefill,
  kSiluMul,
  kAdd,
  kGather
};

std::vector<DecoderKernelShape> shapes(const std::string &dtype) {
  return {{64, 4, 2, 16, 128, 16, 0, dtype, ""},        // tiny-llama
          {64, 4, 2, 16, 128, 16, 8, dtype, ""},        // partial rotary
          {64, 4, 1, 32, 128, 16, 0, dtype, ""},        // tiny-llama3
          {128, 8, 4, 16, 384, 16, 0, dtype, ""},       // TinyStories-656K
          {64, 8, 4, 8, 172, 16, 0, dtype, ""},         // stories260K (odd intermediate)
          {4096, 32, 8, 128, 14336, 16, 0, dtype, ""}}; // Llama-3.1-8B
}

// RoPE's run-time modes run on one small partial-rotary shape (cudasim runs a fiber per thread).
DecoderKernelShape ropeModeShape(const std::string &dtype) {
  return {128, 4, 2, 32, 128, 16, 16, dtype, ""};
}

std::vector<KernelInstance> allInstances() {
  std::vector<KernelInstance> all;
  std::set<std::string> seen;
  for (const char *dtype : {"f32", "bf16", "f16"}) {
    std::vector<DecoderKernelShape> withModes = shapes(dtype);
    withModes.push_back(ropeModeShape(dtype));
    for (const DecoderKernelShape &p : withModes)
      for (KernelInstance &k : decoderKernels(p))
        if (seen.insert(k.symbol).second)
          all.push_back(std::move(k));
  }
  return all;
}

struct Launch {
  uint32_t gridY;
  uint32_t threads;
};
Launch shapeOf(const KernelInstance &k) {
  auto shape = compiler::launchShapeOf(k);
  EXPECT_TRUE(shape.isOk()) << shape.status().toString();
  return {static_cast<uint32_t>(shape->gridY), static_cast<uint32_t>(shape->threads)};
}

size_t bytesOf(const std::string &dtype) {
  return dtype == "f32" ? 4 : 2;
}

void checkRowKernels(GpuHarness &gpu, const DecoderKernelShape &p,
                     const std::vector<KernelInstance> &k) {
  const std::string &dt = p.dtype;
  const int32_t rows = 7, hidden = static_cast<int32_t>(p.hidden);
  const auto n = static_cast<size_t>(rows) * hidden;
  std::vector<float> x = randomValues(n, 1, dt), r = randomValues(n, 2, dt),
                     w = randomValues(hidden, 3, dt, 0.5f, 1.5f);
  void *dx = gpu.upload(encode(x, dt)), *dr = gpu.upload(encode(r, dt)),
       *dw = gpu.upload(encode(w, dt)), *dy = gpu.alloc(n * bytesOf(dt));
  const float eps = 1e-5f;

  Launch norm = shapeOf(k[kRmsNorm]);
  ASSERT_TRUE(gpu.launch(k[kRmsNorm].symbol, rows, norm.gridY, 1, norm.threads,
                         kc::RmsNormParams{dx, dw, dy, rows, eps})
                  .isOk());
  std::vector<float> ref(n);
  cpu::rmsNorm({x.data(), w.data(), ref.data(), rows, hidden, eps});
  expectClose(decode(gpu.download(dy, n * bytesOf(dt)), dt), ref, dt, "rms_norm", 2.0f);

  ASSERT_TRUE(gpu.launch(k[kAddRmsNorm].symbol, rows, norm.gridY, 1, norm.threads,
                         kc::AddRmsNormParams{dx, dr, dw, dy, rows, eps})
                  .isOk());
  std::vector<float> residual = r;
  cpu::addRmsNorm({x.data(), residual.data(), w.data(), ref.data(), rows, hidden, eps});
  expectClose(decode(gpu.download(dr, n * bytesOf(dt)), dt), residual, dt, "add_rms_norm residual");
  expectClose(decode(gpu.download(dy, n * bytesOf(dt)), dt), ref, dt, "add_rms_norm out", 2.0f);

  Launch add = shapeOf(k[kAdd]);
  ASSERT_TRUE(
      gpu.launch(k[kAdd].symbol, rows, add.gridY, 1, add.threads, kc::AddParams{dx, dr, dy, rows})
          .isOk());
  std::vector<float> rNow = decode(gpu.download(dr, n * bytesOf(dt)), dt);
  cpu::add({x.data(), rNow.data(), ref.data(), static_cast<int64_t>(n)});
  expectClose(decode(gpu.download(dy, n * bytesOf(dt)), dt), ref, dt, "add");

  const std::vector<int32_t> indices = {6, 0, 3};
  void *di = gpu.uploadPod(indices);
  Launch gather = shapeOf(k[kGather]);
  ASSERT_TRUE(gpu.launch(k[kGather].symbol, 3, gather.gridY, 1, gather.threads,
                         kc::GatherRowsParams{dx, static_cast<const int32_t *>(di), dy, 3})
                  .isOk());
  std::vector<float> gathered(3 * static_cast<size_t>(hidden));
  cpu::gatherRows({x.data(), indices.data(), gathered.data(), 3, hidden});
  std::vector<float> got = decode(gpu.download(dy, gathered.size() * bytesOf(dt)), dt);
  EXPECT_EQ(got, gathered) << "gather_rows copies exactly";

  const int32_t vocab = 50;
  std::vector<float> table = randomValues(static_cast<size_t>(vocab) * hidden, 4, dt);
  const std::vector<int32_t> ids = {49, 0, 7, 7, 12};
  void *dt_ = gpu.upload(encode(table, dt)), *dids = gpu.uploadPod(ids);
  Launch embed = shapeOf(k[kEmbedding]);
  ASSERT_TRUE(
      gpu.launch(k[kEmbedding].symbol, 5, embed.gridY, 1, embed.threads,
                 kc::EmbeddingParams{static_cast<const int32_t *>(dids), dt_, dy, 5, 0, vocab})
          .isOk());
  std::vector<float> embedded(5 * static_cast<size_t>(hidden));
  cpu::embedding(
      {ids.data(), 5, table.data(), cpu::WeightType::kF32, vocab, hidden, embedded.data()});
  EXPECT_EQ(decode(gpu.download(dy, embedded.size() * bytesOf(dt)), dt), embedded);

  // A vocab-parallel shard holding ids [5, 15) as its table rows 0..9: ids 7, 7 and 12 read rows
  // 2, 2 and 7; ids 49 and 0 belong to other ranks and give zero rows.
  ASSERT_TRUE(gpu.launch(k[kEmbedding].symbol, 5, embed.gridY, 1, embed.threads,
                         kc::EmbeddingParams{static_cast<const int32_t *>(dids), dt_, dy, 5, 5, 10})
                  .isOk());
  std::vector<float> sharded(embedded.size(), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 5 && ids[t] < 15)
      std::copy_n(table.begin() + (ids[t] - 5) * static_cast<size_t>(hidden), hidden,
                  sharded.begin() + t * hidden);
  EXPECT_EQ(decode(gpu.download(dy, sharded.size() * bytesOf(dt)), dt), sharded);
}

void checkSiluMul(GpuHarness &gpu, const DecoderKernelShape &p, const KernelInstance &k) {
  const std::string &dt = p.dtype;
  const int32_t rows = 3, inter = static_cast<int32_t>(p.intermediate);
  std::vector<float> gu = randomValues(static_cast<size_t>(rows) * 2 * inter, 5, dt, -6.0f, 6.0f);
  void *dgu = gpu.upload(encode(gu, dt)), *dy = gpu.alloc(rows * inter * bytesOf(dt));
  Launch shape = shapeOf(k);
  ASSERT_TRUE(
      gpu.launch(k.symbol, rows, shape.gridY, 1, shape.threads, kc::SiluMulParams{dgu, dy, rows})
          .isOk());
  std::vector<float> ref(static_cast<size_t>(rows) * inter);
  cpu::siluMul({gu.data(), ref.data(), rows, inter});
  expectClose(decode(gpu.download(dy, ref.size() * bytesOf(dt)), dt), ref, dt, "silu_mul", 6.0f);
}

void checkRope(GpuHarness &gpu, const DecoderKernelShape &p, const KernelInstance &k) {
  const std::string &dt = p.dtype;
  const int32_t H = static_cast<int32_t>(p.numHeads), KV = static_cast<int32_t>(p.numKvHeads),
                D = static_cast<int32_t>(p.headDim), bs = 16, numBlocks = 8, tokens = 6;
  const int32_t rot = p.rotaryDim > 0 ? static_cast<int32_t>(p.rotaryDim) : D;
  std::vector<float> qkv = randomValues(static_cast<size_t>(tokens) * (H + 2 * KV) * D, 6, dt);
  const std::vector<int32_t> positions = {0, 1, 17, 200, 4095, 3};
  const std::vector<int32_t> slots = {5, 6, 127, -1, 64, 0};
  std::vector<float> invFreq(rot / 2);
  for (int32_t i = 0; i < rot / 2; ++i)
    invFreq[i] = 1.0f / std::pow(500000.0f, 2.0f * i / rot);
  const size_t cacheElems = static_cast<size_t>(numBlocks) * KV * bs * D;
  void *dqkv = gpu.upload(encode(qkv, dt)), *dpos = gpu.uploadPod(positions),
       *dslot = gpu.uploadPod(slots), *dfreq = gpu.uploadPod(invFreq),
       *dq = gpu.alloc(tokens * H * D * bytesOf(dt)), *dk = gpu.alloc(cacheElems * bytesOf(dt)),
       *dv = gpu.alloc(cacheElems * bytesOf(dt));
  Launch shape = shapeOf(k);
  ASSERT_EQ(shape.gridY, uint32_t(kc::kRopeCtasPerToken));
  ASSERT_TRUE(
      gpu.launch(k.symbol, tokens, shape.gridY, 1, shape.threads,
                 kc::RopeKvWriteParams{dqkv, static_cast<const int32_t *>(dpos),
                                       static_cast<const int32_t *>(dslot),
                                       static_cast<const float *>(dfreq), dq, dk, dv, tokens})
          .isOk());
  std::vector<float> q(static_cast<size_t>(tokens) * H * D), kc_(cacheElems), vc(cacheElems);
  cpu::ropeKvWrite({qkv.data(), positions.data(), slots.data(), invFreq.data(), q.data(),
                    kc_.data(), vc.data(), tokens, H, KV, D, rot, bs});
  expectClose(decode(gpu.download(dq, q.size() * bytesOf(dt)), dt), q, dt, "rope q");
  expectClose(decode(gpu.download(dk, cacheElems * bytesOf(dt)), dt), kc_, dt, "rope k cache");
  EXPECT_EQ(decode(gpu.download(dv, cacheElems * bytesOf(dt)), dt), vc) << "v is copied exactly";
}

// One step for the run-time modes: sequences (start position, tokens) on both sides of the
// switch at 64, chunks straddling it (their L decides for every token), a padding token.
struct RopeModeStep {
  std::vector<int32_t> positions, queryStartLoc = {0}, slots;
};
RopeModeStep ropeModeStep() {
  RopeModeStep step;
  const std::pair<int32_t, int32_t> chunks[] = {{0, 3}, {60, 6}, {63, 1}, {64, 1}, {4000, 2}};
  for (auto [start, count] : chunks) {
    for (int32_t p = start; p < start + count; ++p) {
      step.slots.push_back(static_cast<int32_t>(step.positions.size()) + 16);
      step.positions.push_back(p);
    }
    step.queryStartLoc.push_back(static_cast<int32_t>(step.positions.size()));
  }
  step.slots[1] = -1;
  return step;
}

struct RopeModeCase {
  const char *name;
  cpu::RopeMode mode;
  float attentionScaling;
  bool sequenceLengths = false; // each sequence's L = its chunk's end + 10 (a longer prompt)
  bool qkNorm = false;          // Qwen3's per-head q/k norms before rotation
};

void checkRopeMode(GpuHarness &gpu, const DecoderKernelShape &p, const KernelInstance &k,
                   const RopeModeCase &mode) {
  SCOPED_TRACE(mode.name);
  const std::string &dt = p.dtype;
  const int32_t H = static_cast<int32_t>(p.numHeads), KV = static_cast<int32_t>(p.numKvHeads),
                D = static_cast<int32_t>(p.headDim), rot = static_cast<int32_t>(p.rotaryDim),
                bs = static_cast<int32_t>(p.blockSize), numBlocks = 3;
  const RopeModeStep step = ropeModeStep();
  const auto tokens = static_cast<int32_t>(step.positions.size());
  const auto numSeqs = static_cast<int32_t>(step.queryStartLoc.size()) - 1;
  std::vector<float> qkv = randomValues(static_cast<size_t>(tokens) * (H + 2 * KV) * D, 7, dt);
  // Row 0: 1 / 10000^(2i/rot); kLongShort's long row divides it by up to 8.
  std::vector<float> invFreq(rot);
  for (int32_t i = 0; i < rot / 2; ++i) {
    invFreq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / rot);
    invFreq[rot / 2 + i] = invFreq[i] / (1.0f + 7.0f * i / (rot / 2));
  }
  const size_t cacheElems = static_cast<size_t>(numBlocks) * KV * bs * D;
  void *dqkv = gpu.upload(encode(qkv, dt)), *dpos = gpu.uploadPod(step.positions),
       *dslot = gpu.uploadPod(step.slots), *dstart = gpu.uploadPod(step.queryStartLoc),
       *dfreq = gpu.uploadPod(invFreq), *dq = gpu.alloc(tokens * H * D * bytesOf(dt)),
       *dk = gpu.alloc(cacheElems * bytesOf(dt)), *dv = gpu.alloc(cacheElems * bytesOf(dt));
  kc::RopeKvWriteParams params{dqkv,
                               static_cast<const int32_t *>(dpos),
                               static_cast<const int32_t *>(dslot),
                               static_cast<const float *>(dfreq),
                               dq,
                               dk,
                               dv,
                               tokens};
  params.mode = static_cast<int32_t>(mode.mode);
  params.queryStartLoc = static_cast<const int32_t *>(dstart);
  params.numSeqs = numSeqs;
  params.originalMaxPositions = 64;
  params.ropeTheta = 10000.0f;
  params.dynamicFactor = 2.0;
  params.attentionScaling = mode.attentionScaling;
  std::vector<int32_t> lengths;
  for (int32_t s = 0; s < numSeqs; ++s) // 60..65 ends 66: L 76 above 64; 63..63 ends 64: L 74
    lengths.push_back(step.positions[step.queryStartLoc[s + 1] - 1] + 1 + 10);
  std::vector<float> qNorm = randomValues(D, 11, "f32", 0.5f, 1.5f);
  std::vector<float> kNorm = randomValues(D, 12, "f32", 0.5f, 1.5f);
  if (mode.sequenceLengths)
    params.sequenceLengths = static_cast<const int32_t *>(gpu.uploadPod(lengths));
  if (mode.qkNorm) {
    params.qNorm = static_cast<const float *>(gpu.uploadPod(qNorm));
    params.kNorm = static_cast<const float *>(gpu.uploadPod(kNorm));
    params.qkNormEps = 1e-6f;
  }
  Launch shape = shapeOf(k);
  ASSERT_TRUE(gpu.launch(k.symbol, tokens, shape.gridY, 1, shape.threads, params).isOk());

  std::vector<float> q(static_cast<size_t>(tokens) * H * D), kc_(cacheElems), vc(cacheElems);
  cpu::RopeKvWriteArgs args{qkv.data(),
                            step.positions.data(),
                            step.slots.data(),
                            invFreq.data(),
                            q.data(),
                            kc_.data(),
                            vc.data(),
                            tokens,
                            H,
                            KV,
                            D,
                            rot,
                            bs};
  args.mode = mode.mode;
  args.queryStartLoc = step.queryStartLoc.data();
  args.numSeqs = numSeqs;
  args.originalMaxPositions = params.originalMaxPositions;
  args.ropeTheta = params.ropeTheta;
  args.dynamicFactor = params.dynamicFactor;
  args.attentionScaling = params.attentionScaling;
  if (mode.sequenceLengths)
    args.sequenceLengths = lengths.data();
  if (mode.qkNorm) {
    args.qNorm = qNorm.data();
    args.kNorm = kNorm.data();
    args.qkNormEps = params.qkNormEps;
  }
  cpu::ropeKvWrite(args);
  expectClose(decode(gpu.download(dq, q.size() * bytesOf(dt)), dt), q, dt, "rope q");
  expectClose(decode(gpu.download(dk, cacheElems * bytesOf(dt)), dt), kc_, dt, "rope k cache");
  EXPECT_EQ(decode(gpu.download(dv, cacheElems * bytesOf(dt)), dt), vc) << "v is copied exactly";
}

TEST(CudaKernels, RopeRunTimeModesMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load(allInstances()).isOk());
  const RopeModeCase modes[] = {
      {"longrope", cpu::RopeMode::kLongShort, 1.1902381f},
      {"dynamic", cpu::RopeMode::kDynamicNtk, 1.0f},
      {"yarn", cpu::RopeMode::kStatic, 1.1386294f},
      {"longrope, sequence lengths", cpu::RopeMode::kLongShort, 1.1902381f, true},
      {"dynamic, sequence lengths", cpu::RopeMode::kDynamicNtk, 1.0f, true},
      {"qk norm", cpu::RopeMode::kStatic, 1.0f, false, true},
      {"qk norm, dynamic, sequence lengths", cpu::RopeMode::kDynamicNtk, 1.0f, true, true}};
  for (const char *dtype : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    const DecoderKernelShape shape = ropeModeShape(dtype);
    const KernelInstance rope = decoderKernels(shape)[kRope];
    for (const RopeModeCase &mode : modes)
      checkRopeMode(*gpu, shape, rope, mode);
  }
}

TEST(CudaKernels, RowKernelsSiluMulAndRopeMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load(allInstances()).isOk());
  for (const char *dtype : {"f32", "bf16", "f16"})
    for (const DecoderKernelShape &p : shapes(dtype)) {
      SCOPED_TRACE(std::string(dtype) + " hidden " + std::to_string(p.hidden) + " heads " +
                   std::to_string(p.numHeads) + "/" + std::to_string(p.numKvHeads) + " dim " +
                   std::to_string(p.headDim) + " rotary " + std::to_string(p.rotaryDim));
      std::vector<KernelInstance> k = decoderKernels(p);
      checkRowKernels(*gpu, p, k);
      checkSiluMul(*gpu, p, k[kSiluMul]);
      checkRope(*gpu, p, k[kRope]);
    }
}

// Encoders' row kernels: layer_norm (fp32 weight and bias, rows of 96 and of 100 elements: 16-byte
// vectors and single elements) and gelu (erf) against the CPU reference, in place for gelu.
TEST(CudaKernels, EncoderRowKernelsMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  const int32_t rows = 5, width = 520;
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"}) {
    for (int hidden : {96, 100})
      instances.push_back(rt::makeKernelInstance("layer_norm", {{"dtype", dt},
                                                                {"weight_dtype", "f32"},
                                                                {"hidden", std::to_string(hidden)},
                                                                {"threads", "64"}}));
    instances.push_back(rt::makeKernelInstance(
        "gelu", {{"dtype", dt}, {"width", std::to_string(width)}, {"threads", "64"}}));
  }
  ASSERT_TRUE(gpu->load(instances).isOk());
  for (size_t i = 0; i < instances.size(); i += 3) {
    const std::string dt = i == 0 ? "f32" : i == 3 ? "bf16" : "f16";
    SCOPED_TRACE(dt);
    for (int j = 0; j < 2; ++j) {
      const int32_t hidden = j == 0 ? 96 : 100;
      const size_t n = size_t(rows) * hidden;
      std::vector<float> x = randomValues(n, 21 + j, dt, 2.0f, 6.0f);
      const std::vector<float> w = randomValues(hidden, 23, "f32", 0.5f, 1.5f),
                               b = randomValues(hidden, 24, "f32", -1.0f, 1.0f);
      void *dx = gpu->upload(encode(x, dt)), *dw = gpu->upload(encode(w, "f32")),
           *db = gpu->upload(encode(b, "f32")), *dy = gpu->alloc(n * bytesOf(dt));
      Launch norm = shapeOf(instances[i + j]);
      ASSERT_TRUE(gpu->launch(instances[i + j].symbol, rows, norm.gridY, 1, norm.threads,
                              kc::LayerNormParams{dx, dw, db, dy, rows, 1e-12f})
                      .isOk());
      std::vector<float> ref(n);
      cpu::layerNorm({x.data(), w.data(), b.data(), ref.data(), rows, hidden, 1e-12f});
      expectClose(decode(gpu->download(dy, n * bytesOf(dt)), dt), ref, dt, "layer_norm", 4.0f);
    }
    std::vector<float> x = randomValues(size_t(rows) * width, 25, dt, -8.0f, 8.0f);
    void *dx = gpu->upload(encode(x, dt));
    Launch shape = shapeOf(instances[i + 2]);
    ASSERT_TRUE(gpu->launch(instances[i + 2].symbol, rows, shape.gridY, 1, shape.threads,
                            kc::GeluParams{dx, dx, rows})
                    .isOk());
    std::vector<float> ref(x.size());
    cpu::gelu({x.data(), ref.data(), int64_t(x.size())});
    expectClose(decode(gpu->download(dx, x.size() * bytesOf(dt)), dt), ref, dt, "gelu", 8.0f);
  }
}

// Qwen2-MoE's shared-expert gate: sigmoid_gated_add against the CPU reference, rows of 96 and 100
// elements (16-byte vectors and single elements) and of 1000 (several vectors per thread), gates
// spread over (0, 1).
TEST(CudaKernels, SigmoidGatedAddMatchesTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  const int32_t rows = 7;
  const int widths[] = {96, 100, 1000};
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (int hidden : widths)
      instances.push_back(
          rt::makeKernelInstance("sigmoid_gated_add", {{"dtype", dt},
                                                       {"weight_dtype", "f32"},
                                                       {"hidden", std::to_string(hidden)},
                                                       {"threads", "64"}}));
  ASSERT_TRUE(gpu->load(instances).isOk());
  for (size_t i = 0; i < instances.size(); ++i) {
    const std::string dt = i < 3 ? "f32" : i < 6 ? "bf16" : "f16";
    const int32_t hidden = widths[i % 3];
    SCOPED_TRACE(dt + " hidden " + std::to_string(hidden));
    const size_t n = size_t(rows) * hidden;
    const float reach = 8.0f / std::sqrt(float(hidden)); // x . w of spread ~2.7
    std::vector<float> a = randomValues(n, 31, dt, -2.0f, 2.0f),
                       b = randomValues(n, 32, dt, -2.0f, 2.0f),
                       x = randomValues(n, 33, dt, -1.0f, 1.0f),
                       w = randomValues(hidden, 34, "f32", -reach, reach);
    void *da = gpu->upload(encode(a, dt)), *db = gpu->upload(encode(b, dt)),
         *dx = gpu->upload(encode(x, dt)), *dw = gpu->upload(encode(w, "f32")),
         *dy = gpu->alloc(n * bytesOf(dt));
    Launch shape = shapeOf(instances[i]);
    ASSERT_TRUE(gpu->launch(instances[i].symbol, rows, shape.gridY, 1, shape.threads,
                            kc::SigmoidGatedAddParams{da, db, dx, dw, dy, rows})
                    .isOk());
    std::vector<float> ref(n);
    cpu::sigmoidGatedAdd({a.data(), b.data(), x.data(), w.data(), ref.data(), rows, hidden});
    expectClose(decode(gpu->download(dy, n * bytesOf(dt)), dt), ref, dt, "sigmoid_gated_add");
  }
}

// Gemma 2's row kernels: gelu_tanh_mul (GeGLU) and softcap against the CPU reference, and the
// embedding with a scale (each row times it in fp32, rounded once to the activations' type).
TEST(CudaKernels, GemmaRowKernelsMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  const int32_t rows = 3, inter = 96, width = 520, vocab = 40, hidden = 64;
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"}) {
    instances.push_back(rt::makeKernelInstance(
        "gelu_tanh_mul",
        {{"dtype", dt}, {"intermediate", std::to_string(inter)}, {"threads", "32"}}));
    instances.push_back(rt::makeKernelInstance(
        "softcap", {{"dtype", dt}, {"width", std::to_string(width)}, {"threads", "64"}}));
    instances.push_back(rt::makeKernelInstance("embedding", {{"dtype", dt},
                                                             {"weight_dtype", dt},
                                                             {"hidden", std::to_string(hidden)},
                                                             {"threads", "32"}}));
  }
  ASSERT_TRUE(gpu->load(instances).isOk());
  for (size_t i = 0; i < instances.size(); i += 3) {
    const std::string dt = i == 0 ? "f32" : i == 3 ? "bf16" : "f16";
    SCOPED_TRACE(dt);
    std::vector<float> gu = randomValues(size_t(rows) * 2 * inter, 11, dt, -6.0f, 6.0f);
    void *dgu = gpu->upload(encode(gu, dt)), *dy = gpu->alloc(rows * inter * bytesOf(dt));
    Launch gelu = shapeOf(instances[i]);
    ASSERT_TRUE(gpu->launch(instances[i].symbol, rows, gelu.gridY, 1, gelu.threads,
                            kc::SiluMulParams{dgu, dy, rows})
                    .isOk());
    std::vector<float> ref(size_t(rows) * inter);
    cpu::geluTanhMul({gu.data(), ref.data(), rows, inter});
    expectClose(decode(gpu->download(dy, ref.size() * bytesOf(dt)), dt), ref, dt, "gelu_tanh_mul",
                6.0f);

    std::vector<float> x = randomValues(size_t(rows) * width, 12, dt, -40.0f, 40.0f);
    void *dx = gpu->upload(encode(x, dt));
    Launch cap = shapeOf(instances[i + 1]);
    ASSERT_TRUE(gpu->launch(instances[i + 1].symbol, rows, cap.gridY, 1, cap.threads,
                            kc::SoftcapParams{dx, dx, rows, 30.0f}) // in place
                    .isOk());
    std::vector<float> capped(x.size());
    cpu::softcap({x.data(), capped.data(), int64_t(x.size()), 30.0f});
    expectClose(decode(gpu->download(dx, x.size() * bytesOf(dt)), dt), capped, dt, "softcap",
                30.0f);

    std::vector<float> table = randomValues(size_t(vocab) * hidden, 13, dt);
    const std::vector<int32_t> ids = {39, 0, 7, 45};
    void *dtable = gpu->upload(encode(table, dt)), *dids = gpu->uploadPod(ids),
         *dout = gpu->alloc(ids.size() * hidden * bytesOf(dt));
    Launch embed = shapeOf(instances[i + 2]);
    kc::EmbeddingParams params{static_cast<const int32_t *>(dids), dtable, dout, 4, 0, vocab};
    params.scale = 48.0f;
    ASSERT_TRUE(
        gpu->launch(instances[i + 2].symbol, 4, embed.gridY, 1, embed.threads, params).isOk());
    std::vector<float> scaled(ids.size() * hidden);
    cpu::EmbeddingArgs args{ids.data(), 4,      table.data(), cpu::WeightType::kF32,
                            vocab,      hidden, scaled.data()};
    args.scale = 48.0f;
    cpu::embedding(args);
    EXPECT_EQ(decode(gpu->download(dout, scaled.size() * bytesOf(dt)), dt),
              decode(encode(scaled, dt), dt))
        << "each row times the scale, rounded once";
  }
}

// moe_experts against the CPU kernel: 16 experts top 4 renormalized and 8 top 2 not, fp32 /
// bf16 / f16 activations with weights of the same type.
TEST(CudaKernels, MoeExpertsMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  struct Case {
    int32_t hidden, inter, experts, k;
    bool renormalize;
  };
  const Case cases[] = {{64, 48, 16, 4, true}, {32, 40, 8, 2, false}};
  std::vector<KernelInstance> instances;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const Case &c : cases)
      instances.push_back(
          rt::makeKernelInstance("moe_experts", {{"dtype", dt},
                                                 {"weight_dtype", dt},
                                                 {"hidden", std::to_string(c.hidden)},
                                                 {"intermediate", std::to_string(c.inter)},
                                                 {"experts", std::to_string(c.experts)},
                                                 {"top_k", std::to_string(c.k)},
                                                 {"threads", "256"}}));
  ASSERT_TRUE(gpu->load(instances).isOk());
  const int32_t rows = 6;
  size_t i = 0;
  for (const char *dt : {"f32", "bf16", "f16"})
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dt) + " experts " + std::to_string(c.experts));
      const KernelInstance &k = instances[i++];
      std::vector<float> x = randomValues(size_t(rows) * c.hidden, 21, dt);
      std::vector<float> logits = randomValues(size_t(rows) * c.experts, 22, dt, -3.0f, 3.0f);
      std::vector<float> gateUp =
          randomValues(size_t(c.experts) * 2 * c.inter * c.hidden, 23, dt, -0.3f, 0.3f);
      std::vector<float> down =
          randomValues(size_t(c.experts) * c.hidden * c.inter, 24, dt, -0.3f, 0.3f);
      void *dout = gpu->alloc(x.size() * bytesOf(dt));
      kc::MoeExpertsParams params{gpu->upload(encode(x, dt)),
                                  gpu->upload(encode(logits, dt)),
                                  gpu->upload(encode(gateUp, dt)),
                                  gpu->upload(encode(down, dt)),
                                  dout,
                                  rows,
                                  c.renormalize ? 1 : 0};
      ASSERT_TRUE(gpu->launch(k.symbol, rows, 1, 1, 256, params).isOk());
      // The CPU kernel on the same values (as fp32 weights, with its dtype's roundings).
      const cpu::ElemType type = dt == std::string("f32")    ? cpu::ElemType::kF32
                                 : dt == std::string("bf16") ? cpu::ElemType::kBF16
                                                             : cpu::ElemType::kF16;
      std::vector<uint8_t> xs = encode(x, dt), ls = encode(logits, dt);
      std::vector<uint8_t> ref(x.size() * bytesOf(dt));
      cpu::moeExperts({xs.data(), ls.data(), gateUp.data(), down.data(), cpu::WeightType::kF32,
                       ref.data(), rows, c.hidden, c.inter, c.experts, c.k, c.renormalize, type});
      expectClose(decode(gpu->download(dout, ref.size()), dt), decode(ref, dt), dt, "moe_experts");
    }
}

// The grouped path (kernels/cuda/moe_grouped.cuh: route, place, gate_up, down, combine) against
// the CPU kernel: experts given more than one row tile (130 rows), a layer too wide for the row
// kernel's shared memory (2 x 64 + 10200 floats > 10240), and the same rows through the row kernel
// where it fits: the two paths agree within fp32 rounding of their sums.
struct MoeCase {
  int32_t hidden, inter, experts, k;
  bool renormalize;
  int32_t rows;
  std::vector<const char *> dtypes;
};

std::map<std::string, KernelInstance> moeGroupedInstances(const MoeCase &c, const std::string &dt) {
  const std::string h = std::to_string(c.hidden), inter = std::to_string(c.inter),
                    e = std::to_string(c.experts), k = std::to_string(c.k);
  return {{"route",
           rt::makeKernelInstance(
               "moe_route", {{"dtype", dt}, {"experts", e}, {"top_k", k}, {"threads", "128"}})},
          {"place", rt::makeKernelInstance("moe_place",
                                           {{"experts", e}, {"top_k", k}, {"threads", "1024"}})},
          {"gate_up", rt::makeKernelInstance("moe_gate_up", {{"dtype", dt},
                                                             {"weight_dtype", dt},
                                                             {"hidden", h},
                                                             {"intermediate", inter},
                                                             {"experts", e},
                                                             {"threads", "256"}})},
          {"down", rt::makeKernelInstance("moe_down", {{"dtype", dt},
                                                       {"weight_dtype", dt},
                                                       {"hidden", h},
                                                       {"intermediate", inter},
                                                       {"experts", e},
                                                       {"threads", "256"}})},
          {"combine",
           rt::makeKernelInstance(
               "moe_combine", {{"dtype", dt}, {"hidden", h}, {"top_k", k}, {"threads", "256"}})},
          {"row", rt::makeKernelInstance("moe_experts", {{"dtype", dt},
                                                         {"weight_dtype", dt},
                                                         {"hidden", h},
                                                         {"intermediate", inter},
                                                         {"experts", e},
                                                         {"top_k", k},
                                                         {"threads", "256"}})}};
}

bool moeRowKernelFits(const MoeCase &c) {
  return 2 * c.hidden + c.inter <= 10240;
}

TEST(CudaKernels, MoeGroupedMatchesTheCpuReferenceAndTheRowKernel) {
  KILN_GPU_OR_SKIP(gpu);
  const MoeCase cases[] = {{64, 48, 16, 4, true, 6, {"f32", "bf16", "f16"}},
                           {32, 40, 4, 2, false, 130, {"f32", "bf16"}},
                           {64, 10200, 4, 2, true, 5, {"bf16"}}};
  std::vector<KernelInstance> instances;
  std::set<std::string> symbols; // place does not depend on the dtype
  for (const MoeCase &c : cases)
    for (const char *dt : c.dtypes)
      for (auto &[name, k] : moeGroupedInstances(c, dt))
        if ((name != "row" || moeRowKernelFits(c)) && symbols.insert(k.symbol).second)
          instances.push_back(k);
  Status loaded = gpu->load(instances);
  ASSERT_TRUE(loaded.isOk()) << loaded.toString();
  uint32_t seed = 40;
  for (const MoeCase &c : cases)
    for (const char *dtName : c.dtypes) {
      const std::string dt = dtName;
      SCOPED_TRACE(dt + " hidden " + std::to_string(c.hidden) + " intermediate " +
                   std::to_string(c.inter) + " experts " + std::to_string(c.experts) + " rows " +
                   std::to_string(c.rows));
      std::map<std::string, KernelInstance> k = moeGroupedInstances(c, dt);
      const int32_t rows = c.rows, pairs = c.rows * c.k;
      std::vector<float> x = randomValues(size_t(rows) * c.hidden, seed++, dt);
      std::vector<float> logits = randomValues(size_t(rows) * c.experts, seed++, dt, -3.0f, 3.0f);
      std::vector<float> gateUp =
          randomValues(size_t(c.experts) * 2 * c.inter * c.hidden, seed++, dt, -0.3f, 0.3f);
      std::vector<float> down =
          randomValues(size_t(c.experts) * c.hidden * c.inter, seed++, dt, -0.3f, 0.3f);
      const size_t elem = bytesOf(dt);
      void *dout = gpu->alloc(x.size() * elem);
      kc::MoeGroupedParams p{gpu->upload(encode(x, dt)),
                             gpu->upload(encode(logits, dt)),
                             gpu->upload(encode(gateUp, dt)),
                             gpu->upload(encode(down, dt)),
                             dout,
                             static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                             static_cast<float *>(gpu->alloc(pairs * 4)),
                             static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                             static_cast<int32_t *>(gpu->alloc(pairs * 4)),
                             static_cast<int32_t *>(gpu->alloc((c.experts + 1) * 4)),
                             static_cast<int32_t *>(gpu->alloc((c.experts + 1) * 4)),
                             gpu->alloc(size_t(pairs) * c.inter * elem),
                             gpu->alloc(size_t(pairs) * c.hidden * elem),
                             rows,
                             c.renormalize ? 1 : 0};
      const auto tiles = static_cast<uint32_t>(kc::moeMaxTiles(pairs, c.experts));
      auto cols = [](int32_t n) { return static_cast<uint32_t>((n + 63) / 64); };
      ASSERT_TRUE(gpu->launch(k.at("route").symbol, (rows + 127) / 128, 1, 1, 128, p).isOk());
      ASSERT_TRUE(gpu->launch(k.at("place").symbol, 1, 1, 1, 1024, p).isOk());
      ASSERT_TRUE(gpu->launch(k.at("gate_up").symbol, tiles, cols(c.inter), 1, 256, p).isOk());
      ASSERT_TRUE(gpu->launch(k.at("down").symbol, tiles, cols(c.hidden), 1, 256, p).isOk());
      ASSERT_TRUE(
          gpu->launch(k.at("combine").symbol, rows, (c.hidden + 255) / 256, 1, 256, p).isOk());
      // Every pair has its own slot, each expert's slots in one run of its tiles.
      std::vector<int32_t> slots(pairs), starts(c.experts + 1);
      std::memcpy(slots.data(), gpu->download(p.pairSlot, pairs * 4).data(), pairs * 4);
      std::memcpy(starts.data(), gpu->download(p.expertStart, starts.size() * 4).data(),
                  starts.size() * 4);
      EXPECT_EQ(std::set<int32_t>(slots.begin(), slots.end()).size(), size_t(pairs));
      EXPECT_EQ(starts.back(), pairs);
      const std::vector<float> grouped = decode(gpu->download(dout, x.size() * elem), dt);

      const cpu::ElemType type = dt == "f32"    ? cpu::ElemType::kF32
                                 : dt == "bf16" ? cpu::ElemType::kBF16
                                                : cpu::ElemType::kF16;
      std::vector<uint8_t> xs = encode(x, dt), ls = encode(logits, dt);
      std::vector<uint8_t> ref(x.size() * elem);
      cpu::moeExperts({xs.data(), ls.data(), gateUp.data(), down.data(), cpu::WeightType::kF32,
                       ref.data(), rows, c.hidden, c.inter, c.experts, c.k, c.renormalize, type});
      expectClose(grouped, decode(ref, dt), dt, "moe grouped");
      if (moeRowKernelFits(c)) {
        kc::MoeExpertsParams row{p.x, p.routerLogits, p.gateUp, p.down, dout, rows, p.renormalize};
        ASSERT_TRUE(gpu->launch(k.at("row").symbol, rows, 1, 1, 256, row).isOk());
        expectClose(grouped, decode(gpu->download(dout, x.size() * elem), dt), dt,
                    "moe grouped vs row");
      }
      gpu->freeAll();
    }
}

} // namespace
} // namespace kiln::testing
