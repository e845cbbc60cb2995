#include "tools/cudasim/sim_cublaslt_gemm.h"

#include "runtime/base/half.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC visibility push(hidden)

namespace kiln::cudasim::blaslt {
namespace {

constexpr uint64_t kAlgoMagic = 0x6b696c6e2d4c7400; // "kiln-Lt\0": made by encodeAlgo
constexpr AlgoSpec kAlgos[kAlgoCount] = {
    {0, "split-k", true, true},
    {1, "vectorized", true, false},
    {2, "scalar", false, false},
};
constexpr uint64_t kSplits = 2;          // partial sums per output the split-k algorithm keeps
constexpr uint64_t kTile = 128;          // output tile edge, for the waves estimate
constexpr double kMultiprocessors = 132; // an H100's, for the waves estimate

std::string dims(uint64_t rows, uint64_t cols) {
  return std::to_string(rows) + " x " + std::to_string(cols);
}

size_t elementOffset(const MatrixLayout &l, uint64_t row, uint64_t col) {
  const uint64_t ld = static_cast<uint64_t>(l.ld);
  return l.order == CUBLASLT_ORDER_COL ? row + col * ld : row * ld + col;
}

// Bytes from the first element to just past the last one.
size_t extentBytes(const MatrixLayout &l) {
  if (l.rows == 0 || l.cols == 0)
    return 0;
  return (elementOffset(l, l.rows - 1, l.cols - 1) + 1) * elementBytes(l.type);
}

bool overlaps(const void *p, size_t pBytes, const void *q, size_t qBytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return p && q && pBytes && qBytes && a < b + qBytes && b < a + pBytes;
}

cublasStatus_t checkTypes(const GemmProblem &p, const std::string &where) {
  const cudaDataType_t in = p.a.type, out = p.d.type;
  const bool combination =
      p.b.type == in && p.c.type == out && (out == in || (out == CUDA_R_32F && in != CUDA_R_32F));
  if (combination)
    return CUBLAS_STATUS_SUCCESS;
  return fail(CUBLAS_STATUS_NOT_SUPPORTED,
              where + ": A " + typeName(in) + ", B " + typeName(p.b.type) + ", C " +
                  typeName(p.c.type) + ", D " + typeName(out) +
                  " is not a type combination of CUBLAS_COMPUTE_32F (A and B of one type, C "
                  "and D of that type, or CUDA_R_32F for CUDA_R_16F/CUDA_R_16BF inputs)");
}

std::string operandText(const char *name, const MatrixLayout &l, bool trans) {
  return std::string("op(") + name + ") " + dims(trans ? l.cols : l.rows, trans ? l.rows : l.cols) +
         " (" + name + " " + dims(l.rows, l.cols) + (trans ? ", transposed)" : ")");
}

cublasStatus_t checkShapes(const GemmProblem &p, const std::string &where) {
  const uint64_t aRows = p.transA ? p.a.cols : p.a.rows, aCols = p.transA ? p.a.rows : p.a.cols;
  const uint64_t bRows = p.transB ? p.b.cols : p.b.rows, bCols = p.transB ? p.b.rows : p.b.cols;
  const std::string shapes = operandText("A", p.a, p.transA) + ", " +
                             operandText("B", p.b, p.transB) + ", C " + dims(p.c.rows, p.c.cols) +
                             ", D " + dims(p.d.rows, p.d.cols);
  const char *conflict = aCols != bRows                                 ? "op(A) cols != op(B) rows"
                         : aRows != p.d.rows                            ? "op(A) rows != D rows"
                         : bCols != p.d.cols                            ? "op(B) cols != D cols"
                         : p.c.rows != p.d.rows || p.c.cols != p.d.cols ? "C and D differ"
                                                                        : nullptr;
  if (conflict)
    return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": " + conflict + ": " + shapes);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t checkLeadingDimension(const MatrixLayout &l, const char *name,
                                     const std::string &where) {
  const bool col = l.order == CUBLASLT_ORDER_COL;
  const uint64_t least = std::max<uint64_t>(1, col ? l.rows : l.cols);
  if (static_cast<uint64_t>(l.ld) >= least)
    return CUBLAS_STATUS_SUCCESS;
  return fail(CUBLAS_STATUS_INVALID_VALUE, where + ": " + name + " is " + dims(l.rows, l.cols) +
                                               (col ? " column-major" : " row-major") +
                                               " with ld " + std::to_string(l.ld) +
                                               ": ld must be >= " + std::to_string(least) +
                                               " (its " + (col ? "rows" : "cols") + ")");
}

float loadElement(const void *base, cudaDataType_t type, size_t index) {
  const auto *bytes = static_cast<const unsigned char *>(base);
  if (type == CUDA_R_32F) {
    float value;
    std::memcpy(&value, bytes + 4 * index, 4);
    return value;
  }
  uint16_t half;
  std::memcpy(&half, bytes + 2 * index, 2);
  return type == CUDA_R_16BF ? bf16ToF32(half) : f16ToF32(half);
}

void storeElement(void *base, cudaDataType_t type, size_t index, float value) {
  auto *bytes = static_cast<unsigned char *>(base);
  if (type == CUDA_R_32F) {
    std::memcpy(bytes + 4 * index, &value, 4);
    return;
  }
  const uint16_t half = type == CUDA_R_16BF ? f32ToBf16(value) : f32ToF16(value);
  std::memcpy(bytes + 2 * index, &half, 2);
}

constexpr size_t kBlock = 32; // output columns per dotBlock call

// out0[j] = sum over p of a0[p] * panel[p * kBlock + j] for j < kBlock, and out1 from a1 alike:
// one fused multiply-add per p, in increasing p. Two rows and 32 columns at a time only to keep
// the multiply-adds independent; each output's order is the same as a lone dot product's.
void dotBlockPortable(const float *a0, const float *a1, const float *panel, size_t k, float *out0,
                      float *out1) {
  float s0[kBlock] = {}, s1[kBlock] = {};
  for (size_t p = 0; p < k; ++p) {
    const float *b = panel + p * kBlock;
    for (size_t j = 0; j < kBlock; ++j) {
      s0[j] = std::fma(a0[p], b[j], s0[j]);
      s1[j] = std::fma(a1[p], b[j], s1[j]);
    }
  }
  std::memcpy(out0, s0, sizeof(s0));
  std::memcpy(out1, s1, sizeof(s1));
}

#if defined(__x86_64__)
// The same with 8-lane FMA instructions: each lane rounds exactly as std::fma does.
__attribute__((target("avx2,fma"))) void dotBlockAvx2(const float *a0, const float *a1,
                                                      const float *panel, size_t k, float *out0,
                                                      float *out1) {
  __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
  __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00;
  for (size_t p = 0; p < k; ++p) {
    const float *b = panel + p * kBlock;
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    const __m256 b2 = _mm256_loadu_ps(b + 16), b3 = _mm256_loadu_ps(b + 24);
    const __m256 x0 = _mm256_set1_ps(a0[p]), x1 = _mm256_set1_ps(a1[p]);
    s00 = _mm256_fmadd_ps(x0, b0, s00);
    s01 = _mm256_fmadd_ps(x0, b1, s01);
    s02 = _mm256_fmadd_ps(x0, b2, s02);
    s03 = _mm256_fmadd_ps(x0, b3, s03);
    s10 = _mm256_fmadd_ps(x1, b0, s10);
    s11 = _mm256_fmadd_ps(x1, b1, s11);
    s12 = _mm256_fmadd_ps(x1, b2, s12);
    s13 = _mm256_fmadd_ps(x1, b3, s13);
  }
  _mm256_storeu_ps(out0, s00);
  _mm256_storeu_ps(out0 + 8, s01);
  _mm256_storeu_ps(out0 + 16, s02);
  _mm256_storeu_ps(out0 + 24, s03);
  _mm256_storeu_ps(out1, s10);
  _mm256_storeu_ps(out1 + 8, s11);
  _mm256_storeu_ps(out1 + 16, s12);
  _mm256_storeu_ps(out1 + 24, s13);
}
#endif

void dotBlock(const float *a0, const float *a1, const float *panel, size_t k, float *out0,
              float *out1) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2)
    return dotBlockAvx2(a0, a1, panel, k, out0, out1);
#endif
  dotBlockPortable(a0, a1, panel, k, out0, out1);
}

// The epilogue of one output: scale, add beta C and the bias, ReLU, one rounding into D.
void storeOutput(const GemmJob &job, float alpha, float beta, uint64_t i, uint64_t j, float sum) {
  const GemmProblem &p = job.problem;
  float value = alpha * sum;
  if (beta != 0.0f)
    value = value + beta * loadElement(job.c, p.c.type, elementOffset(p.c, i, j));
  if (p.epilogue & CUBLASLT_EPILOGUE_BIAS)
    value = value + loadElement(p.bias, p.biasType, i);
  if (p.epilogue & CUBLASLT_EPILOGUE_RELU)
    value = std::fmax(value, 0.0f);
  storeElement(job.d, p.d.type, elementOffset(p.d, i, j), value);
}

cublasStatus_t checkAligned(const void *pointer, uint32_t alignment, const char *name,
                            const AlgoSpec &spec, const std::string &where) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (!pointer || address % alignment == 0)
    return CUBLAS_STATUS_SUCCESS;
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%#llx", static_cast<unsigned long long>(address));
  return fail(CUBLAS_STATUS_INVALID_VALUE,
              where + ": " + name + " at " + hex + " is not " + std::to_string(alignment) +
                  "-byte aligned, as algorithm " + std::to_string(spec.id) + " (" + spec.name +
                  ") needs (a preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES "
                  "excludes such algorithms)");
}

} // namespace

cublasStatus_t planGemm(const MatmulDesc &desc, const MatrixLayout &a, const MatrixLayout &b,
                        const MatrixLayout &c, const MatrixLayout &d, const char *where,
                        GemmProblem &out) {
  const std::string at = where;
  GemmProblem p;
  p.a = a;
  p.b = b;
  p.c = c;
  p.d = d;
  p.transA = desc.transA != CUBLAS_OP_N;
  p.transB = desc.transB != CUBLAS_OP_N;
  if (cublasStatus_t rc = checkTypes(p, at); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  if (c.order != d.order)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, at + ": C and D have different orders");
  if (cublasStatus_t rc = checkShapes(p, at); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  const std::pair<const MatrixLayout *, const char *> operands[] = {
      {&a, "A"}, {&b, "B"}, {&c, "C"}, {&d, "D"}};
  for (auto [layout, name] : operands)
    if (cublasStatus_t rc = checkLeadingDimension(*layout, name, at); rc != CUBLAS_STATUS_SUCCESS)
      return rc;
  p.m = d.rows;
  p.n = d.cols;
  p.k = p.transA ? a.rows : a.cols;
  p.epilogue = desc.epilogue;
  p.bias = desc.bias;
  p.biasType = desc.biasType == -1 ? d.type : static_cast<cudaDataType_t>(desc.biasType);
  if ((p.epilogue & CUBLASLT_EPILOGUE_BIAS) && p.biasType != d.type)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED,
                at + ": bias of " + typeName(p.biasType) + " with D of " + typeName(d.type) +
                    " (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the bias has D's type)");
  out = p;
  return CUBLAS_STATUS_SUCCESS;
}

const AlgoSpec &algoSpec(int index) {
  return kAlgos[index];
}

size_t algoWorkspace(const AlgoSpec &spec, const GemmProblem &problem) {
  if (!spec.splitK)
    return 0;
  const size_t bytes = kSplits * problem.m * problem.n * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

float wavesCount(const AlgoSpec &spec, const GemmProblem &problem) {
  const uint64_t tiles = ((problem.m + kTile - 1) / kTile) * ((problem.n + kTile - 1) / kTile) *
                         (spec.splitK ? kSplits : 1);
  return static_cast<float>(tiles / kMultiprocessors);
}

uint32_t algoAlignment(const AlgoSpec &spec, cudaDataType_t type) {
  return spec.vectorized ? 16 : static_cast<uint32_t>(elementBytes(type));
}

cublasStatus_t checkAlgoFits(const AlgoSpec &spec, const GemmProblem &p, const char *where) {
  const std::pair<const MatrixLayout *, const char *> operands[] = {
      {&p.a, "A"}, {&p.b, "B"}, {&p.c, "C"}, {&p.d, "D"}};
  for (auto [layout, name] : operands) {
    const uint32_t alignment = algoAlignment(spec, layout->type);
    if ((static_cast<uint64_t>(layout->ld) * elementBytes(layout->type)) % alignment == 0)
      continue;
    return where
               ? fail(CUBLAS_STATUS_NOT_SUPPORTED,
                      std::string(where) + ": algorithm " + std::to_string(spec.id) + " (" +
                          spec.name + ") needs " + name + "'s ld (" + std::to_string(layout->ld) +
                          " elements) to be a multiple of " + std::to_string(alignment) + " bytes")
               : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint32_t biasAlignment = algoAlignment(spec, p.biasType);
  if ((p.epilogue & CUBLASLT_EPILOGUE_BIAS) &&
      reinterpret_cast<uintptr_t>(p.bias) % biasAlignment != 0)
    return where ? fail(CUBLAS_STATUS_NOT_SUPPORTED,
                        std::string(where) + ": algorithm " + std::to_string(spec.id) + " (" +
                            spec.name + ") needs the bias " + std::to_string(biasAlignment) +
                            "-byte aligned")
                 : CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

bool preferenceAllows(const AlgoSpec &spec, const GemmProblem &p, const Preference &pref) {
  if (algoWorkspace(spec, p) > pref.maxWorkspaceBytes)
    return false;
  if (spec.splitK && !(pref.reductionSchemeMask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE))
    return false;
  const uint64_t input = p.a.type == CUDA_R_32F   ? CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_32F
                         : p.a.type == CUDA_R_16F ? CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F
                                                  : CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF;
  const uint64_t impl =
      CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA | CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F | input;
  if (impl & ~pref.implMask)
    return false;
  if (algoAlignment(spec, p.a.type) > pref.minAlignmentA ||
      algoAlignment(spec, p.b.type) > pref.minAlignmentB ||
      algoAlignment(spec, p.c.type) > pref.minAlignmentC ||
      algoAlignment(spec, p.d.type) > pref.minAlignmentD)
    return false;
  if (pref.maxWavesCount > 0.0f && wavesCount(spec, p) > pref.maxWavesCount)
    return false;
  return checkAlgoFits(spec, p, nullptr) == CUBLAS_STATUS_SUCCESS;
}

cublasLtMatmulAlgo_t encodeAlgo(const AlgoSpec &spec, const MatmulDesc &desc,
                                const GemmProblem &p) {
  cublasLtMatmulAlgo_t algo = {};
  algo.data[0] = kAlgoMagic;
  algo.data[1] = static_cast<uint64_t>(spec.id);
  algo.data[2] = static_cast<uint64_t>(desc.computeType);
  algo.data[3] = static_cast<uint64_t>(desc.scaleType);
  algo.data[4] = static_cast<uint64_t>(p.a.type);
  algo.data[5] = static_cast<uint64_t>(p.b.type);
  algo.data[6] = static_cast<uint64_t>(p.c.type);
  algo.data[7] = static_cast<uint64_t>(p.d.type);
  return algo;
}

cublasStatus_t decodeAlgo(const cublasLtMatmulAlgo_t &algo, const MatmulDesc &desc,
                          const GemmProblem &p, const char *where, const AlgoSpec *&out) {
  if (algo.data[0] != kAlgoMagic || algo.data[1] >= static_cast<uint64_t>(kAlgoCount))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(where) + ": algo is not one cublasLtMatmulAlgoGetHeuristic returned");
  const cublasLtMatmulAlgo_t expected = encodeAlgo(kAlgos[algo.data[1]], desc, p);
  if (std::memcmp(&expected, &algo, sizeof(algo)) != 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                std::string(where) + ": algo was chosen for compute type " +
                    std::to_string(algo.data[2]) + " and A/B/C/D types " +
                    typeName(int32_t(algo.data[4])) + "/" + typeName(int32_t(algo.data[5])) + "/" +
                    typeName(int32_t(algo.data[6])) + "/" + typeName(int32_t(algo.data[7])) +
                    ", the descriptors say " + std::to_string(desc.computeType) + " and " +
                    typeName(p.a.type) + "/" + typeName(p.b.type) + "/" + typeName(p.c.type) + "/" +
                    typeName(p.d.type));
  out = &kAlgos[algo.data[1]];
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t checkJobPointers(const GemmJob &job, const AlgoSpec &spec, const char *where) {
  const GemmProblem &p = job.problem;
  const std::string at = where;
  if (p.m == 0 || p.n == 0)
    return CUBLAS_STATUS_SUCCESS;
  const bool readsC = job.betaAt || job.beta != 0.0f;
  const bool hasBias = (p.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  const char *missing = !job.d               ? "D is null"
                        : p.k && !job.a      ? "A is null"
                        : p.k && !job.b      ? "B is null"
                        : readsC && !job.c   ? "C is null with a nonzero beta"
                        : hasBias && !p.bias ? "the bias epilogue has a null BIAS_POINTER"
                                             : nullptr;
  if (missing)
    return fail(CUBLAS_STATUS_INVALID_VALUE, at + ": " + missing);
  const std::pair<const void *, const MatrixLayout *> operands[] = {
      {job.a, &p.a}, {job.b, &p.b}, {readsC ? job.c : nullptr, &p.c}, {job.d, &p.d}};
  const char *names[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i)
    if (cublasStatus_t rc = checkAligned(
            operands[i].first, algoAlignment(spec, operands[i].second->type), names[i], spec, at);
        rc != CUBLAS_STATUS_SUCCESS)
      return rc;
  if (readsC && job.c == job.d && (p.c.ld != p.d.ld || p.c.order != p.d.order))
    return fail(CUBLAS_STATUS_INVALID_VALUE,
                at + ": C == D (in place) needs C's layout to equal D's: ld " +
                    std::to_string(p.c.ld) + " vs " + std::to_string(p.d.ld));
  const size_t dBytes = extentBytes(p.d);
  const size_t biasBytes = hasBias ? p.m * elementBytes(p.biasType) : 0;
  const std::pair<const char *, bool> clashes[] = {
      {"A", overlaps(job.d, dBytes, job.a, extentBytes(p.a))},
      {"B", overlaps(job.d, dBytes, job.b, extentBytes(p.b))},
      {"C", readsC && job.c != job.d && overlaps(job.d, dBytes, job.c, extentBytes(p.c))},
      {"the bias", overlaps(job.d, dBytes, p.bias, biasBytes)},
      {"the workspace", overlaps(job.d, dBytes, job.workspace, job.workspaceUsed)}};
  for (auto [name, clash] : clashes)
    if (clash)
      return fail(CUBLAS_STATUS_INVALID_VALUE,
                  at + ": D overlaps " + name + " (a GPU would compute garbage)");
  return CUBLAS_STATUS_SUCCESS;
}

bool pointersAligned(const GemmJob &job, const AlgoSpec &spec) {
  const GemmProblem &p = job.problem;
  const std::pair<const void *, cudaDataType_t> pointers[] = {{job.a, p.a.type},
                                                              {job.b, p.b.type},
                                                              {job.c, p.c.type},
                                                              {job.d, p.d.type},
                                                              {p.bias, p.biasType}};
  for (auto [pointer, type] : pointers)
    if (reinterpret_cast<uintptr_t>(pointer) % algoAlignment(spec, type) != 0)
      return false;
  return true;
}

// op(B)'s columns [j0, j0 + cols) as fp32 in blocks of kBlock columns, k-major inside a block
// (zeros past the last column).
void convertPanel(const GemmJob &job, uint64_t j0, size_t cols, std::vector<float> &panel) {
  const GemmProblem &p = job.problem;
  const size_t k = p.k, blocks = (cols + kBlock - 1) / kBlock;
  panel.assign(blocks * k * kBlock, 0.0f);
  for (size_t j = 0; j < cols; ++j) {
    float *column = panel.data() + (j / kBlock) * k * kBlock + j % kBlock;
    for (size_t q = 0; q < k; ++q)
      column[q * kBlock] =
          loadElement(job.b, p.b.type,
                      p.transB ? elementOffset(p.b, j0 + j, q) : elementOffset(p.b, q, j0 + j));
  }
}

void convertRow(const GemmJob &job, uint64_t i, std::vector<float> &row) {
  const GemmProblem &p = job.problem;
  for (size_t q = 0; q < p.k; ++q)
    row[q] = loadElement(job.a, p.a.type,
                         p.transA ? elementOffset(p.a, q, i) : elementOffset(p.a, i, q));
}

void runGemm(const GemmJob &job) {
  const GemmProblem &p = job.problem;
  // A split-k algorithm fills its workspace; whatever else lives there is lost, as on a GPU.
  if (job.workspace && job.workspaceUsed)
    std::memset(job.workspace, 0xa5, job.workspaceUsed);
  const float alpha = job.alphaAt ? *job.alphaAt : job.alpha;
  const float beta = job.betaAt ? *job.betaAt : job.beta;
  constexpr uint64_t kPanelColumns = 64 * kBlock; // op(B) columns converted at a time
  const size_t k = p.k;
  std::vector<float> panel, row0(k), row1(k);
  float out0[kBlock], out1[kBlock];
  for (uint64_t j0 = 0; j0 < p.n; j0 += kPanelColumns) {
    const size_t cols = std::min<uint64_t>(kPanelColumns, p.n - j0);
    convertPanel(job, j0, cols, panel);
    for (uint64_t i = 0; i < p.m; i += 2) {
      const bool pair = i + 1 < p.m;
      convertRow(job, i, row0);
      if (pair)
        convertRow(job, i + 1, row1);
      for (size_t b = 0; b * kBlock < cols; ++b) {
        dotBlock(row0.data(), pair ? row1.data() : row0.data(), panel.data() + b * k * kBlock, k,
                 out0, out1);
        const size_t width = std::min(kBlock, cols - b * kBlock);
        for (size_t j = 0; j < width; ++j) {
          storeOutput(job, alpha, beta, i, j0 + b * kBlock + j, out0[j]);
          if (pair)
            storeOutput(job, alpha, beta, i + 1, j0 + b * kBlock + j, out1[j]);
        }
      }
    }
  }
}

} // namespace kiln::cudasim::blaslt

#pragma GCC visibility pop
