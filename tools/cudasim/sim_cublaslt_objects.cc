#include "tools/cudasim/sim_cublaslt_objects.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#pragma GCC visibility push(hidden)

namespace kiln::cudasim::blaslt {
namespace {

std::mutex &registryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::set<std::pair<Kind, const void *>> &registry() {
  static std::set<std::pair<Kind, const void *>> live;
  return live;
}

#define KILN_BLASLT_NAME(x)                                                                        \
  case x:                                                                                          \
    return #x;

std::string descAttrName(cublasLtMatmulDescAttributes_t attr) {
  switch (attr) {
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_SCALE_TYPE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_POINTER_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_TRANSA)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_TRANSB)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_TRANSC)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_FILL_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_BIAS_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_FAST_ACCUM)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_A_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_B_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_C_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_D_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR)
  }
  return "attribute " + std::to_string(static_cast<int>(attr));
}

std::string layoutAttrName(cublasLtMatrixLayoutAttribute_t attr) {
  switch (attr) {
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_TYPE)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_ORDER)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_ROWS)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_COLS)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_LD)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET)
    KILN_BLASLT_NAME(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE)
  }
  return "attribute " + std::to_string(static_cast<int>(attr));
}

std::string preferenceAttrName(cublasLtMatmulPreferenceAttributes_t attr) {
  switch (attr) {
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_SEARCH_MODE)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT)
    KILN_BLASLT_NAME(CUBLASLT_MATMUL_PREF_IMPL_MASK)
  }
  return "attribute " + std::to_string(static_cast<int>(attr));
}

#undef KILN_BLASLT_NAME

// Copies the attribute's value out of `buf` after the checks cuBLASLt makes on every setter.
template <typename T>
cublasStatus_t readValue(const void *buf, size_t sizeInBytes, const std::string &where,
                         const char *typeLabel, T &out) {
  if (!buf)
    return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": buf is null");
  if (sizeInBytes != sizeof(T))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                where + ": sizeInBytes " + std::to_string(sizeInBytes) + ", the attribute is " +
                    typeLabel + " (" + std::to_string(sizeof(T)) + " bytes)");
  std::memcpy(&out, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

#define KILN_BLASLT_READ(type, var)                                                                \
  type var{};                                                                                      \
  if (cublasStatus_t rc = readValue(buf, sizeInBytes, where, #type, var);                          \
      rc != CUBLAS_STATUS_SUCCESS)                                                                 \
    return rc;

cublasStatus_t setOperation(int32_t &field, const void *buf, size_t sizeInBytes,
                            const std::string &where, bool onlyN) {
  KILN_BLASLT_READ(int32_t, value)
  if (value < CUBLAS_OP_N || value > CUBLAS_OP_CONJG)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                where + ": " + std::to_string(value) + " is not a cublasOperation_t");
  if (value == CUBLAS_OP_CONJG || (onlyN && value != CUBLAS_OP_N))
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, where + ": operation " + std::to_string(value) +
                                                 " is not supported" +
                                                 (onlyN ? " (only CUBLAS_OP_N)" : ""));
  field = value; // CUBLAS_OP_C is CUBLAS_OP_T for the real types simulated
  return CUBLAS_STATUS_SUCCESS;
}

// Attributes of features the simulator leaves out: their unset value is accepted, so code
// that clears them works, and anything else is refused rather than silently ignored.
template <typename T>
cublasStatus_t setMustStayDefault(const void *buf, size_t sizeInBytes, const std::string &where,
                                  const char *typeLabel, T defaultValue) {
  T value{};
  if (cublasStatus_t rc = readValue(buf, sizeInBytes, where, typeLabel, value);
      rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  if (value != defaultValue)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, where + ": only the default is simulated");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t setEpilogue(MatmulDesc &desc, const void *buf, size_t sizeInBytes,
                           const std::string &where) {
  KILN_BLASLT_READ(uint32_t, value)
  switch (value) {
  case CUBLASLT_EPILOGUE_DEFAULT:
  case CUBLASLT_EPILOGUE_RELU:
  case CUBLASLT_EPILOGUE_BIAS:
  case CUBLASLT_EPILOGUE_RELU_BIAS:
    desc.epilogue = value;
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_EPILOGUE_RELU_AUX:
  case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
  case CUBLASLT_EPILOGUE_DRELU:
  case CUBLASLT_EPILOGUE_DRELU_BGRAD:
  case CUBLASLT_EPILOGUE_GELU:
  case CUBLASLT_EPILOGUE_GELU_AUX:
  case CUBLASLT_EPILOGUE_GELU_BIAS:
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
  case CUBLASLT_EPILOGUE_DGELU:
  case CUBLASLT_EPILOGUE_DGELU_BGRAD:
  case CUBLASLT_EPILOGUE_BGRADA:
  case CUBLASLT_EPILOGUE_BGRADB:
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": epilogue " + std::to_string(value) +
                    " is not simulated (DEFAULT, RELU, BIAS and RELU_BIAS are)");
  default:
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                where + ": " + std::to_string(value) + " is not a cublasLtEpilogue_t");
  }
}

cublasStatus_t setPointerMode(MatmulDesc &desc, const void *buf, size_t sizeInBytes,
                              const std::string &where) {
  KILN_BLASLT_READ(int32_t, value)
  if (value == CUBLASLT_POINTER_MODE_HOST || value == CUBLASLT_POINTER_MODE_DEVICE) {
    desc.pointerMode = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (value > CUBLASLT_POINTER_MODE_DEVICE &&
      value <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": vector pointer modes are not simulated (HOST and DEVICE are)");
  return fail(CUBLAS_STATUS_INVALID_VALUE,
              where + ": " + std::to_string(value) + " is not a cublasLtPointerMode_t");
}

cublasStatus_t setFillMode(MatmulDesc &desc, const void *buf, size_t sizeInBytes,
                           const std::string &where) {
  KILN_BLASLT_READ(int32_t, value)
  if (value == CUBLAS_FILL_MODE_FULL) {
    desc.fillMode = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (value == CUBLAS_FILL_MODE_LOWER || value == CUBLAS_FILL_MODE_UPPER)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": triangular fill modes are not simulated (only CUBLAS_FILL_MODE_FULL)");
  return fail(CUBLAS_STATUS_INVALID_VALUE,
              where + ": " + std::to_string(value) + " is not a cublasFillMode_t");
}

cublasStatus_t setTypeAttribute(int32_t &field, const void *buf, size_t sizeInBytes,
                                const std::string &where, bool allowUnset) {
  KILN_BLASLT_READ(int32_t, value)
  if ((allowUnset && value == -1) || elementBytes(static_cast<cudaDataType_t>(value)) != 0) {
    field = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  return fail(CUBLAS_STATUS_NOT_SUPPORTED,
              where + ": " + typeName(value) +
                  " is not simulated (CUDA_R_32F, CUDA_R_16F and CUDA_R_16BF are)");
}

cublasStatus_t setScaleOrComputeType(MatmulDesc &desc, cublasLtMatmulDescAttributes_t attr,
                                     const void *buf, size_t sizeInBytes,
                                     const std::string &where) {
  KILN_BLASLT_READ(int32_t, value)
  if (attr == CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) {
    if (!isSimulatedComputeType(value))
      return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                  where + ": compute type " + std::to_string(value) +
                      " is not simulated (CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_PEDANTIC are)");
    desc.computeType = static_cast<cublasComputeType_t>(value);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (value != CUDA_R_32F)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": scale type " + typeName(value) +
                    " is not simulated (fp32 compute scales in CUDA_R_32F)");
  desc.scaleType = CUDA_R_32F;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t setPlain(T &field, const void *buf, size_t sizeInBytes, const std::string &where,
                        const char *typeLabel) {
  return readValue(buf, sizeInBytes, where, typeLabel, field);
}

cublasStatus_t setAlignment(uint32_t &field, const void *buf, size_t sizeInBytes,
                            const std::string &where) {
  KILN_BLASLT_READ(uint32_t, value)
  if (value == 0 || !std::has_single_bit(value))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                where + ": " + std::to_string(value) +
                    " bytes is not an alignment (a power of two, e.g. 16 or 256)");
  field = value;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t setOrder(MatrixLayout &layout, const void *buf, size_t sizeInBytes,
                        const std::string &where) {
  KILN_BLASLT_READ(int32_t, value)
  if (value == CUBLASLT_ORDER_COL || value == CUBLASLT_ORDER_ROW) {
    layout.order = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (value > CUBLASLT_ORDER_ROW && value <= CUBLASLT_ORDER_COL32_2R_4R4)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": tiled orders are not simulated (COL and ROW are)");
  return fail(CUBLAS_STATUS_INVALID_VALUE,
              where + ": " + std::to_string(value) + " is not a cublasLtOrder_t");
}

cublasStatus_t setBatchCount(MatrixLayout &layout, const void *buf, size_t sizeInBytes,
                             const std::string &where) {
  KILN_BLASLT_READ(int32_t, value)
  if (value < 1)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                where + ": batch count " + std::to_string(value) + " is below 1");
  if (value > 1)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                where + ": batched matmuls are not simulated (batch count 1 only)");
  layout.batchCount = value;
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t fail(cublasStatus_t status, const std::string &what) {
  std::fprintf(stderr, "cudasim cuBLASLt: %s\n", what.c_str());
  return status;
}

void registerObject(Kind kind, const void *object) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().insert({kind, object});
}

bool unregisterObject(Kind kind, const void *object) {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry().erase({kind, object}) == 1;
}

bool isLive(Kind kind, const void *object) {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry().count({kind, object}) == 1;
}

size_t elementBytes(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_32F:
    return 4;
  case CUDA_R_16F:
  case CUDA_R_16BF:
    return 2;
  default:
    return 0;
  }
}

std::string typeName(int32_t type) {
  switch (type) {
  case CUDA_R_32F:
    return "CUDA_R_32F";
  case CUDA_R_16F:
    return "CUDA_R_16F";
  case CUDA_R_16BF:
    return "CUDA_R_16BF";
  default:
    return "cudaDataType " + std::to_string(type);
  }
}

bool isSimulatedComputeType(int32_t computeType) {
  return computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC;
}

cublasStatus_t checkLayoutType(cudaDataType_t type, const char *where) {
  if (elementBytes(type) != 0)
    return CUBLAS_STATUS_SUCCESS;
  return fail(CUBLAS_STATUS_NOT_SUPPORTED,
              std::string(where) + ": " + typeName(type) +
                  " is not simulated (CUDA_R_32F, CUDA_R_16F and CUDA_R_16BF are)");
}

cublasStatus_t checkDimension(uint64_t value, const char *what, const char *where) {
  if (value <= uint64_t(std::numeric_limits<int32_t>::max()))
    return CUBLAS_STATUS_SUCCESS;
  return fail(CUBLAS_STATUS_NOT_SUPPORTED, std::string(where) + ": " + what + " " +
                                               std::to_string(value) +
                                               " does not fit int32_t (cuBLASLt's limit)");
}

cublasStatus_t checkLeadingDimension(int64_t ld, const char *where) {
  if (ld >= 0)
    return CUBLAS_STATUS_SUCCESS;
  return fail(CUBLAS_STATUS_NOT_SUPPORTED,
              std::string(where) + ": ld " + std::to_string(ld) +
                  " is negative (only non-negative leading dimensions are supported)");
}

cublasStatus_t setMatmulDescAttribute(MatmulDesc &desc, cublasLtMatmulDescAttributes_t attr,
                                      const void *buf, size_t sizeInBytes) {
  const std::string where = "cublasLtMatmulDescSetAttribute(" + descAttrName(attr) + ")";
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    return setScaleOrComputeType(desc, attr, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    return setPointerMode(desc, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return setOperation(desc.transA, buf, sizeInBytes, where, false);
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return setOperation(desc.transB, buf, sizeInBytes, where, false);
  case CUBLASLT_MATMUL_DESC_TRANSC:
    return setOperation(desc.transC, buf, sizeInBytes, where, true);
  case CUBLASLT_MATMUL_DESC_FILL_MODE:
    return setFillMode(desc, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return setEpilogue(desc, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return setPlain(desc.bias, buf, sizeInBytes, where, "const void *");
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
    return setPlain(desc.biasBatchStride, buf, sizeInBytes, where, "int64_t");
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return setTypeAttribute(desc.biasType, buf, sizeInBytes, where, true);
  case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
    return setPlain(desc.smCountTarget, buf, sizeInBytes, where, "int32_t");
  case CUBLASLT_MATMUL_DESC_FAST_ACCUM: // fp8 only: no effect on the types simulated
    return setPlain(desc.fastAccum, buf, sizeInBytes, where, "int8_t");
  case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE:
    return setPlain(desc.alphaVectorBatchStride, buf, sizeInBytes, where, "int64_t");
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: // only read by aux epilogues
    return setMustStayDefault<int64_t>(buf, sizeInBytes, where, "int64_t", 0);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
    return setMustStayDefault<int32_t>(buf, sizeInBytes, where, "int32_t", -1);
  case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
  case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
  case CUBLASLT_MATMUL_DESC_C_SCALE_MODE:
  case CUBLASLT_MATMUL_DESC_D_SCALE_MODE:
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE:
  case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE:
    return setMustStayDefault<int32_t>(buf, sizeInBytes, where, "int32_t", 0);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
  case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER:
  case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER:
  case CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR:
    return setMustStayDefault<const void *>(buf, sizeInBytes, where, "void *", nullptr);
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": no such cublasLtMatmulDescAttributes_t");
}

cublasStatus_t setLayoutAttribute(MatrixLayout &layout, cublasLtMatrixLayoutAttribute_t attr,
                                  const void *buf, size_t sizeInBytes) {
  const std::string where = "cublasLtMatrixLayoutSetAttribute(" + layoutAttrName(attr) + ")";
  const char *at = where.c_str();
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: {
    KILN_BLASLT_READ(uint32_t, value)
    if (cublasStatus_t rc = checkLayoutType(static_cast<cudaDataType_t>(value), at);
        rc != CUBLAS_STATUS_SUCCESS)
      return rc;
    layout.type = static_cast<cudaDataType_t>(value);
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    return setOrder(layout, buf, sizeInBytes, where);
  case CUBLASLT_MATRIX_LAYOUT_ROWS:
  case CUBLASLT_MATRIX_LAYOUT_COLS: {
    KILN_BLASLT_READ(uint64_t, value)
    const bool rows = attr == CUBLASLT_MATRIX_LAYOUT_ROWS;
    if (cublasStatus_t rc = checkDimension(value, rows ? "rows" : "cols", at);
        rc != CUBLAS_STATUS_SUCCESS)
      return rc;
    (rows ? layout.rows : layout.cols) = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATRIX_LAYOUT_LD: {
    KILN_BLASLT_READ(int64_t, value)
    if (cublasStatus_t rc = checkLeadingDimension(value, at); rc != CUBLAS_STATUS_SUCCESS)
      return rc;
    layout.ld = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return setBatchCount(layout, buf, sizeInBytes, where);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: // unused with batch count 1
    return setPlain(layout.batchStride, buf, sizeInBytes, where, "int64_t");
  case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: // planar complex only
    return setMustStayDefault<int64_t>(buf, sizeInBytes, where, "int64_t", 0);
  case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
    return setMustStayDefault<uint32_t>(buf, sizeInBytes, where, "uint32_t",
                                        CUBLASLT_BATCH_MODE_STRIDED);
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": no such cublasLtMatrixLayoutAttribute_t");
}

cublasStatus_t setPreferenceAttribute(Preference &pref, cublasLtMatmulPreferenceAttributes_t attr,
                                      const void *buf, size_t sizeInBytes) {
  const std::string where =
      "cublasLtMatmulPreferenceSetAttribute(" + preferenceAttrName(attr) + ")";
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    return setMustStayDefault<uint32_t>(buf, sizeInBytes, where, "uint32_t",
                                        CUBLASLT_SEARCH_BEST_FIT);
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return setPlain(pref.maxWorkspaceBytes, buf, sizeInBytes, where, "uint64_t");
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: {
    KILN_BLASLT_READ(uint32_t, value)
    if (value & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK))
      return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": mask " + std::to_string(value) +
                                                   " has bits outside " +
                                                   std::to_string(CUBLASLT_REDUCTION_SCHEME_MASK));
    pref.reductionSchemeMask = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    return setAlignment(pref.minAlignmentA, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    return setAlignment(pref.minAlignmentB, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    return setAlignment(pref.minAlignmentC, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return setAlignment(pref.minAlignmentD, buf, sizeInBytes, where);
  case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: {
    KILN_BLASLT_READ(float, value)
    if (!(value >= 0.0f))
      return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": a wave count is >= 0");
    pref.maxWavesCount = value;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_PREF_IMPL_MASK:
    return setPlain(pref.implMask, buf, sizeInBytes, where, "uint64_t");
  }
  return fail(CUBLAS_STATUS_INVALID_VALUE,
              where + ": no such cublasLtMatmulPreferenceAttributes_t");
}

#undef KILN_BLASLT_READ

} // namespace kiln::cudasim::blaslt

#pragma GCC visibility pop
