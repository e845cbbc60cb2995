// Linear (plan.fbs: y[rows, out] = x[rows, in] W[out, in]^T (+ bias[out]), fp32 accumulation) on
// cuBLASLt. describeLinear() turns a bound op into the column-major GEMM cuBLASLt solves; it and
// the descriptors built from it are host-only, so CI checks them without a GPU. CudaLinear (one
// per device) picks algorithms once at prepare time, per bucket of row counts, and runs a step
// with one cublasLtMatmul on the device's stream (capturable into a CUDA graph: no allocation,
// no synchronization, the workspace is shared and allocated once).
#pragma once

#include "runtime/hal/cuda/cublaslt_library.h"
#include "runtime/hal/device.h"

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

// Workspace shared by every Linear op of a device (they run one at a time on its stream).
constexpr size_t kLinearWorkspaceBytes = size_t(32) << 20;

// The column-major problem D[m, n] = op(A)[m, k] op(B)[k, n] (+ bias[m]) with C = D, beta = 0.
// A = W, B = x, D = y; n is the step's row count (at most maxN). See cuda_linear.cc for why.
struct GemmDesc {
  uint64_t m = 0;    // out features (W rows)
  uint64_t k = 0;    // in features
  uint64_t maxN = 0; // rows at the compiled maxima (x's shape[0])
  int64_t lda = 0;   // A (W) as stored: k x m column-major
  int64_t ldb = 0;   // B (x) as stored: k x n column-major
  int64_t ldc = 0;   // C = D (y): m x n column-major
  cublasOperation_t transA = CUBLAS_OP_T;
  cublasOperation_t transB = CUBLAS_OP_N;
  cudaDataType_t aType = CUDA_R_32F; // W
  cudaDataType_t bType = CUDA_R_32F; // x
  cudaDataType_t cType = CUDA_R_32F; // y (C and D)
  cudaDataType_t scaleType = CUDA_R_32F;
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType_t biasType = CUDA_R_32F; // meaningful with CUBLASLT_EPILOGUE_BIAS only
  // The plan's bias is F32 but y is F16/BF16: cuBLASLt's bias epilogue reads a bias of the
  // output's dtype (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), so the bias is converted
  // to it once at prepare. y = round(x W^T + round(b)) then, where the cpu backend rounds once.
  bool convertBias = false;
};

// Checks the op (arity, shapes, dtypes) and describes its GEMM. Supported: x and W of one dtype
// (F32, F16, BF16), y of that dtype or F32, bias F32 or of y's dtype. Errors name the op and the
// dtypes.
Result<GemmDesc> describeLinear(const BoundOp &op);

// Row-count buckets an algorithm is chosen for: 1, 2, 4, ... below maxRows, then maxRows.
std::vector<uint64_t> linearRowBuckets(uint64_t maxRows);
// Index of the smallest bucket >= rows (rows in 1..buckets.back()).
size_t linearRowBucket(const std::vector<uint64_t> &buckets, uint64_t rows);
// The largest power of two <= 256 dividing the address (what cuBLASLt's alignment hints take).
uint32_t pointerAlignment(const void *p);

// The cuBLASLt descriptors of one Linear op. Host objects: made without a GPU.
class LinearDescriptors {
public:
  static Result<std::unique_ptr<LinearDescriptors>> make(std::shared_ptr<const CublasLt> lt,
                                                         const GemmDesc &gemm, const void *bias);
  ~LinearDescriptors();
  LinearDescriptors(const LinearDescriptors &) = delete;
  LinearDescriptors &operator=(const LinearDescriptors &) = delete;

  // Sets n, the step's row count, on B and D (a no-op when unchanged).
  Status setRows(uint64_t n);

  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;

private:
  explicit LinearDescriptors(std::shared_ptr<const CublasLt> lt) : lt_(std::move(lt)) {}
  std::shared_ptr<const CublasLt> lt_;
  uint64_t rows_ = 0;
};

// Times one candidate algorithm at prepare: milliseconds per run of `work`, which queues one
// matmul on the given stream (the device's). CudaDevice's timer runs it once to warm up, then a
// few times between two CUDA events.
using LinearTimer = std::function<Result<double>(const std::function<Status(CUstream)> &work)>;

// Whether prepare times the heuristic's candidates (CudaDeviceOptions::autotuneLinear's
// default): yes unless the environment sets KILN_LINEAR_AUTOTUNE=0.
bool linearAutotuneFromEnvironment();

// Of the candidates' times (heuristic order), the index to use: the fastest, unless it is not
// at least `margin` faster than the heuristic's first choice (timing noise must not make two
// loads of one model pick different algorithms for nothing). Failed timings (< 0) never win.
size_t pickTimedAlgorithm(const std::vector<double> &millis, double margin = 0.03);

// One device's cuBLASLt: handle, shared workspace, algorithm cache. Needs the device's context
// current when created and used.
class CudaLinear {
public:
  // With a timer, prepare times up to 8 heuristic candidates per row bucket at the bucket's top
  // row count and keeps the fastest (pickTimedAlgorithm); without one it keeps the heuristic's
  // first usable candidate. Timing runs the op on its own buffers: it writes y (activations, at
  // load: nothing there yet).
  static Result<std::unique_ptr<CudaLinear>> create(std::shared_ptr<const CublasLt> lt,
                                                    void *workspace, size_t workspaceBytes,
                                                    LinearTimer timer = {});
  ~CudaLinear();
  CudaLinear(const CudaLinear &) = delete;
  CudaLinear &operator=(const CudaLinear &) = delete;

  // describeLinear + descriptors + one algorithm per row bucket (cached across ops of one shape).
  // A bias that needs converting (GemmDesc::convertBias) must already be bound converted.
  Result<std::unique_ptr<PreparedOp>> prepare(const BoundOp &op);
  // One cublasLtMatmul for this step's rows on `stream`; nothing when the step has no rows.
  Status run(const PreparedOp &op, const StepCounts &counts, CUstream stream) const;

  // Per row bucket of an op prepare made: how many usable candidates cuBLASLt's heuristic gave
  // and which one is kept (0: the heuristic's first).
  struct Choice {
    cublasLtMatmulAlgo_t algorithm = {};
    size_t candidates = 0;
    size_t chosen = 0;
  };
  static const std::vector<Choice> &choices(const PreparedOp &op);
  // "cublasLt <kept>/<candidates>" (1-based) for the step's row bucket; "" for no rows.
  static std::string describe(const PreparedOp &op, const StepCounts &counts);

private:
  CudaLinear(std::shared_ptr<const CublasLt> lt, void *workspace, size_t workspaceBytes,
             LinearTimer timer)
      : lt_(std::move(lt)), workspace_(workspace), workspaceBytes_(workspaceBytes),
        timer_(std::move(timer)) {}
  Result<Choice> chooseAlgorithm(const BoundOp &op, const GemmDesc &gemm,
                                 LinearDescriptors &descriptors, uint64_t lowRows,
                                 uint64_t highRows);
  Result<std::vector<cublasLtMatmulAlgo_t>> usableCandidates(const BoundOp &op, const GemmDesc &g,
                                                             LinearDescriptors &d, uint64_t lowRows,
                                                             uint64_t highRows);
  size_t fastestCandidate(const BoundOp &op, LinearDescriptors &d,
                          const std::vector<cublasLtMatmulAlgo_t> &candidates);

  std::shared_ptr<const CublasLt> lt_;
  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  LinearTimer timer_;
  std::map<std::string, Choice> algorithms_;
};

} // namespace kiln::rt
