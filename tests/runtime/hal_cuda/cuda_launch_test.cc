// Launch planning of the cuda backend: grids from the plan's GridRule or the attention rules,
// and the params.h structs filled from bound buffers. Pointers are fake: nothing is launched.
#include "runtime/hal/cuda/cuda_launch.h"

#include "kernels/cuda/params.h"
#include "runtime/ops/op_table.h"
#include "tests/runtime/hal_cuda/fake_buffer.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cuda;
using schema::DType;
using schema::RowScale;

BoundBuffer stepInput(uintptr_t address, RowScale rows, int64_t fixedRows, int64_t width = 1) {
  return fakeBuffer(address, DType::I32, rows, fixedRows, width, schema::BufferKind::StepInput);
}

template <typename Params> Params paramsOf(const CudaLaunch &launch) {
  EXPECT_EQ(launch.paramBytes, sizeof(Params));
  Params p;
  std::memcpy(&p, launch.params.data(), sizeof(Params));
  return p;
}

// Owns the FlatBuffers op a BoundOp points at.
class LaunchTest : public ::testing::Test {
protected:
  template <typename MakeParams>
  void makeOp(schema::OpParams kind, MakeParams makeParams, size_t inputs, size_t outputs,
              const char *kernel, bool withGrid = true) {
    fbb_.Clear();
    auto params = makeParams(fbb_);
    std::vector<uint32_t> in(inputs), out(outputs);
    for (size_t i = 0; i < inputs; ++i)
      in[i] = static_cast<uint32_t>(i);
    for (size_t i = 0; i < outputs; ++i)
      out[i] = static_cast<uint32_t>(inputs + i);
    auto grid = withGrid ? schema::CreateGridRule(fbb_, RowScale::Tokens, 1, 1, 3, 1, 512, 0)
                         : flatbuffers::Offset<schema::GridRule>();
    fbb_.Finish(schema::CreateOpDirect(fbb_, "layers.0.op", kind, params, &in, &out, kernel, grid));
    op_.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
  }

  void bindAttention(DType dtype, int64_t headDim) {
    makeOp(
        schema::OpParams::AttentionParams,
        [&](auto &fbb) {
          return schema::CreateAttentionParams(fbb, 1, 32, 8, static_cast<uint32_t>(headDim),
                                               0.125f)
              .Union();
        },
        5, 1, "prefill_sym,decode_sym,reduce_sym");
    op_.inputs = {
        fakeBuffer(0x1000, dtype, RowScale::Tokens, 512, 32 * headDim),
        stepInput(0x2000, RowScale::Tokens, 512), stepInput(0x3000, RowScale::Sequences, 65),
        stepInput(0x4000, RowScale::Sequences, 64), stepInput(0x5000, RowScale::Fixed, 64, 256)};
    op_.outputs = {fakeBuffer(0x6000, dtype, RowScale::Tokens, 512, 32 * headDim)};
    kv_.keys = {fake(0x7000), fake(0x8000)};
    kv_.values = {fake(0x9000), fake(0xa000)};
    kv_.dtype = dtype;
    op_.kvCache = &kv_;
  }

  flatbuffers::FlatBufferBuilder fbb_;
  BoundOp op_;
  KvCacheBinding kv_;
};

TEST_F(LaunchTest, RmsNormFollowsTheGridRule) {
  makeOp(
      schema::OpParams::RmsNormParams,
      [](auto &fbb) { return schema::CreateRmsNormParams(fbb, 1e-5f).Union(); }, 2, 1,
      "kiln_rms_norm");
  op_.inputs = {
      fakeBuffer(0x100, DType::BF16, RowScale::Tokens, 256, 4096),
      fakeBuffer(0x200, DType::BF16, RowScale::Fixed, 4096, 1, schema::BufferKind::Weight)};
  op_.outputs = {fakeBuffer(0x300, DType::BF16, RowScale::Tokens, 256, 4096)};
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  StepCounts counts{7, 2, 2, 100};
  std::vector<CudaLaunch> launches = planLaunches(op_, counts, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].grid[0], 7u);
  EXPECT_EQ(launches[0].grid[1], 3u);
  EXPECT_EQ(launches[0].block, 512u);
  auto p = paramsOf<kc::RmsNormParams>(launches[0]);
  EXPECT_EQ(p.x, fake(0x100));
  EXPECT_EQ(p.weight, fake(0x200));
  EXPECT_EQ(p.out, fake(0x300));
  EXPECT_EQ(p.rows, 7);
  EXPECT_FLOAT_EQ(p.eps, 1e-5f);
  EXPECT_TRUE(planLaunches(op_, StepCounts{0, 0, 0, 0}, {}).empty()); // nothing to launch
}

TEST_F(LaunchTest, AddRmsNormWritesTheSecondOutput) {
  makeOp(
      schema::OpParams::AddRmsNormParams,
      [](auto &fbb) { return schema::CreateAddRmsNormParams(fbb, 1e-6f).Union(); }, 3, 2, "k");
  op_.inputs = {fakeBuffer(0x100, DType::F32, RowScale::Tokens, 8, 64),
                fakeBuffer(0x200, DType::F32, RowScale::Tokens, 8, 64),
                fakeBuffer(0x300, DType::F32, RowScale::Fixed, 64, 1, schema::BufferKind::Weight)};
  op_.outputs = {fakeBuffer(0x200, DType::F32, RowScale::Tokens, 8, 64),
                 fakeBuffer(0x400, DType::F32, RowScale::Tokens, 8, 64)};
  ASSERT_TRUE(checkCudaOp(op_).isOk());
  auto p = paramsOf<kc::AddRmsNormParams>(planLaunches(op_, {5, 1, 1, 5}, {})[0]);
  EXPECT_EQ(p.residual, fake(0x200));
  EXPECT_EQ(p.weight, fake(0x300));
  EXPECT_EQ(p.out, fake(0x400));
  EXPECT_EQ(p.rows, 5);
}

TEST_F(LaunchTest, EmbeddingPassesItsVocabShard) {
  makeOp(
      schema::OpParams::EmbeddingParams,
      [](auto &fbb) { return schema::CreateEmbeddingParams(fbb, 16000).Union(); }, 2, 1,
      "kiln_embedding");
  op_.inputs = {
      stepInput(0x100, RowScale::Tokens, 256),
      fakeBuffer(0x200, DType::BF16, RowScale::Fixed, 16000, 4096, schema::BufferKind::Weight)};
  op_.outputs = {fakeBuffer(0x300, DType::BF16, RowScale::Tokens, 256, 4096)};
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  std::vector<CudaLaunch> launches = planLaunches(op_, {9, 2, 2, 9}, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].grid[0], 9u);
  auto p = paramsOf<kc::EmbeddingParams>(launches[0]);
  EXPECT_EQ(p.tokenIds, fake(0x100));
  EXPECT_EQ(p.table, fake(0x200));
  EXPECT_EQ(p.out, fake(0x300));
  EXPECT_EQ(p.numTokens, 9);
  EXPECT_EQ(p.vocabStart, 16000); // rank 1 of a 2-way split of a 32000-token vocab
  EXPECT_EQ(p.vocabRows, 16000);
}

TEST_F(LaunchTest, RopeKvWriteUsesItsLayersCache) {
  makeOp(
      schema::OpParams::RopeKvWriteParams,
      [](auto &fbb) { return schema::CreateRopeKvWriteParams(fbb, 1, 4, 2, 16, 16).Union(); }, 4, 1,
      "kiln_rope");
  op_.inputs = {fakeBuffer(0x100, DType::F16, RowScale::Tokens, 8, 128),
                stepInput(0x200, RowScale::Tokens, 8), stepInput(0x300, RowScale::Tokens, 8),
                fakeBuffer(0x400, DType::F32, RowScale::Fixed, 8, 1, schema::BufferKind::Weight)};
  op_.outputs = {fakeBuffer(0x500, DType::F16, RowScale::Tokens, 8, 64)};
  kv_.keys = {fake(0x600), fake(0x700)};
  kv_.values = {fake(0x800), fake(0x900)};
  kv_.dtype = DType::F16;
  op_.kvCache = &kv_;
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  auto p = paramsOf<kc::RopeKvWriteParams>(planLaunches(op_, {6, 2, 2, 9}, {})[0]);
  EXPECT_EQ(p.kCache, fake(0x700));
  EXPECT_EQ(p.vCache, fake(0x900));
  EXPECT_EQ(p.invFreq, fake(0x400));
  EXPECT_EQ(p.numTokens, 6);
  EXPECT_EQ(p.kScale, 1.0f); // no scales bound: 1
  EXPECT_EQ(p.vScale, 1.0f);
  // Layer 1's calibrated scales of an fp8 cache reach the kernel.
  kv_.kScales = {0.5f, 0.125f};
  kv_.vScales = {0.25f, 0.0625f};
  p = paramsOf<kc::RopeKvWriteParams>(planLaunches(op_, {6, 2, 2, 9}, {})[0]);
  EXPECT_EQ(p.kScale, 0.125f);
  EXPECT_EQ(p.vScale, 0.0625f);
  kv_.kScales.clear();
  kv_.vScales.clear();

  // A cache of its own dtype (--kv-dtype) is the kernels' kv_dtype; other dtypes are refused.
  kv_.dtype = DType::F8E4M3;
  EXPECT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  kv_.dtype = DType::I32;
  EXPECT_NE(checkCudaOp(op_).message().find("KV cache dtype I32; caches are F32/F16/BF16/F8E4M3"),
            std::string::npos)
      << checkCudaOp(op_).message();
  kv_.dtype = DType::F16;
  kv_.keys.resize(1);
  EXPECT_NE(checkCudaOp(op_).message().find("no KV cache bound for layer 1"), std::string::npos);
}

TEST_F(LaunchTest, DecodeStepsSplitByTheLongestContextThenReduce) {
  bindAttention(DType::BF16, 128);
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  OpScratch scratch{fake(0xb000)};
  kv_.kScales = {0.5f, 0.125f}; // the layer's (1) fp8 cache scales go to every kernel
  kv_.vScales = {0.25f, 0.0625f};
  std::vector<CudaLaunch> launches = planLaunches(op_, {3, 3, 3, 250}, scratch);
  for (const CudaLaunch &launch : launches) {
    EXPECT_EQ(paramsOf<kc::AttentionParams>(launch).kScale, 0.125f);
    EXPECT_EQ(paramsOf<kc::AttentionParams>(launch).vScale, 0.0625f);
  }
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].kernel, 1u); // decode_sym
  EXPECT_EQ(launches[0].grid[0], 3u);
  EXPECT_EQ(launches[0].grid[1], 8u); // kv heads
  EXPECT_EQ(launches[0].grid[2], 4u); // ceil(250 / 64) splits
  EXPECT_EQ(launches[0].block, 128u);
  EXPECT_EQ(launches[1].kernel, 2u); // reduce_sym
  EXPECT_EQ(launches[1].grid[0], 3u);
  EXPECT_EQ(launches[1].grid[1], 32u); // query heads
  auto p = paramsOf<kc::AttentionParams>(launches[0]);
  EXPECT_EQ(p.q, fake(0x1000));
  EXPECT_EQ(p.blockTables, fake(0x5000));
  EXPECT_EQ(p.kCache, fake(0x8000)); // layer 1
  EXPECT_EQ(p.vCache, fake(0xa000));
  EXPECT_EQ(p.out, fake(0x6000));
  // Carved from the scratch: partial outputs of 64 x 32 x 16 states of 128 floats, then maxima.
  EXPECT_EQ(p.partialOut, fake(0xb000));
  EXPECT_EQ(static_cast<void *>(p.partialMax),
            static_cast<char *>(fake(0xb000)) + size_t(64) * 32 * 16 * 128 * 4);
  EXPECT_EQ(p.maxBlocksPerSeq, 256);
  EXPECT_EQ(p.numSplits, 4);
  EXPECT_FLOAT_EQ(p.scale, 0.125f);
  EXPECT_EQ(paramsOf<kc::AttentionParams>(launches[1]).numSplits, 4);
  EXPECT_EQ(planLaunches(op_, {3, 3, 3, 100000}, scratch)[0].grid[2], 16u); // capped
  EXPECT_EQ(planLaunches(op_, {1, 1, 1, 1}, scratch)[0].grid[2], 1u);
  // maxBatch 64 x 32 heads x 16 splits x (128 + 2) floats.
  EXPECT_EQ(opScratchBytes(op_), 64u * 32 * 16 * 130 * 4);
}

// The split-K invariants a fixed split count in a CUDA graph relies on (kernels/cuda/params.h).
TEST(DecodeSplit, EverySplitHasKeysAndExtraSplitsChangeNothing) {
  for (int32_t context = 1; context <= 70000; context += context < 2000 ? 1 : 37) {
    const int32_t wanted = kc::decodeSplitsFor(context);
    ASSERT_GE(wanted, 1);
    ASSERT_LE(wanted, kc::kMaxDecodeSplits);
    const kc::DecodeSplit own = kc::decodeSplit(context, wanted);
    for (int32_t launched = 1; launched <= kc::kMaxDecodeSplits; ++launched) {
      const kc::DecodeSplit split = kc::decodeSplit(context, launched);
      ASSERT_GE(split.count, 1) << context << " " << launched;
      ASSERT_LE(split.count, launched) << context << " " << launched;
      ASSERT_EQ(split.length % kc::kDecodeTile, 0) << context << " " << launched;
      // The last split starts inside the context and the splits cover all of it.
      ASSERT_LT(int64_t(split.count - 1) * split.length, context) << context << " " << launched;
      ASSERT_GE(int64_t(split.count) * split.length, context) << context << " " << launched;
      if (launched >= wanted) {
        ASSERT_EQ(split.count, own.count) << context << " " << launched;
        ASSERT_EQ(split.length, own.length) << context << " " << launched;
      }
    }
  }
  EXPECT_EQ(kc::decodeSplitsFor(1), 1);
  EXPECT_EQ(kc::decodeSplitsFor(kc::kMinDecodeSplitLen), 1);
  EXPECT_EQ(kc::decodeSplitsFor(kc::kMinDecodeSplitLen + 1), 2);
  EXPECT_EQ(kc::decodeSplitsFor(1000000), kc::kMaxDecodeSplits);
}

// A decode step padded for a graph passes maxContextLen = max_seq_len: the grid is fixed.
TEST_F(LaunchTest, PaddedDecodeStepsLaunchTheSplitsOfTheCompiledMaximum) {
  bindAttention(DType::F16, 64);
  for (int32_t seqs : {1, 4, 16})
    for (int32_t maxSeqLen : {100, 1000, 4096, 32768}) {
      std::vector<CudaLaunch> launches =
          planLaunches(op_, {seqs, seqs, seqs, maxSeqLen}, OpScratch{});
      ASSERT_EQ(launches.size(), 2u);
      EXPECT_EQ(launches[0].grid[0], uint32_t(seqs));
      EXPECT_EQ(launches[0].grid[2], uint32_t(kc::decodeSplitsFor(maxSeqLen)));
      EXPECT_EQ(paramsOf<kc::AttentionParams>(launches[1]).numSplits,
                kc::decodeSplitsFor(maxSeqLen));
    }
}

// Decode steps of up to 16 sequences stage K and V in shared memory, larger ones load them into
// registers (runtime/ops/attention_op.cc kvStagingFor: measured on an H200, docs/benchmarks.md).
// Run without KILN_DECODE_KV_STAGING set (ctest does not set it).
TEST_F(LaunchTest, SmallDecodeStepsStageKvLargeOnesLoadIt) {
  bindAttention(DType::BF16, 128);
  for (int32_t seqs : {1, 4, 16, 17, 64, 256}) {
    std::vector<CudaLaunch> launches = planLaunches(op_, {seqs, seqs, seqs, 1000}, OpScratch{});
    ASSERT_EQ(launches.size(), 2u);
    EXPECT_EQ(paramsOf<kc::AttentionParams>(launches[0]).kvStaging, seqs <= 16 ? 1 : 0) << seqs;
  }
}

TEST_F(LaunchTest, PrefillTilesCoverEveryRowTileOfEverySequence) {
  bindAttention(DType::BF16, 128);
  std::vector<CudaLaunch> launches = planLaunches(op_, {100, 3, 3, 90}, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].kernel, 0u);
  EXPECT_EQ(launches[0].grid[0], 2u + 3u); // ceil(100 / 64) + sequences (tensor cores)
  EXPECT_EQ(launches[0].grid[1], 32u);
  bindAttention(DType::F32, 256); // SIMT kernel, 1 KiB rows: 16-row tiles
  EXPECT_EQ(planLaunches(op_, {100, 3, 3, 90}, {})[0].grid[0], 7u + 3u);
}

// GatherRows reads its indices (input 1) and runs over the step's logits rows; SiluMul's rows
// are its output's.
TEST_F(LaunchTest, GatherRowsAndSiluMulFillTheirParams) {
  makeOp(
      schema::OpParams::GatherRowsParams,
      [](auto &fbb) { return schema::CreateGatherRowsParams(fbb).Union(); }, 2, 1, "kiln_gather");
  op_.inputs = {fakeBuffer(0x100, DType::F16, RowScale::Tokens, 64, 512),
                stepInput(0x200, RowScale::Logits, 64)};
  op_.outputs = {fakeBuffer(0x300, DType::F16, RowScale::Logits, 64, 512)};
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  auto gather = paramsOf<kc::GatherRowsParams>(planLaunches(op_, {9, 4, 3, 20}, {})[0]);
  EXPECT_EQ(gather.x, fake(0x100));
  EXPECT_EQ(gather.indices, fake(0x200));
  EXPECT_EQ(gather.out, fake(0x300));
  EXPECT_EQ(gather.numRows, 3);

  makeOp(
      schema::OpParams::SiluMulParams,
      [](auto &fbb) { return schema::CreateSiluMulParams(fbb).Union(); }, 1, 1, "kiln_silu_mul");
  op_.inputs = {fakeBuffer(0x400, DType::BF16, RowScale::Tokens, 64, 2 * 1024)};
  op_.outputs = {fakeBuffer(0x500, DType::BF16, RowScale::Tokens, 64, 1024)};
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  auto silu = paramsOf<kc::SiluMulParams>(planLaunches(op_, {9, 4, 3, 20}, {})[0]);
  EXPECT_EQ(silu.gateUp, fake(0x400));
  EXPECT_EQ(silu.out, fake(0x500));
  EXPECT_EQ(silu.rows, 9);
}

// MoeExperts: decode-sized steps (at most one routed pair per expert) run the row kernel when the
// plan has it; larger steps, or a plan without it (a layer too wide for it), the grouped kernels
// on the op's scratch, laid out for the step's rows; the scratch is sized for the compiled maximum.
TEST_F(LaunchTest, MoeStepsPickTheRowKernelOrTheGroupedKernels) {
  auto bindMoe = [&](const char *kernel) {
    makeOp(
        schema::OpParams::MoeExpertsParams,
        [](auto &fbb) { return schema::CreateMoeExpertsParams(fbb, 8, 2, 1408, true).Union(); }, 4,
        1, kernel);
    op_.inputs = {fakeBuffer(0x100, DType::BF16, RowScale::Tokens, 512, 1024),
                  fakeBuffer(0x200, DType::BF16, RowScale::Tokens, 512, 8),
                  fakeBuffer(0x300, DType::BF16, RowScale::Fixed, 8 * 2 * 1408, 1024,
                             schema::BufferKind::Weight),
                  fakeBuffer(0x400, DType::BF16, RowScale::Fixed, 8 * 1024, 1408,
                             schema::BufferKind::Weight)};
    op_.outputs = {fakeBuffer(0x500, DType::BF16, RowScale::Tokens, 512, 1024)};
  };
  bindMoe("route,place,gate_up,down,combine,row");
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  std::vector<CudaLaunch> decode = planLaunches(op_, {4, 4, 4, 100}, OpScratch{fake(0x9000)});
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_EQ(decode[0].kernel, 5u);
  EXPECT_EQ(paramsOf<kc::MoeExpertsParams>(decode[0]).rows, 4);

  std::vector<CudaLaunch> prefill = planLaunches(op_, {100, 1, 1, 100}, OpScratch{fake(0x9000)});
  ASSERT_EQ(prefill.size(), 5u);
  const uint32_t grids[5][2] = {{1, 1},      // route: ceil(100 / 128)
                                {1, 1},      // place
                                {4 + 8, 22}, // ceil(200 / 64) + 8 experts, 1408 / 64
                                {4 + 8, 16}, // 1024 / 64
                                {100, 4}};   // rows, 1024 / 256
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(prefill[i].kernel, i);
    EXPECT_FALSE(prefill[i].gridFromPlan);
    EXPECT_EQ(prefill[i].grid[0], grids[i][0]) << i;
    EXPECT_EQ(prefill[i].grid[1], grids[i][1]) << i;
  }
  auto p = paramsOf<kc::MoeGroupedParams>(prefill[2]);
  EXPECT_EQ(p.x, fake(0x100));
  EXPECT_EQ(p.gateUp, fake(0x300));
  EXPECT_EQ(p.out, fake(0x500));
  EXPECT_EQ(p.rows, 100);
  EXPECT_EQ(static_cast<void *>(p.pairExpert), fake(0x9000));
  // 200 pairs: four int arrays of 800 bytes at 1024-byte strides, two of 9 ints, then act.
  EXPECT_EQ(static_cast<void *>(p.expertStart), static_cast<char *>(fake(0x9000)) + 4 * 1024);
  EXPECT_EQ(p.act, static_cast<char *>(fake(0x9000)) + 4 * 1024 + 2 * 256);
  EXPECT_EQ(p.expertOut, static_cast<char *>(p.act) + 200 * 1408 * 2);
  // Sized for 512 rows: 1024 pairs.
  EXPECT_EQ(opScratchBytes(op_), 4 * 4096 + 2 * 256 + 1024 * 1408 * 2 + 1024 * 1024 * 2);

  bindMoe("route,place,gate_up,down,combine"); // no row kernel: always grouped
  ASSERT_TRUE(checkCudaOp(op_).isOk()) << checkCudaOp(op_).toString();
  EXPECT_EQ(planLaunches(op_, {1, 1, 1, 100}, OpScratch{fake(0x9000)}).size(), 5u);
  bindMoe("route,place,gate_up,down");
  EXPECT_NE(checkCudaOp(op_).message().find("should name 6 kernels"), std::string::npos)
      << checkCudaOp(op_).message();
}

// The kernels a MoE layer compiles to: the grouped five always, the row kernel only where the
// layer's row, activations and sums fit its shared memory (Qwen3-30B-A3B's do, Mixtral-8x7B's
// 14336-wide experts do not); more experts than the place kernel counts are refused.
std::vector<KernelInstance> moeInstances(uint32_t hidden, uint32_t inter, uint32_t experts,
                                         uint32_t topK, Status *error = nullptr) {
  schema::RankT rank;
  auto buffer = [&](int64_t rows, int64_t width) {
    auto b = std::make_unique<schema::BufferT>();
    b->dtype = DType::BF16;
    b->shape = {static_cast<uint64_t>(rows), static_cast<uint64_t>(width)};
    rank.buffers.push_back(std::move(b));
  };
  buffer(512, hidden);
  buffer(512, experts);
  buffer(int64_t(experts) * 2 * inter, hidden);
  buffer(int64_t(experts) * hidden, inter);
  buffer(512, hidden);
  schema::OpT op;
  op.inputs = {0, 1, 2, 3};
  op.outputs = {4};
  schema::MoeExpertsParamsT params;
  params.num_experts = experts;
  params.top_k = topK;
  params.intermediate = inter;
  op.params.Set(params);
  const OpEntry *entry = findOp(schema::OpParams::MoeExpertsParams);
  Result<std::vector<KernelInstance>> out = entry->cuda.instances(KernelPlanContext{op, rank});
  if (error)
    *error = out.status();
  return out.isOk() ? *out : std::vector<KernelInstance>{};
}

TEST(MoeKernels, WideLayersCompileToTheGroupedKernelsOnly) {
  std::vector<KernelInstance> qwen3 = moeInstances(2048, 768, 128, 8);
  ASSERT_EQ(qwen3.size(), 6u);
  EXPECT_EQ(qwen3[5].op, "moe_experts");
  std::vector<KernelInstance> mixtral = moeInstances(4096, 14336, 8, 2);
  ASSERT_EQ(mixtral.size(), 5u);
  const char *ops[] = {"moe_route", "moe_place", "moe_gate_up", "moe_down", "moe_combine"};
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(mixtral[i].op, ops[i]);
  EXPECT_EQ(mixtral[2].constants.at("intermediate"), "14336");
  Status error;
  EXPECT_TRUE(moeInstances(1024, 512, 600, 8, &error).empty());
  EXPECT_NE(error.message().find("at most 512 experts; this model has 600"), std::string::npos)
      << error.toString();
}

TEST_F(LaunchTest, UnsupportedOrMalformedOpsAreErrors) {
  bindAttention(DType::BF16, 128);
  makeOp(
      schema::OpParams::AttentionParams,
      [](auto &fbb) { return schema::CreateAttentionParams(fbb, 0, 32, 8, 128, 0.1f).Union(); }, 5,
      1, "only_one");
  Status oneName = checkCudaOp(op_);
  EXPECT_NE(oneName.message().find("kernel 'only_one' should name 3 kernels: "
                                   "<attention_prefill>,<attention_decode>,"
                                   "<attention_decode_reduce>"),
            std::string::npos)
      << oneName.message();

  makeOp(
      schema::OpParams::LinearParams,
      [](auto &fbb) { return schema::CreateLinearParams(fbb, false).Union(); }, 2, 1, "");
  op_.inputs = {
      fakeBuffer(0x100, DType::BF16, RowScale::Tokens, 8, 64),
      fakeBuffer(0x200, DType::BF16, RowScale::Fixed, 64, 64, schema::BufferKind::Weight)};
  op_.outputs = {fakeBuffer(0x300, DType::BF16, RowScale::Tokens, 8, 64)};
  Status linear = checkCudaOp(op_);
  EXPECT_EQ(linear.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(linear.message().find("Linear runs on cuBLASLt (cuda_linear.h), not as a kernel"),
            std::string::npos)
      << linear.message();

  // A quantized table is the embedding's to read (kernels/cuda/quant.cuh embeddingQuant); a
  // quantized weight where an op reads no matrix (a norm's) is refused, naming it.
  makeOp(
      schema::OpParams::EmbeddingParams,
      [](auto &fbb) { return schema::CreateEmbeddingParams(fbb, 0u).Union(); }, 2, 1,
      "kiln_embedding_quant_f32_2_32_64_32");
  op_.inputs = {stepInput(0x100, RowScale::Tokens, 8),
                fakeBuffer(0x200, DType::Q4, RowScale::Fixed, 512, 64, schema::BufferKind::Weight)};
  op_.inputs[1].groupSize = 32;
  op_.outputs = {fakeBuffer(0x300, DType::F32, RowScale::Tokens, 8, 64)};
  Status quantTable = checkCudaOp(op_);
  EXPECT_TRUE(quantTable.isOk()) << quantTable.toString();
  std::vector<CudaLaunch> gather = planLaunches(op_, StepCounts{5, 1, 1, 5}, {});
  ASSERT_EQ(gather.size(), 1u);
  const auto embedding = paramsOf<kc::EmbeddingParams>(gather[0]);
  // Q4 [512, 64] g32: 16 KiB of values, then the scales; no mins.
  EXPECT_EQ(embedding.table, fake(0x200));
  EXPECT_EQ(embedding.scales, fake(0x200 + 512 * 32));
  EXPECT_EQ(embedding.mins, nullptr);

  makeOp(
      schema::OpParams::RmsNormParams,
      [](auto &fbb) { return schema::CreateRmsNormParams(fbb, 1e-5f).Union(); }, 2, 1,
      "kiln_rms_norm");
  op_.inputs = {fakeBuffer(0x100, DType::F32, RowScale::Tokens, 8, 64),
                fakeBuffer(0x200, DType::Q8, RowScale::Fixed, 1, 64, schema::BufferKind::Weight)};
  op_.inputs[1].groupSize = 32;
  op_.outputs = {fakeBuffer(0x300, DType::F32, RowScale::Tokens, 8, 64)};
  Status quantized = checkCudaOp(op_);
  EXPECT_EQ(quantized.code(), StatusCode::kUnimplemented);
  EXPECT_NE(quantized.message().find("weight input 1 is Q8; the op reads no quantized weights "
                                     "there"),
            std::string::npos)
      << quantized.message();

  makeOp(
      schema::OpParams::AddParams, [](auto &fbb) { return schema::CreateAddParams(fbb).Union(); },
      2, 1, "kiln_add");
  op_.inputs = {fakeBuffer(0x100, DType::BF16, RowScale::Tokens, 8, 64),
                fakeBuffer(0x200, DType::F32, RowScale::Tokens, 8, 64)};
  op_.outputs = {fakeBuffer(0x300, DType::BF16, RowScale::Tokens, 8, 64)};
  EXPECT_NE(checkCudaOp(op_).message().find("mixes activation dtypes BF16 and F32"),
            std::string::npos)
      << checkCudaOp(op_).message();
  op_.inputs.pop_back();
  EXPECT_NE(checkCudaOp(op_).message().find("bound 1/1 buffers, the op has 2/1"),
            std::string::npos);

  makeOp(
      schema::OpParams::AddParams, [](auto &fbb) { return schema::CreateAddParams(fbb).Union(); },
      2, 1, "kiln_add", /*withGrid=*/false);
  op_.inputs = {fakeBuffer(0x100, DType::F32, RowScale::Tokens, 8, 64),
                fakeBuffer(0x200, DType::F32, RowScale::Tokens, 8, 64)};
  op_.outputs = {fakeBuffer(0x300, DType::F32, RowScale::Tokens, 8, 64)};
  EXPECT_NE(checkCudaOp(op_).message().find("has no grid rule"), std::string::npos);
}

} // namespace
} // namespace kiln::rt
