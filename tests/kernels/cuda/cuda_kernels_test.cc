// Row kernels and RoPE + KV write on the GPU vs the CPU reference (kernels/cpu), for the test
// models' shapes and Llama-3.1-8B's, in fp32, bf16 and fp16. Label gpu: skips without a device.
#include "compiler/codegen/llama_kernels.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/params.h"
#include "tests/kernels/cuda/gpu_harness.h"

#include <set>

namespace kiln::testing {
namespace {

namespace kc = kiln::kernels::cuda;
namespace cpu = kiln::kernels::cpu;
using compiler::LlamaKernelParams;

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

std::vector<LlamaKernelParams> shapes(const std::string &dtype) {
  return {{64, 4, 2, 16, 128, 16, 0, dtype, ""},        // tiny-llama
          {64, 4, 2, 16, 128, 16, 8, dtype, ""},        // partial rotary
          {64, 4, 1, 32, 128, 16, 0, dtype, ""},        // tiny-llama3
          {128, 8, 4, 16, 384, 16, 0, dtype, ""},       // TinyStories-656K
          {64, 8, 4, 8, 172, 16, 0, dtype, ""},         // stories260K (odd intermediate)
          {4096, 32, 8, 128, 14336, 16, 0, dtype, ""}}; // Llama-3.1-8B
}

std::vector<KernelInstance> allInstances() {
  std::vector<KernelInstance> all;
  std::set<std::string> seen;
  for (const char *dtype : {"f32", "bf16", "f16"})
    for (const LlamaKernelParams &p : shapes(dtype))
      for (KernelInstance &k : compiler::kernelsForLlama(p))
        if (seen.insert(k.symbol).second)
          all.push_back(std::move(k));
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

void checkRowKernels(GpuHarness &gpu, const LlamaKernelParams &p,
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
  ASSERT_TRUE(gpu.launch(k[kEmbedding].symbol, 5, embed.gridY, 1, embed.threads,
                         kc::EmbeddingParams{static_cast<const int32_t *>(dids), dt_, dy, 5, 0,
                                             vocab})
                  .isOk());
  std::vector<float> embedded(5 * static_cast<size_t>(hidden));
  cpu::embedding(
      {ids.data(), 5, table.data(), cpu::WeightType::kF32, vocab, hidden, embedded.data()});
  EXPECT_EQ(decode(gpu.download(dy, embedded.size() * bytesOf(dt)), dt), embedded);

  // A vocab-parallel shard holding ids [5, 15) as its table rows 0..9: ids 7, 7 and 12 read rows
  // 2, 2 and 7; ids 49 and 0 belong to other ranks and give zero rows.
  ASSERT_TRUE(gpu.launch(k[kEmbedding].symbol, 5, embed.gridY, 1, embed.threads,
                         kc::EmbeddingParams{static_cast<const int32_t *>(dids), dt_, dy, 5, 5,
                                             10})
                  .isOk());
  std::vector<float> sharded(embedded.size(), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 5 && ids[t] < 15)
      std::copy_n(table.begin() + (ids[t] - 5) * static_cast<size_t>(hidden), hidden,
                  sharded.begin() + t * hidden);
  EXPECT_EQ(decode(gpu.download(dy, sharded.size() * bytesOf(dt)), dt), sharded);
}

void checkSiluMul(GpuHarness &gpu, const LlamaKernelParams &p, const KernelInstance &k) {
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

void checkRope(GpuHarness &gpu, const LlamaKernelParams &p, const KernelInstance &k) {
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

TEST(CudaKernels, RowKernelsSiluMulAndRopeMatchTheCpuReference) {
  KILN_GPU_OR_SKIP(gpu);
  ASSERT_TRUE(gpu->load(allInstances()).isOk());
  for (const char *dtype : {"f32", "bf16", "f16"})
    for (const LlamaKernelParams &p : shapes(dtype)) {
      SCOPED_TRACE(std::string(dtype) + " hidden " + std::to_string(p.hidden) + " heads " +
                   std::to_string(p.numHeads) + "/" + std::to_string(p.numKvHeads) + " dim " +
                   std::to_string(p.headDim) + " rotary " + std::to_string(p.rotaryDim));
      std::vector<KernelInstance> k = compiler::kernelsForLlama(p);
      checkRowKernels(*gpu, p, k);
      checkSiluMul(*gpu, p, k[kSiluMul]);
      checkRope(*gpu, p, k[kRope]);
    }
}

} // namespace
} // namespace kiln::testing
