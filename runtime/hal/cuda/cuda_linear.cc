// Run on an H100 (cuda_linear_gpu_test; see cuda_device.h). The host half (describeLinear,
// buckets, descriptors) is also unit-tested without one.
//
// Row-major Linear as a column-major cuBLASLt GEMM. cuBLASLt reads a matrix stored row-major as
// R[r, c] (leading dimension c) as the column-major matrix R^T [c, r] with ld = c, with no copy:
//   x [rows, in]  row-major  ==  x^T [in, rows]  column-major, ld = in
//   W [out, in]   row-major  ==  W^T [in, out]   column-major, ld = in
//   y [rows, out] row-major  ==  y^T [out, rows] column-major, ld = out
// y = x W^T transposes to y^T = W x^T, a column-major product D[m, n] = op(A)[m, k] op(B)[k, n]:
//   D = y^T:  m = out, n = rows, ldc = out
//   A = the memory of W, stored as W^T [in, out] = [k, m] (lda = in); op(A) = T gives W [m, k]
//   B = the memory of x, stored as x^T [in, rows] = [k, n] (ldb = in); op(B) = N
// The bias epilogue adds bias[i] to row i of D, i.e. to output feature i of every token: exactly
// "+ bias[out]" broadcast over rows. ("TN" is also cuBLASLt's best-supported layout.)
#include "runtime/hal/cuda/cuda_linear.h"

#include "runtime/artifact/artifact.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <optional>

namespace kiln::rt {
namespace {

using schema::DType;

std::string opLabel(const BoundOp &op) {
  return "op '" + (op.op && op.op->name() ? op.op->name()->str() : std::string()) + "' (Linear)";
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

cudaDataType_t cudaType(DType dtype) {
  return dtype == DType::F16 ? CUDA_R_16F : dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The --dtype value whose plans hold activations of `dtype`.
std::string dtypeFlag(DType dtype) {
  return dtype == DType::F16 ? "fp16" : dtype == DType::BF16 ? "bf16" : "fp32";
}

Status checkLinearShapes(const BoundOp &op, bool hasBias) {
  const size_t inputs = hasBias ? 3 : 2;
  if (op.inputs.size() != inputs || op.outputs.size() != 1)
    return invalidArgument(
        "cuda backend: " + opLabel(op) + ": bound " + std::to_string(op.inputs.size()) + "/" +
        std::to_string(op.outputs.size()) + " buffers, a Linear " + (hasBias ? "with" : "without") +
        " bias has " + std::to_string(inputs) + "/1");
  const BoundBuffer &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs[0];
  const int64_t in = w.width, out = w.fixedRows;
  if (in <= 0 || out <= 0 || x.width != in || y.width != out)
    return invalidArgument("cuda backend: " + opLabel(op) + ": x is [rows, " +
                           std::to_string(x.width) + "], W [" + std::to_string(out) + ", " +
                           std::to_string(in) + "], y [rows, " + std::to_string(y.width) +
                           "]; expected x [rows, in], W [out, in], y [rows, out]");
  if (x.rows != y.rows || x.fixedRows != y.fixedRows || x.fixedRows <= 0)
    return invalidArgument("cuda backend: " + opLabel(op) + ": x and y rows differ (" +
                           std::to_string(x.fixedRows) + " and " + std::to_string(y.fixedRows) +
                           " at the maxima, or different row rules)");
  if (hasBias && op.inputs[2].fixedRows * op.inputs[2].width != out)
    return invalidArgument("cuda backend: " + opLabel(op) + ": bias has " +
                           std::to_string(op.inputs[2].fixedRows * op.inputs[2].width) +
                           " elements, W has " + std::to_string(out) + " rows");
  return okStatus();
}

Status checkLinearDtypes(const BoundOp &op, bool hasBias) {
  const DType x = op.inputs[0].dtype, w = op.inputs[1].dtype, y = op.outputs[0].dtype;
  if (!isFloat(x) || !isFloat(w) || !isFloat(y) || x != w || (y != x && y != DType::F32))
    return unimplemented("cuda backend: " + opLabel(op) + ": x " + dtypeName(x) + ", W " +
                         dtypeName(w) + ", y " + dtypeName(y) +
                         " is not supported (cuBLASLt needs x and W of one dtype, F32, F16 or "
                         "BF16, and y of that dtype or F32); recompile with --dtype " +
                         dtypeFlag(isFloat(w) ? w : DType::F32) +
                         " so activations and weights share a dtype");
  const DType bias = hasBias ? op.inputs[2].dtype : y;
  if (bias != y && bias != DType::F32)
    return unimplemented("cuda backend: " + opLabel(op) + ": bias " + dtypeName(bias) + " with y " +
                         dtypeName(y) +
                         " is not supported (biases are F32 or y's dtype); recompile with "
                         "--dtype " +
                         dtypeFlag(x));
  return okStatus();
}

template <typename T>
Status setMatmul(const CublasLt &lt, cublasLtMatmulDesc_t desc,
                 cublasLtMatmulDescAttributes_t attribute, const T &value, const char *name) {
  return lt.check(lt.matmulDescSetAttribute(desc, attribute, &value, sizeof(value)),
                  std::string("cublasLtMatmulDescSetAttribute(") + name + ")");
}

template <typename T>
Status setPreference(const CublasLt &lt, cublasLtMatmulPreference_t pref,
                     cublasLtMatmulPreferenceAttributes_t attribute, const T &value,
                     const char *name) {
  return lt.check(lt.preferenceSetAttribute(pref, attribute, &value, sizeof(value)),
                  std::string("cublasLtMatmulPreferenceSetAttribute(") + name + ")");
}

// What makes two ops' algorithm choice the same: the whole GEMM, n, and the pointer alignments.
std::string algorithmKey(const GemmDesc &g, uint64_t lowRows, uint64_t highRows,
                         const BoundOp &op) {
  std::string key;
  for (int64_t v : {int64_t(g.m), int64_t(g.k), int64_t(lowRows), int64_t(highRows), g.lda, g.ldb,
                    g.ldc, int64_t(g.aType), int64_t(g.bType), int64_t(g.cType),
                    int64_t(g.epilogue), int64_t(g.biasType)})
    key += std::to_string(v) + ",";
  for (const BoundBuffer &b : op.inputs)
    key += std::to_string(pointerAlignment(b.data)) + ",";
  return key + std::to_string(pointerAlignment(op.outputs[0].data));
}

// A heuristic preference: the workspace limit and the op's actual pointer alignments (the
// default assumes 256-byte aligned pointers).
struct Preference {
  std::shared_ptr<const CublasLt> lt;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref)
      lt->preferenceDestroy(pref);
  }
};

Result<std::unique_ptr<Preference>> makePreference(std::shared_ptr<const CublasLt> lt,
                                                   uint64_t workspaceBytes, const BoundOp &op) {
  auto p = std::make_unique<Preference>();
  p->lt = lt;
  KILN_RETURN_IF_ERROR(lt->check(lt->preferenceCreate(&p->pref), "cublasLtMatmulPreferenceCreate"));
  KILN_RETURN_IF_ERROR(setPreference(*lt, p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                     workspaceBytes, "MAX_WORKSPACE_BYTES"));
  const uint32_t alignA = pointerAlignment(op.inputs[1].data);
  const uint32_t alignB = pointerAlignment(op.inputs[0].data);
  const uint32_t alignD = pointerAlignment(op.outputs[0].data);
  KILN_RETURN_IF_ERROR(
      setPreference(*lt, p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA, "ALIGN_A"));
  KILN_RETURN_IF_ERROR(
      setPreference(*lt, p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB, "ALIGN_B"));
  KILN_RETURN_IF_ERROR(
      setPreference(*lt, p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignD, "ALIGN_C"));
  KILN_RETURN_IF_ERROR(
      setPreference(*lt, p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignD, "ALIGN_D"));
  return p;
}

class CudaLinearOp final : public PreparedOp {
public:
  std::string label;
  GemmDesc gemm;
  schema::RowScale rowsRule = schema::RowScale::Fixed;
  const void *x = nullptr, *w = nullptr;
  void *y = nullptr;
  std::unique_ptr<LinearDescriptors> descriptors; // setRows mutates cuBLASLt objects only
  std::vector<uint64_t> buckets;
  std::vector<CudaLinear::Choice> algorithms; // one per bucket
};

} // namespace

Result<GemmDesc> describeLinear(const BoundOp &op) {
  if (!op.op || op.op->params_type() != schema::OpParams::LinearParams)
    return invalidArgument("cuda backend: describeLinear needs a Linear op, got " +
                           (op.op ? opKindName(op.op->params_type()) : std::string("none")));
  const bool hasBias = op.op->params_as_LinearParams()->has_bias();
  KILN_RETURN_IF_ERROR(checkLinearShapes(op, hasBias));
  KILN_RETURN_IF_ERROR(checkLinearDtypes(op, hasBias));
  const BoundBuffer &x = op.inputs[0], &w = op.inputs[1], &y = op.outputs[0];
  GemmDesc g;
  g.m = static_cast<uint64_t>(w.fixedRows);
  g.k = static_cast<uint64_t>(w.width);
  g.maxN = static_cast<uint64_t>(x.fixedRows);
  g.lda = w.width;
  g.ldb = x.width;
  g.ldc = y.width;
  g.transA = CUBLAS_OP_T;
  g.transB = CUBLAS_OP_N;
  g.aType = cudaType(w.dtype);
  g.bType = cudaType(x.dtype);
  g.cType = cudaType(y.dtype);
  // fp32 accumulation for every input type; plain COMPUTE_32F never uses TF32, so the fp32 path
  // matches the cpu backend to rounding.
  g.computeType = CUBLAS_COMPUTE_32F;
  g.scaleType = CUDA_R_32F;
  g.epilogue = hasBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  g.biasType = g.cType;
  g.convertBias = hasBias && op.inputs[2].dtype != y.dtype;
  return g;
}

std::vector<uint64_t> linearRowBuckets(uint64_t maxRows) {
  std::vector<uint64_t> buckets;
  for (uint64_t b = 1; b < maxRows; b *= 2)
    buckets.push_back(b);
  buckets.push_back(std::max<uint64_t>(maxRows, 1));
  return buckets;
}

size_t linearRowBucket(const std::vector<uint64_t> &buckets, uint64_t rows) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), rows);
  return it == buckets.end() ? buckets.size() - 1 : static_cast<size_t>(it - buckets.begin());
}

uint32_t pointerAlignment(const void *p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address == 0)
    return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, address & (~address + 1)));
}

Result<std::unique_ptr<LinearDescriptors>>
LinearDescriptors::make(std::shared_ptr<const CublasLt> lt, const GemmDesc &g, const void *bias) {
  std::unique_ptr<LinearDescriptors> d(new LinearDescriptors(lt));
  KILN_RETURN_IF_ERROR(lt->check(lt->matmulDescCreate(&d->matmul, g.computeType, g.scaleType),
                                 "cublasLtMatmulDescCreate"));
  const int32_t transA = g.transA, transB = g.transB;
  KILN_RETURN_IF_ERROR(setMatmul(*lt, d->matmul, CUBLASLT_MATMUL_DESC_TRANSA, transA, "TRANSA"));
  KILN_RETURN_IF_ERROR(setMatmul(*lt, d->matmul, CUBLASLT_MATMUL_DESC_TRANSB, transB, "TRANSB"));
  const uint32_t epilogue = g.epilogue;
  KILN_RETURN_IF_ERROR(
      setMatmul(*lt, d->matmul, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE"));
  if (g.epilogue == CUBLASLT_EPILOGUE_BIAS) {
    KILN_RETURN_IF_ERROR(
        setMatmul(*lt, d->matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER"));
    const int32_t biasType = g.biasType;
    KILN_RETURN_IF_ERROR(
        setMatmul(*lt, d->matmul, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, biasType, "BIAS_DATA_TYPE"));
  }
  // Layouts as stored (before op()): A is k x m, B is k x n, D is m x n; n starts at the maxima.
  KILN_RETURN_IF_ERROR(lt->check(lt->matrixLayoutCreate(&d->a, g.aType, g.k, g.m, g.lda),
                                 "cublasLtMatrixLayoutCreate(A = W)"));
  KILN_RETURN_IF_ERROR(lt->check(lt->matrixLayoutCreate(&d->b, g.bType, g.k, g.maxN, g.ldb),
                                 "cublasLtMatrixLayoutCreate(B = x)"));
  KILN_RETURN_IF_ERROR(lt->check(lt->matrixLayoutCreate(&d->d, g.cType, g.m, g.maxN, g.ldc),
                                 "cublasLtMatrixLayoutCreate(D = y)"));
  d->rows_ = g.maxN;
  return d;
}

LinearDescriptors::~LinearDescriptors() {
  if (d)
    lt_->matrixLayoutDestroy(d);
  if (b)
    lt_->matrixLayoutDestroy(b);
  if (a)
    lt_->matrixLayoutDestroy(a);
  if (matmul)
    lt_->matmulDescDestroy(matmul);
}

Status LinearDescriptors::setRows(uint64_t n) {
  if (n == rows_)
    return okStatus();
  for (cublasLtMatrixLayout_t layout : {b, d})
    KILN_RETURN_IF_ERROR(lt_->check(
        lt_->matrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof(n)),
        "cublasLtMatrixLayoutSetAttribute(COLS = " + std::to_string(n) + ")"));
  rows_ = n;
  return okStatus();
}

Result<std::unique_ptr<CudaLinear>> CudaLinear::create(std::shared_ptr<const CublasLt> lt,
                                                       void *workspace, size_t workspaceBytes,
                                                       LinearTimer timer) {
  std::unique_ptr<CudaLinear> linear(
      new CudaLinear(std::move(lt), workspace, workspaceBytes, std::move(timer)));
  KILN_RETURN_IF_ERROR(linear->lt_->check(linear->lt_->create(&linear->handle_),
                                          "cublasLtCreate (" + linear->lt_->library() + ")"));
  return linear;
}

CudaLinear::~CudaLinear() {
  if (handle_)
    lt_->destroy(handle_);
}

bool linearAutotuneFromEnvironment() {
  const char *value = std::getenv("KILN_LINEAR_AUTOTUNE");
  return !value || std::string(value) != "0";
}

size_t pickTimedAlgorithm(const std::vector<double> &millis, double margin) {
  std::optional<size_t> fastest;
  for (size_t i = 0; i < millis.size(); ++i)
    if (millis[i] >= 0 && (!fastest || millis[i] < millis[*fastest]))
      fastest = i;
  if (!fastest || millis.empty())
    return 0;
  if (millis[0] < 0 || millis[*fastest] < millis[0] * (1 - margin))
    return *fastest;
  return 0;
}

// Heuristic results for n = highRows that also pass cublasLtMatmulAlgoCheck at n = lowRows (so
// they serve every row count of their bucket), in the heuristic's order; leaves n = highRows.
Result<std::vector<cublasLtMatmulAlgo_t>>
CudaLinear::usableCandidates(const BoundOp &op, const GemmDesc &g, LinearDescriptors &d,
                             uint64_t lowRows, uint64_t highRows) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Preference> pref, makePreference(lt_, workspaceBytes_, op));
  KILN_RETURN_IF_ERROR(d.setRows(highRows));
  constexpr int kRequested = 8;
  cublasLtMatmulHeuristicResult_t results[kRequested] = {};
  int returned = 0;
  cublasStatus_t rc = lt_->algoGetHeuristic(handle_, d.matmul, d.a, d.b, d.d, d.d, pref->pref,
                                            kRequested, results, &returned);
  const std::string problem = "m " + std::to_string(g.m) + ", n " + std::to_string(highRows) +
                              ", k " + std::to_string(g.k) + ", A/B/D types " +
                              std::to_string(g.aType) + "/" + std::to_string(g.bType) + "/" +
                              std::to_string(g.cType) +
                              (g.epilogue == CUBLASLT_EPILOGUE_BIAS ? ", bias" : "");
  if (rc != CUBLAS_STATUS_SUCCESS && rc != CUBLAS_STATUS_NOT_SUPPORTED)
    return lt_->check(rc,
                      "cublasLtMatmulAlgoGetHeuristic for " + opLabel(op) + " (" + problem + ")");
  std::vector<cublasLtMatmulAlgo_t> usable;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS)
      continue;
    if (lowRows != highRows) {
      KILN_RETURN_IF_ERROR(d.setRows(lowRows));
      cublasLtMatmulHeuristicResult_t checked = {};
      cublasStatus_t ok =
          lt_->algoCheck(handle_, d.matmul, d.a, d.b, d.d, d.d, &results[i].algo, &checked);
      KILN_RETURN_IF_ERROR(d.setRows(highRows));
      if (ok != CUBLAS_STATUS_SUCCESS || checked.workspaceSize > workspaceBytes_)
        continue;
    }
    usable.push_back(results[i].algo);
  }
  if (usable.empty())
    return unimplemented("cuda backend: " + opLabel(op) + ": cuBLASLt (" + lt_->library() +
                         ") has no algorithm for " + problem + " on this GPU (heuristic: " +
                         lt_->describe(rc) + ", " + std::to_string(returned) + " result(s))");
  return usable;
}

// The index of the candidate to keep: timed on the op's own buffers at the descriptors' current
// row count (the bucket's top), or 0 without a timer.
size_t CudaLinear::fastestCandidate(const BoundOp &op, LinearDescriptors &d,
                                    const std::vector<cublasLtMatmulAlgo_t> &candidates) {
  if (!timer_ || candidates.size() < 2)
    return 0;
  const void *x = op.inputs[0].data, *w = op.inputs[1].data;
  void *y = op.outputs[0].data;
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<double> millis;
  for (const cublasLtMatmulAlgo_t &algo : candidates) {
    Result<double> timed = timer_([&](CUstream stream) {
      return lt_->check(lt_->matmul(handle_, d.matmul, &alpha, w, d.a, x, d.b, &beta, y, d.d, y,
                                    d.d, &algo, workspace_, workspaceBytes_, stream),
                        "cublasLtMatmul timing a candidate for " + opLabel(op));
    });
    millis.push_back(timed.isOk() ? *timed : -1.0);
  }
  return pickTimedAlgorithm(millis);
}

// Cached per problem (algorithmKey): ops of one shape share the choice.
Result<CudaLinear::Choice> CudaLinear::chooseAlgorithm(const BoundOp &op, const GemmDesc &g,
                                                       LinearDescriptors &d, uint64_t lowRows,
                                                       uint64_t highRows) {
  const std::string key = algorithmKey(g, lowRows, highRows, op);
  if (auto it = algorithms_.find(key); it != algorithms_.end())
    return it->second;
  KILN_ASSIGN_OR_RETURN(std::vector<cublasLtMatmulAlgo_t> candidates,
                        usableCandidates(op, g, d, lowRows, highRows));
  Choice choice;
  choice.candidates = candidates.size();
  choice.chosen = fastestCandidate(op, d, candidates);
  choice.algorithm = candidates[choice.chosen];
  algorithms_[key] = choice;
  return choice;
}

const std::vector<CudaLinear::Choice> &CudaLinear::choices(const PreparedOp &prepared) {
  return static_cast<const CudaLinearOp &>(prepared).algorithms;
}

std::string CudaLinear::describe(const PreparedOp &prepared, const StepCounts &counts) {
  const auto &op = static_cast<const CudaLinearOp &>(prepared);
  const int64_t rows = counts.rows(op.rowsRule, static_cast<int64_t>(op.gemm.maxN));
  if (rows <= 0 || op.algorithms.empty())
    return "";
  const Choice &choice = op.algorithms[linearRowBucket(op.buckets, static_cast<uint64_t>(rows))];
  return "cublasLt " + std::to_string(choice.chosen + 1) + "/" + std::to_string(choice.candidates);
}

Result<std::unique_ptr<PreparedOp>> CudaLinear::prepare(const BoundOp &op) {
  KILN_ASSIGN_OR_RETURN(GemmDesc gemm, describeLinear(op));
  if (gemm.convertBias)
    return failedPrecondition("cuda backend: " + opLabel(op) +
                              ": its F32 bias must be converted "
                              "to y's dtype before CudaLinear::prepare (CudaDevice does)");
  auto prepared = std::make_unique<CudaLinearOp>();
  prepared->label = opLabel(op);
  prepared->gemm = gemm;
  prepared->rowsRule = op.inputs[0].rows;
  prepared->x = op.inputs[0].data;
  prepared->w = op.inputs[1].data;
  prepared->y = op.outputs[0].data;
  const void *bias = gemm.epilogue == CUBLASLT_EPILOGUE_BIAS ? op.inputs[2].data : nullptr;
  KILN_ASSIGN_OR_RETURN(prepared->descriptors, LinearDescriptors::make(lt_, gemm, bias));
  prepared->buckets = linearRowBuckets(gemm.maxN);
  uint64_t low = 1;
  for (uint64_t high : prepared->buckets) {
    KILN_ASSIGN_OR_RETURN(Choice choice,
                          chooseAlgorithm(op, gemm, *prepared->descriptors, low, high));
    prepared->algorithms.push_back(choice);
    low = high + 1;
  }
  return std::unique_ptr<PreparedOp>(std::move(prepared));
}

Status CudaLinear::run(const PreparedOp &prepared, const StepCounts &counts,
                       CUstream stream) const {
  // Only CudaLinear::prepare makes the ops routed here.
  const auto &op = static_cast<const CudaLinearOp &>(prepared);
  const int64_t rows = counts.rows(op.rowsRule, static_cast<int64_t>(op.gemm.maxN));
  if (rows <= 0)
    return okStatus();
  if (static_cast<uint64_t>(rows) > op.gemm.maxN)
    return outOfRange("cuda backend: " + op.label + ": " + std::to_string(rows) +
                      " rows, compiled for at most " + std::to_string(op.gemm.maxN));
  const size_t bucket = linearRowBucket(op.buckets, static_cast<uint64_t>(rows));
  KILN_RETURN_IF_ERROR(op.descriptors->setRows(static_cast<uint64_t>(rows)));
  const float alpha = 1.0f, beta = 0.0f;
  const LinearDescriptors &d = *op.descriptors;
  return lt_->check(lt_->matmul(handle_, d.matmul, &alpha, op.w, d.a, op.x, d.b, &beta, op.y, d.d,
                                op.y, d.d, &op.algorithms[bucket].algorithm, workspace_,
                                workspaceBytes_, stream),
                    "cublasLtMatmul for " + op.label + " (" + std::to_string(rows) + " rows)");
}

} // namespace kiln::rt
