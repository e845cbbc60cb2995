// libcublasLt.so.13 for cudasim: the cuBLASLt entry points kiln resolves
// (runtime/hal/cuda/cublaslt_library.h KILN_CUBLASLT_FUNCTIONS), computed on the host.
//
// Device pointers are host addresses in the simulator, so a matmul reads and writes them
// directly. It is ordered on its stream through the simulated driver's host-work hook
// (sim_hooks.h): run at once on a stream that is not being captured, recorded into the graph on
// one that is. Everything a matmul needs (descriptor state, host-mode alpha/beta, pointers) is
// copied at the call, as cuBLASLt copies it into its kernel's parameters, so changing or
// destroying a descriptor afterwards does not change a recorded matmul. Without the simulated
// driver loaded (a test driving cuBLASLt alone with host buffers) a matmul runs synchronously.
#include "tools/cudasim/sim_cublaslt_gemm.h"
#include "tools/cudasim/sim_hooks.h"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <string>

namespace kiln::cudasim::blaslt {
namespace {

using EnqueueHostWork = CUresult (*)(CUstream, void (*)(void *), void *, void (*)(void *));

// The simulated driver's hook, if that driver is loaded. Not cached while absent: a process may
// load the driver after its first matmul.
struct DriverHook {
  bool driverLoaded = false;
  EnqueueHostWork enqueue = nullptr;
};

DriverHook driverHook() {
  static std::atomic<EnqueueHostWork> cached{nullptr};
  if (EnqueueHostWork hook = cached.load())
    return {true, hook};
  void *driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (!driver)
    return {false, nullptr};
  auto hook = reinterpret_cast<EnqueueHostWork>(dlsym(driver, kKilnCudasimEnqueueHostWork));
  if (!hook) {
    dlclose(driver);
    return {true, nullptr};
  }
  cached.store(hook); // the reference dlopen took keeps the driver loaded
  return {true, hook};
}

void runJob(void *data) {
  runGemm(*static_cast<const GemmJob *>(data));
}

void releaseJob(void *data) {
  delete static_cast<GemmJob *>(data);
}

cublasStatus_t enqueue(std::unique_ptr<GemmJob> job, cudaStream_t stream) {
  const DriverHook hook = driverHook();
  if (!hook.driverLoaded) {
    runGemm(*job);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!hook.enqueue)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                "cublasLtMatmul: the libcuda.so.1 loaded is not cudasim's (no " +
                    std::string(kKilnCudasimEnqueueHostWork) +
                    "): the simulated cuBLASLt runs only with the simulated driver");
  GemmJob *raw = job.release();
  const CUresult rc = hook.enqueue(reinterpret_cast<CUstream>(stream), runJob, raw, releaseJob);
  if (rc == CUDA_SUCCESS)
    return CUBLAS_STATUS_SUCCESS;
  // The driver owns `raw` from the call on and has released it, failed call included.
  return fail(CUBLAS_STATUS_EXECUTION_FAILED,
              "cublasLtMatmul: the simulated driver refused the matmul on its stream (CUresult " +
                  std::to_string(static_cast<int>(rc)) + ")");
}

bool liveLayouts(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                 cublasLtMatrixLayout_t d) {
  for (cublasLtMatrixLayout_t layout : {a, b, c, d})
    if (!isLive(Kind::kLayout, layout))
      return false;
  return true;
}

const MatrixLayout &layoutOf(cublasLtMatrixLayout_t layout) {
  return *reinterpret_cast<const MatrixLayout *>(layout);
}

const MatmulDesc &descOf(cublasLtMatmulDesc_t desc) {
  return *reinterpret_cast<const MatmulDesc *>(desc);
}

// The checks every planning entry point starts with, then planGemm.
cublasStatus_t plan(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                    const char *where, GemmProblem &problem) {
  if (!isLive(Kind::kHandle, handle))
    return fail(CUBLAS_STATUS_NOT_INITIALIZED,
                std::string(where) + ": the handle is not one cublasLtCreate made (or destroyed)");
  if (!isLive(Kind::kMatmulDesc, desc) || !liveLayouts(a, b, c, d))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(where) + ": a descriptor is null, destroyed or not cuBLASLt's");
  return planGemm(descOf(desc), layoutOf(a), layoutOf(b), layoutOf(c), layoutOf(d), where, problem);
}

// cublasLtMatmul with a null algo: the heuristic's first algorithm that fits what it was given.
const AlgoSpec *implicitAlgo(const GemmJob &job, size_t workspaceBytes) {
  for (int i = 0; i < kAlgoCount; ++i) {
    const AlgoSpec &spec = algoSpec(i);
    if (algoWorkspace(spec, job.problem) <= workspaceBytes &&
        checkAlgoFits(spec, job.problem, nullptr) == CUBLAS_STATUS_SUCCESS &&
        pointersAligned(job, spec))
      return &spec;
  }
  return nullptr;
}

cublasStatus_t readScalars(const MatmulDesc &desc, const void *alpha, const void *beta,
                           GemmJob &job) {
  if (!alpha || !beta)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: alpha or beta is null");
  if (desc.pointerMode == CUBLASLT_POINTER_MODE_DEVICE) {
    job.alphaAt = static_cast<const float *>(alpha);
    job.betaAt = static_cast<const float *>(beta);
  } else { // host mode: the values at the call, as cuBLASLt reads them
    job.alpha = *static_cast<const float *>(alpha);
    job.beta = *static_cast<const float *>(beta);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t chooseAlgo(const MatmulDesc &desc, const cublasLtMatmulAlgo_t *algo,
                          const GemmJob &job, size_t workspaceBytes, const AlgoSpec *&spec) {
  if (!algo) {
    spec = implicitAlgo(job, workspaceBytes);
    if (!spec)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                  "cublasLtMatmul: no algorithm fits the problem, its pointers' alignment and a "
                  "workspace of " +
                      std::to_string(workspaceBytes) + " bytes");
    return CUBLAS_STATUS_SUCCESS;
  }
  if (cublasStatus_t rc = decodeAlgo(*algo, desc, job.problem, "cublasLtMatmul", spec);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  return checkAlgoFits(*spec, job.problem, "cublasLtMatmul");
}

} // namespace
} // namespace kiln::cudasim::blaslt

using namespace kiln::cudasim::blaslt;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: lightHandle is null");
  auto *handle = new Handle();
  registerObject(Kind::kHandle, handle);
  *lightHandle = reinterpret_cast<cublasLtHandle_t>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!unregisterObject(Kind::kHandle, lightHandle))
    return fail(CUBLAS_STATUS_NOT_INITIALIZED,
                "cublasLtDestroy: not a live handle (null, destroyed twice or not cuBLASLt's)");
  delete reinterpret_cast<Handle *>(lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void) {
  return CUBLAS_VERSION; // the headers' (13.1.0: 130100), so version checks see CUDA 13
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unrecognized status";
}

// The texts libcublasLt.so.13 returns.
const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an unsupported value or parameter was passed to the function";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "the function requires an architectural feature absent from the device";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the function failed to launch on the GPU";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the requested functionality is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "the license check failed";
  }
  return "unrecognized status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (!matmulDesc)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: matmulDesc is null");
  if (!isSimulatedComputeType(computeType))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                "cublasLtMatmulDescCreate: compute type " + std::to_string(computeType) +
                    " is not simulated (CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_PEDANTIC are)");
  if (scaleType != CUDA_R_32F)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                "cublasLtMatmulDescCreate: scale type " + typeName(scaleType) +
                    " is not simulated (fp32 compute scales in CUDA_R_32F)");
  auto *desc = new MatmulDesc();
  desc->computeType = computeType;
  desc->scaleType = scaleType;
  registerObject(Kind::kMatmulDesc, desc);
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!matmulDesc)
    return CUBLAS_STATUS_SUCCESS;
  if (!unregisterObject(Kind::kMatmulDesc, matmulDesc))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatmulDescDestroy: not a live descriptor (destroyed twice?)");
  delete reinterpret_cast<MatmulDesc *>(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t sizeInBytes) {
  if (!isLive(Kind::kMatmulDesc, matmulDesc))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatmulDescSetAttribute: not a live matmul descriptor");
  return setMatmulDescAttribute(*reinterpret_cast<MatmulDesc *>(matmulDesc), attr, buf,
                                sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  const char *where = "cublasLtMatrixLayoutCreate";
  if (!matLayout)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: matLayout is null");
  for (cublasStatus_t rc : {checkLayoutType(type, where), checkDimension(rows, "rows", where),
                            checkDimension(cols, "cols", where), checkLeadingDimension(ld, where)})
    if (rc != CUBLAS_STATUS_SUCCESS)
      return rc;
  auto *layout = new MatrixLayout();
  layout->type = type;
  layout->rows = rows;
  layout->cols = cols;
  layout->ld = ld;
  registerObject(Kind::kLayout, layout);
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!matLayout)
    return CUBLAS_STATUS_SUCCESS;
  if (!unregisterObject(Kind::kLayout, matLayout))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatrixLayoutDestroy: not a live layout (destroyed twice?)");
  delete reinterpret_cast<MatrixLayout *>(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
  if (!isLive(Kind::kLayout, matLayout))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatrixLayoutSetAttribute: not a live matrix layout");
  return setLayoutAttribute(*reinterpret_cast<MatrixLayout *>(matLayout), attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: pref is null");
  auto *preference = new Preference();
  registerObject(Kind::kPreference, preference);
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref)
    return CUBLAS_STATUS_SUCCESS;
  if (!unregisterObject(Kind::kPreference, pref))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatmulPreferenceDestroy: not a live preference (destroyed twice?)");
  delete reinterpret_cast<Preference *>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
  if (!isLive(Kind::kPreference, pref))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatmulPreferenceSetAttribute: not a live preference");
  return setPreferenceAttribute(*reinterpret_cast<Preference *>(pref), attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
  const char *where = "cublasLtMatmulAlgoGetHeuristic";
  if (!returnAlgoCount || !heuristicResultsArray || requestedAlgoCount <= 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(where) + ": needs results, returnAlgoCount and a requested count > 0");
  *returnAlgoCount = 0;
  if (!isLive(Kind::kPreference, preference))
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(where) + ": not a live preference");
  GemmProblem problem;
  if (cublasStatus_t rc =
          plan(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, where, problem);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  const Preference &pref = *reinterpret_cast<const Preference *>(preference);
  int count = 0;
  for (int i = 0; i < kAlgoCount && count < requestedAlgoCount; ++i) {
    const AlgoSpec &spec = algoSpec(i);
    if (!preferenceAllows(spec, problem, pref))
      continue;
    cublasLtMatmulHeuristicResult_t &result = heuristicResultsArray[count++];
    result = {};
    result.algo = encodeAlgo(spec, descOf(operationDesc), problem);
    result.workspaceSize = algoWorkspace(spec, problem);
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = wavesCount(spec, problem);
  }
  *returnAlgoCount = count;
  if (count == 0)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                std::string(where) + ": no algorithm fits a workspace of " +
                    std::to_string(pref.maxWorkspaceBytes) +
                    " bytes, the preference's alignments and the leading dimensions");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t lightHandle,
                                       cublasLtMatmulDesc_t operationDesc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t *algo,
                                       cublasLtMatmulHeuristicResult_t *result) {
  const char *where = "cublasLtMatmulAlgoCheck";
  if (!algo || !result)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(where) + ": algo or result is null");
  GemmProblem problem;
  if (cublasStatus_t rc =
          plan(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, where, problem);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  const AlgoSpec *spec = nullptr;
  if (cublasStatus_t rc = decodeAlgo(*algo, descOf(operationDesc), problem, where, spec);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  if (cublasStatus_t rc = checkAlgoFits(*spec, problem, where); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  // result->algo is left alone: cublasLt.h says it is never updated (algo may point at it).
  result->workspaceSize = algoWorkspace(*spec, problem);
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = wavesCount(*spec, problem);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char *where = "cublasLtMatmul";
  auto job = std::make_unique<GemmJob>();
  if (cublasStatus_t rc =
          plan(lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, where, job->problem);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  const MatmulDesc &desc = descOf(computeDesc);
  if (cublasStatus_t rc = readScalars(desc, alpha, beta, *job); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  job->a = A;
  job->b = B;
  job->c = C;
  job->d = D;
  const AlgoSpec *spec = nullptr;
  if (cublasStatus_t rc = chooseAlgo(desc, algo, *job, workspaceSizeInBytes, spec);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  const size_t needed = algoWorkspace(*spec, job->problem);
  if (needed > workspaceSizeInBytes || (needed && !workspace))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(where) + ": algorithm " + std::to_string(spec->id) + " (" + spec->name +
                    ") needs " + std::to_string(needed) + " bytes of workspace, given " +
                    std::to_string(workspaceSizeInBytes) + (workspace ? "" : " at a null pointer"));
  job->workspace = workspace;
  job->workspaceUsed = needed;
  if (cublasStatus_t rc = checkJobPointers(*job, *spec, where); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  return enqueue(std::move(job), stream);
}

} // extern "C"
