// Helpers of the simulated cuBLASLt's tests (sim_cublaslt_test.cc, sim_cublaslt_driver_test.cc):
// host matrices in cuBLASLt's data types, the same-order reference GEMM, a plan Linear op bound
// to host buffers, and the fixture that loads the simulated library.
#pragma once

#include "runtime/hal/cuda/cuda_device.h"
#include "runtime/hal/cuda/cuda_linear.h"

#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

namespace kiln::rt::cublaslt_sim_test {

using schema::DType;
using schema::RowScale;

inline const std::string kLibDir = KILN_CUDASIM_LIB_DIR;

inline size_t bytesOf(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : 2;
}

inline cudaDataType_t cudaTypeOf(DType dtype) {
  return dtype == DType::F16 ? CUDA_R_16F : dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Elements of one cuBLASLt data type, as the bytes a matmul reads and writes.
struct HostMatrix {
  cudaDataType_t type = CUDA_R_32F;
  std::vector<uint8_t> bytes;

  HostMatrix(cudaDataType_t t, size_t count, uint8_t fill = 0)
      : type(t), bytes(count * bytesOf(t), fill) {}
  size_t size() const { return bytes.size() / bytesOf(type); }
  // 0xff bytes: a NaN in every type, so an element the matmul should have written (or must not
  // have read) shows. In place: ops keep pointers into `bytes`.
  void poison() { std::fill(bytes.begin(), bytes.end(), uint8_t(0xff)); }
  void *data() { return bytes.data(); }
  float at(size_t i) const {
    if (type == CUDA_R_32F) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return type == CUDA_R_16BF ? bf16ToF32(h) : f16ToF32(h);
  }
  // Rounds once (to nearest even) into the type.
  void set(size_t i, float v) {
    if (type == CUDA_R_32F) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
      return;
    }
    const uint16_t h = type == CUDA_R_16BF ? f32ToBf16(v) : f32ToF16(v);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
};

inline HostMatrix randomMatrix(cudaDataType_t type, size_t count, float bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  HostMatrix m(type, count);
  for (size_t i = 0; i < count; ++i)
    m.set(i, dist(rng));
  return m;
}

inline HostMatrix poisoned(cudaDataType_t type, size_t count) {
  return HostMatrix(type, count, 0xff);
}

// A matrix as a matmul operand: stored rows x cols, column-major unless rowMajor, with ld.
struct Operand {
  const HostMatrix *values;
  uint64_t rows, cols;
  int64_t ld;
  bool rowMajor = false;
  size_t index(uint64_t r, uint64_t c) const { return rowMajor ? r * ld + c : r + c * ld; }
  float at(uint64_t r, uint64_t c) const { return values->at(index(r, c)); }
};

// D = alpha op(A) op(B) + beta C + bias[row], one fma per k in increasing k, one rounding.
inline void referenceGemm(const Operand &a, bool transA, const Operand &b, bool transB, float alpha,
                          float beta, const Operand *c, const HostMatrix *bias, HostMatrix &d,
                          const Operand &dLayout) {
  const uint64_t m = dLayout.rows, n = dLayout.cols, k = transA ? a.rows : a.cols;
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (uint64_t p = 0; p < k; ++p)
        sum = std::fma(transA ? a.at(p, i) : a.at(i, p), transB ? b.at(j, p) : b.at(p, j), sum);
      float value = alpha * sum;
      if (beta != 0.0f)
        value = value + beta * c->at(i, j);
      if (bias)
        value = value + bias->at(i);
      d.set(dLayout.index(i, j), value);
    }
}

// The bytes must match exactly; the message names the first element that does not.
inline void expectSameBytes(const HostMatrix &got, const HostMatrix &want,
                            const std::string &what) {
  ASSERT_EQ(got.bytes.size(), want.bytes.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(got.bytes.data() + i * bytesOf(got.type),
                    want.bytes.data() + i * bytesOf(got.type), bytesOf(got.type)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << got.at(i) << ", expected "
                    << want.at(i);
      return;
    }
}

inline std::shared_ptr<const CublasLt> loadSimulated() {
  auto lt = CublasLt::load({kLibDir + "/libcublasLt.so.13"});
  EXPECT_TRUE(lt.isOk()) << lt.status().toString();
  return lt.isOk() ? *lt : nullptr;
}

// A Linear op of the plan (x [rows, in], W [out, in], bias [out], y [rows, out]) bound to host
// buffers, and the flatbuffer the BoundOp points into.
struct LinearOp {
  LinearOp(DType t, DType yType, bool hasBias, int64_t in, int64_t out, int64_t maxRows,
           uint32_t seed)
      : x(randomMatrix(cudaTypeOf(t), maxRows * in, 1.0f, seed)),
        w(randomMatrix(cudaTypeOf(t), out * in, 1.0f / std::sqrt(float(in)), seed + 1)),
        bias(randomMatrix(cudaTypeOf(yType), out, 1.0f, seed + 2)),
        y(poisoned(cudaTypeOf(yType), maxRows * out)) {
    std::vector<uint32_t> inputs = {0, 1}, outputs = {3};
    if (hasBias)
      inputs.push_back(2);
    fbb.Finish(schema::CreateOpDirect(fbb, "linear", schema::OpParams::LinearParams,
                                      schema::CreateLinearParams(fbb, hasBias).Union(), &inputs,
                                      &outputs, ""));
    op.op = flatbuffers::GetRoot<schema::Op>(fbb.GetBufferPointer());
    auto buffer = [](void *data, DType dtype, RowScale rows, int64_t fixedRows, int64_t width) {
      BoundBuffer b;
      b.data = data;
      b.dtype = dtype;
      b.rows = rows;
      b.fixedRows = fixedRows;
      b.width = width;
      return b;
    };
    op.inputs = {buffer(x.data(), t, RowScale::Tokens, maxRows, in),
                 buffer(w.data(), t, RowScale::Fixed, out, in)};
    if (hasBias)
      op.inputs.push_back(buffer(bias.data(), yType, RowScale::Fixed, out, 1));
    op.outputs = {buffer(y.data(), yType, RowScale::Tokens, maxRows, out)};
  }

  // y's first `rows` rows as cuda_linear's GEMM must produce them; the rest stay poisoned.
  HostMatrix expected(int64_t rows) const {
    const int64_t in = op.inputs[1].width, out = op.inputs[1].fixedRows;
    HostMatrix want = poisoned(y.type, y.size());
    // y^T = W x^T, column-major: A = W's memory as k x m (ld in), transposed; B = x^T.
    referenceGemm({&w, uint64_t(in), uint64_t(out), in}, true,
                  {&x, uint64_t(in), uint64_t(rows), in}, false, 1.0f, 0.0f, nullptr,
                  op.inputs.size() == 3 ? &bias : nullptr, want,
                  {&want, uint64_t(out), uint64_t(rows), out});
    return want;
  }

  HostMatrix x, w, bias, y;
  flatbuffers::FlatBufferBuilder fbb;
  BoundOp op;
};

struct Combination {
  DType t, y;
};
inline const Combination kCombinations[] = {{DType::F32, DType::F32},
                                            {DType::F16, DType::F16},
                                            {DType::F16, DType::F32},
                                            {DType::BF16, DType::BF16},
                                            {DType::BF16, DType::F32}};

class SimCublasLtTest : public ::testing::Test {
protected:
  void SetUp() override {
    lt_ = loadSimulated();
    ASSERT_TRUE(lt_);
    ASSERT_EQ(lt_->create(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_) {
      EXPECT_EQ(lt_->destroy(handle_), CUBLAS_STATUS_SUCCESS);
    }
  }

  // The heuristic's answer for cuda_linear-style descriptors under a workspace limit and
  // alignments (bytes of A, B, C = D).
  std::vector<cublasLtMatmulHeuristicResult_t>
  heuristic(const LinearDescriptors &d, uint64_t maxWorkspace, cublasStatus_t *status = nullptr,
            int requested = 8, uint32_t alignA = 256, uint32_t alignB = 256,
            uint32_t alignD = 256) {
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(lt_->preferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignD},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignD}};
    for (auto [attr, value] : alignments)
      EXPECT_EQ(lt_->preferenceSetAttribute(pref, attr, &value, sizeof(value)),
                CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &maxWorkspace, sizeof(maxWorkspace)),
              CUBLAS_STATUS_SUCCESS);
    std::vector<cublasLtMatmulHeuristicResult_t> results(requested);
    int returned = -1;
    const cublasStatus_t rc = lt_->algoGetHeuristic(handle_, d.matmul, d.a, d.b, d.d, d.d, pref,
                                                    requested, results.data(), &returned);
    EXPECT_EQ(lt_->preferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    if (status)
      *status = rc;
    results.resize(std::max(returned, 0));
    return results;
  }

  cublasStatus_t matmul(const LinearDescriptors &d, const void *a, const void *b, void *y,
                        const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceBytes,
                        float alpha = 1.0f, float beta = 0.0f) {
    return lt_->matmul(handle_, d.matmul, &alpha, a, d.a, b, d.b, &beta, y, d.d, y, d.d, algo,
                       workspace, workspaceBytes, nullptr);
  }

  // cuda_linear's descriptors of `op`, with `edit` applied to its GEMM first.
  std::unique_ptr<LinearDescriptors> descriptors(const LinearOp &linear,
                                                 void (*edit)(GemmDesc &) = nullptr) {
    auto gemm = describeLinear(linear.op);
    EXPECT_TRUE(gemm.isOk()) << gemm.status().toString();
    if (edit)
      edit(*gemm);
    auto d = LinearDescriptors::make(
        lt_, *gemm, linear.op.inputs.size() == 3 ? linear.op.inputs[2].data : nullptr);
    EXPECT_TRUE(d.isOk()) << d.status().toString();
    return d.isOk() ? std::move(d).value() : nullptr;
  }

  std::shared_ptr<const CublasLt> lt_;
  cublasLtHandle_t handle_ = nullptr;
};

} // namespace kiln::rt::cublaslt_sim_test
