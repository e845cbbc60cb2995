// Linear on cuBLASLt without a GPU: the GEMM a bound Linear becomes (every dtype combination, with
// and without bias), the errors for what cuBLASLt cannot do, the row buckets algorithms are
// chosen for, and the cuBLASLt descriptors built from the real library (which loads and makes
// descriptors without a driver). Pointers are fake: nothing runs.
#include "runtime/hal/cuda/cuda_linear.h"
#include "tests/runtime/hal_cuda/fake_buffer.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kiln::rt {
namespace {

using schema::DType;
using schema::RowScale;

cudaDataType_t cudaTypeOf(DType dtype) {
  return dtype == DType::F16 ? CUDA_R_16F : dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// (x and W dtype, y dtype): what cuBLASLt runs for kiln.
const std::pair<DType, DType> kCombinations[] = {{DType::F32, DType::F32},
                                                 {DType::F16, DType::F16},
                                                 {DType::F16, DType::F32},
                                                 {DType::BF16, DType::BF16},
                                                 {DType::BF16, DType::F32}};

// Owns the FlatBuffers op the BoundOp points at.
class LinearTest : public ::testing::Test {
protected:
  // x [rows <= 64, 128] (Tokens), W [256, 128], optional bias [256], y [rows, 256].
  void bind(DType x, DType w, DType y, bool hasBias, DType bias = DType::F32) {
    fbb_.Clear();
    std::vector<uint32_t> in = {0, 1}, out = {3};
    if (hasBias)
      in.push_back(2);
    fbb_.Finish(schema::CreateOpDirect(fbb_, "layers.0.attn.qkv", schema::OpParams::LinearParams,
                                       schema::CreateLinearParams(fbb_, hasBias).Union(), &in, &out,
                                       ""));
    op_.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
    op_.inputs = {fakeBuffer(0x10000, x, RowScale::Tokens, 64, 128),
                  fakeBuffer(0x20000, w, RowScale::Fixed, 256, 128, schema::BufferKind::Weight)};
    if (hasBias)
      op_.inputs.push_back(
          fakeBuffer(0x30000, bias, RowScale::Fixed, 256, 1, schema::BufferKind::Weight));
    op_.outputs = {fakeBuffer(0x40000, y, RowScale::Tokens, 64, 256)};
  }

  Status describeError() { return describeLinear(op_).status(); }

  flatbuffers::FlatBufferBuilder fbb_;
  BoundOp op_;
};

TEST_F(LinearTest, EverySupportedDtypeCombinationWithAndWithoutBias) {
  int described = 0;
  for (auto [t, y] : kCombinations)
    for (bool hasBias : {false, true}) {
      bind(t, t, y, hasBias, y);
      auto gemm = describeLinear(op_);
      ASSERT_TRUE(gemm.isOk()) << gemm.status().toString();
      EXPECT_EQ(gemm->m, 256u);
      EXPECT_EQ(gemm->k, 128u);
      EXPECT_EQ(gemm->maxN, 64u);
      EXPECT_EQ(gemm->lda, 128); // W [256, 128] row-major = W^T [128, 256] column-major
      EXPECT_EQ(gemm->ldb, 128); // x [n, 128] row-major = x^T [128, n]
      EXPECT_EQ(gemm->ldc, 256); // y [n, 256] row-major = y^T [256, n]
      EXPECT_EQ(gemm->transA, CUBLAS_OP_T);
      EXPECT_EQ(gemm->transB, CUBLAS_OP_N);
      EXPECT_EQ(gemm->aType, cudaTypeOf(t));
      EXPECT_EQ(gemm->bType, cudaTypeOf(t));
      EXPECT_EQ(gemm->cType, cudaTypeOf(y));
      EXPECT_EQ(gemm->computeType, CUBLAS_COMPUTE_32F); // fp32 accumulation, never TF32
      EXPECT_EQ(gemm->scaleType, CUDA_R_32F);
      EXPECT_EQ(gemm->epilogue, hasBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
      EXPECT_EQ(gemm->biasType, cudaTypeOf(y));
      ++described;
    }
  EXPECT_EQ(described, 10); // F32->F32, F16->F16, F16->F32, BF16->BF16, BF16->F32; x2 for bias
}

TEST_F(LinearTest, LogitsRowsFollowTheLogitsRule) {
  bind(DType::BF16, DType::BF16, DType::F32, false);
  op_.inputs[0] = fakeBuffer(0x10000, DType::BF16, RowScale::Logits, 32, 128);
  op_.outputs[0] = fakeBuffer(0x40000, DType::F32, RowScale::Logits, 32, 256);
  auto gemm = describeLinear(op_);
  ASSERT_TRUE(gemm.isOk()) << gemm.status().toString();
  EXPECT_EQ(gemm->maxN, 32u);
  EXPECT_EQ(gemm->cType, CUDA_R_32F);
}

TEST_F(LinearTest, MixedDtypesNameTheOpTheDtypesAndTheFlag) {
  bind(DType::F32, DType::BF16, DType::F32, false);
  Status mixed = describeError();
  EXPECT_EQ(mixed.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(mixed.message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): x F32, W BF16, y F32 is not supported "
            "(cuBLASLt needs x and W of one dtype, F32, F16 or BF16, and y of that dtype or F32); "
            "recompile with --dtype bf16 so activations and weights share a dtype");

  bind(DType::BF16, DType::BF16, DType::F16, false);
  EXPECT_EQ(describeError().message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): x BF16, W BF16, y F16 is not "
            "supported (cuBLASLt needs x and W of one dtype, F32, F16 or BF16, and y of that "
            "dtype or F32); recompile with --dtype bf16 so activations and weights share a dtype");

  bind(DType::F16, DType::F32, DType::F16, false);
  EXPECT_NE(describeError().message().find("x F16, W F32, y F16 is not supported"),
            std::string::npos);
  EXPECT_NE(describeError().message().find("recompile with --dtype fp32"), std::string::npos);

  bind(DType::I32, DType::I32, DType::I32, false);
  EXPECT_EQ(describeError().code(), StatusCode::kUnimplemented);
  EXPECT_NE(describeError().message().find("x I32, W I32, y I32 is not supported"),
            std::string::npos);

  bind(DType::BF16, DType::BF16, DType::F32, true, DType::BF16);
  Status bias = describeError();
  EXPECT_EQ(bias.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(bias.message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): bias BF16 with y F32 is not "
            "supported (biases are F32 or y's dtype); recompile with --dtype bf16");
  bind(DType::F16, DType::F16, DType::F16, true, DType::BF16);
  EXPECT_NE(describeError().message().find("bias BF16 with y F16 is not supported"),
            std::string::npos);
}

// Plans keep biases F32 (plan.fbs); a half y gets its bias converted to y's dtype once.
TEST_F(LinearTest, AnF32BiasOfAHalfOutputIsConvertedOnce) {
  for (DType t : {DType::F16, DType::BF16}) {
    bind(t, t, t, true, DType::F32);
    auto gemm = describeLinear(op_);
    ASSERT_TRUE(gemm.isOk()) << gemm.status().toString();
    EXPECT_TRUE(gemm->convertBias);
    EXPECT_EQ(gemm->epilogue, CUBLASLT_EPILOGUE_BIAS);
    EXPECT_EQ(gemm->biasType, cudaTypeOf(t)); // what the converted copy holds
  }
  bind(DType::BF16, DType::BF16, DType::F32, true, DType::F32); // lm_head-like: F32 y, F32 bias
  EXPECT_FALSE(describeLinear(op_)->convertBias);
  bind(DType::BF16, DType::BF16, DType::BF16, true, DType::BF16);
  EXPECT_FALSE(describeLinear(op_)->convertBias);
}

TEST_F(LinearTest, ShapeAndArityErrors) {
  bind(DType::F32, DType::F32, DType::F32, true);
  op_.inputs.pop_back(); // has_bias but no bias bound
  EXPECT_EQ(describeError().message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): bound 2/1 buffers, a Linear with "
            "bias has 3/1");

  bind(DType::F32, DType::F32, DType::F32, false);
  op_.inputs[0].width = 100;
  EXPECT_EQ(describeError().message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): x is [rows, 100], W [256, 128], y "
            "[rows, 256]; expected x [rows, in], W [out, in], y [rows, out]");

  bind(DType::F32, DType::F32, DType::F32, false);
  op_.outputs[0].width = 255;
  EXPECT_EQ(describeError().code(), StatusCode::kInvalidArgument);

  bind(DType::F32, DType::F32, DType::F32, false);
  op_.outputs[0].rows = RowScale::Logits;
  EXPECT_NE(describeError().message().find("x and y rows differ"), std::string::npos);

  bind(DType::F32, DType::F32, DType::F32, true);
  op_.inputs[2].fixedRows = 255;
  EXPECT_EQ(describeError().message(),
            "cuda backend: op 'layers.0.attn.qkv' (Linear): bias has 255 elements, W has 256 "
            "rows");

  fbb_.Clear();
  std::vector<uint32_t> in = {0, 1}, out = {2};
  fbb_.Finish(schema::CreateOpDirect(fbb_, "add", schema::OpParams::AddParams,
                                     schema::CreateAddParams(fbb_).Union(), &in, &out, ""));
  op_.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
  EXPECT_EQ(describeError().message(), "cuda backend: describeLinear needs a Linear op, got Add");
}

TEST(LinearBuckets, PowersOfTwoThenTheMaximum) {
  EXPECT_EQ(linearRowBuckets(1), (std::vector<uint64_t>{1}));
  EXPECT_EQ(linearRowBuckets(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(linearRowBuckets(5), (std::vector<uint64_t>{1, 2, 4, 5}));
  EXPECT_EQ(linearRowBuckets(64), (std::vector<uint64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(linearRowBuckets(300), (std::vector<uint64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 300}));
  const std::vector<uint64_t> buckets = linearRowBuckets(300);
  EXPECT_EQ(linearRowBucket(buckets, 1), 0u);
  EXPECT_EQ(linearRowBucket(buckets, 2), 1u);
  EXPECT_EQ(linearRowBucket(buckets, 3), 2u);   // 4
  EXPECT_EQ(linearRowBucket(buckets, 129), 8u); // 256
  EXPECT_EQ(linearRowBucket(buckets, 257), 9u); // 300
  EXPECT_EQ(linearRowBucket(buckets, 300), 9u);
}

TEST(LinearAutotune, KeepsTheFastestOnlyWhenClearlyFasterThanTheHeuristicsChoice) {
  EXPECT_EQ(pickTimedAlgorithm({}), 0u);
  EXPECT_EQ(pickTimedAlgorithm({1.0}), 0u);
  EXPECT_EQ(pickTimedAlgorithm({1.0, 0.5}), 1u);
  EXPECT_EQ(pickTimedAlgorithm({1.0, 0.98}), 0u); // within the 3% margin: timing noise
  EXPECT_EQ(pickTimedAlgorithm({1.0, 0.96}), 1u);
  EXPECT_EQ(pickTimedAlgorithm({1.0, 0.96, 0.5, 0.7}), 2u);
  EXPECT_EQ(pickTimedAlgorithm({1.0, 0.9}, 0.2), 0u);
  // Failed timings (negative) never win; when the first failed, the fastest that ran does.
  EXPECT_EQ(pickTimedAlgorithm({1.0, -1.0}), 0u);
  EXPECT_EQ(pickTimedAlgorithm({-1.0, 2.0, 1.5}), 2u);
  EXPECT_EQ(pickTimedAlgorithm({-1.0, -1.0}), 0u);
}

TEST(LinearAutotune, OnUnlessTheEnvironmentSaysZero) {
  const char *saved = std::getenv("KILN_LINEAR_AUTOTUNE");
  const std::string restore = saved ? saved : "";
  unsetenv("KILN_LINEAR_AUTOTUNE");
  EXPECT_TRUE(linearAutotuneFromEnvironment());
  setenv("KILN_LINEAR_AUTOTUNE", "0", 1);
  EXPECT_FALSE(linearAutotuneFromEnvironment());
  setenv("KILN_LINEAR_AUTOTUNE", "1", 1);
  EXPECT_TRUE(linearAutotuneFromEnvironment());
  if (saved)
    setenv("KILN_LINEAR_AUTOTUNE", restore.c_str(), 1);
  else
    unsetenv("KILN_LINEAR_AUTOTUNE");
}

TEST(LinearBuckets, PointerAlignment) {
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x7f0000001000)), 256u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x7f0000001080)), 128u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x7f0000001010)), 16u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x7f0000001002)), 2u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x7f0000001001)), 1u);
}

TEST(CublasLtLibrary, MissingLibrariesAreNamed) {
  auto lt = CublasLt::load({"/nonexistent/libcublasLt.so.13", "/nonexistent/libcublasLt.so.12"});
  ASSERT_FALSE(lt.isOk());
  EXPECT_EQ(lt.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(lt.status().message().rfind(
                "cuBLASLt not found (tried /nonexistent/libcublasLt.so.13, "
                "/nonexistent/libcublasLt.so.12): the cuda backend runs Linear ops on it; install "
                "the CUDA 13 (or 12) cuBLAS libraries or add their directory to LD_LIBRARY_PATH "
                "(dlopen: ",
                0),
            0u)
      << lt.status().message();
  EXPECT_EQ(defaultCublasLtLibraries(),
            (std::vector<std::string>{"libcublasLt.so.13", "libcublasLt.so.12"}));
}

// cuBLASLt loads and builds descriptors without a GPU; where it is installed, every combination's
// descriptors are accepted by the real library.
TEST_F(LinearTest, TheRealLibraryAcceptsEveryCombinationsDescriptors) {
  auto lt = CublasLt::load(defaultCublasLtLibraries());
  if (!lt.isOk())
    GTEST_SKIP() << lt.status().message();
  EXPECT_GE((*lt)->getVersion(), 120000u) << (*lt)->library();
  EXPECT_EQ((*lt)->describe(CUBLAS_STATUS_NOT_SUPPORTED).rfind("CUBLAS_STATUS_NOT_SUPPORTED", 0),
            0u);
  for (auto [t, y] : kCombinations)
    for (bool hasBias : {false, true}) {
      bind(t, t, y, hasBias, y);
      auto gemm = describeLinear(op_);
      ASSERT_TRUE(gemm.isOk()) << gemm.status().toString();
      auto descriptors =
          LinearDescriptors::make(*lt, *gemm, hasBias ? op_.inputs[2].data : nullptr);
      ASSERT_TRUE(descriptors.isOk()) << descriptors.status().toString();
      EXPECT_TRUE((*descriptors)->setRows(1).isOk());
      EXPECT_TRUE((*descriptors)->setRows(64).isOk());
    }
}

} // namespace
} // namespace kiln::rt
