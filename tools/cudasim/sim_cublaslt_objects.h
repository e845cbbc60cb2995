// The simulated cuBLASLt's objects (sim_cublaslt.cc): handles, matmul descriptors, matrix
// layouts and heuristic preferences, holding every attribute cublasLt.h documents for them.
// cuBLASLt itself checks only an attribute's size when it is set and its value when a matmul is
// planned; the simulator also rejects a value it does not simulate as soon as it is set, with a
// one-line note on stderr, so the caller learns which attribute and why at the call that made it.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <string>

#pragma GCC visibility push(hidden)

namespace kiln::cudasim::blaslt {

// Prints "cudasim cuBLASLt: <what>" on stderr and returns `status`: every failure says why.
cublasStatus_t fail(cublasStatus_t status, const std::string &what);

struct Handle {
  int unused = 0;
};

struct MatrixLayout {
  cudaDataType_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batchCount = 1;
  int64_t batchStride = 0;
  int64_t planeOffset = 0;
  uint32_t batchMode = CUBLASLT_BATCH_MODE_STRIDED;
};

struct MatmulDesc {
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = CUDA_R_32F;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transA = CUBLAS_OP_N;
  int32_t transB = CUBLAS_OP_N;
  int32_t transC = CUBLAS_OP_N;
  int32_t fillMode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int64_t biasBatchStride = 0;
  int32_t biasType = -1; // -1: D's type (cublasLt.h)
  int32_t smCountTarget = 0;
  int8_t fastAccum = 0;
  int64_t alphaVectorBatchStride = 0;
};

struct Preference {
  uint32_t searchMode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t maxWorkspaceBytes = 0;
  uint32_t reductionSchemeMask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t minAlignmentA = 256;
  uint32_t minAlignmentB = 256;
  uint32_t minAlignmentC = 256;
  uint32_t minAlignmentD = 256;
  float maxWavesCount = 0.0f;
  uint64_t implMask = ~uint64_t(0);
};

// Live objects, so that a destroyed or foreign pointer is refused instead of read. Thread safe.
enum class Kind { kHandle, kMatmulDesc, kLayout, kPreference };
void registerObject(Kind kind, const void *object);
bool unregisterObject(Kind kind, const void *object); // false when it was not live
bool isLive(Kind kind, const void *object);

// Element size of a data type the simulator computes with (F32, F16, BF16), else 0.
size_t elementBytes(cudaDataType_t type);
// "CUDA_R_16BF", or the number for a type the simulator does not name.
std::string typeName(int32_t type);
// Whether the simulator runs matmuls with this compute type (fp32 accumulation).
bool isSimulatedComputeType(int32_t computeType);

cublasStatus_t setMatmulDescAttribute(MatmulDesc &desc, cublasLtMatmulDescAttributes_t attr,
                                      const void *buf, size_t sizeInBytes);
cublasStatus_t setLayoutAttribute(MatrixLayout &layout, cublasLtMatrixLayoutAttribute_t attr,
                                  const void *buf, size_t sizeInBytes);
cublasStatus_t setPreferenceAttribute(Preference &pref, cublasLtMatmulPreferenceAttributes_t attr,
                                      const void *buf, size_t sizeInBytes);

// The checks cublasLtMatrixLayoutCreate and the ROWS/COLS/LD/TYPE setters share.
cublasStatus_t checkLayoutType(cudaDataType_t type, const char *where);
cublasStatus_t checkDimension(uint64_t value, const char *what, const char *where);
cublasStatus_t checkLeadingDimension(int64_t ld, const char *where);

} // namespace kiln::cudasim::blaslt

#pragma GCC visibility pop
