// What cublasLtMatmul computes, as the simulated cuBLASLt plans and runs it: the problem the
// descriptors describe (checked against each other as cuBLASLt does), the fake algorithms the
// heuristic offers (with the workspace and alignment each needs, so a caller's workspace and
// alignment handling is exercised) and the host GEMM itself.
//
// Numerics: D = alpha * op(A) op(B) + beta * C (+ bias[row]) (ReLU), every product accumulated in
// fp32 with one fused multiply-add per k, in increasing k (a GPU's FFMA; the simulator fixes the
// order a GPU leaves to the algorithm), then the epilogue in fp32 and one round-to-nearest-even
// into D's type. C is not read when beta is 0 (BLAS convention), so stale NaNs there do not leak.
#pragma once

#include "tools/cudasim/sim_cublaslt_objects.h"

#include <cstddef>
#include <cstdint>

#pragma GCC visibility push(hidden)

namespace kiln::cudasim::blaslt {

// The checked problem: D[m, n] = op(A)[m, k] op(B)[k, n] with C of D's shape.
struct GemmProblem {
  uint64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  MatrixLayout a, b, c, d;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType_t biasType = CUDA_R_32F; // resolved: D's type when the descriptor says -1
  const void *bias = nullptr;
};

// Checks the descriptors against each other (types, shapes under op(), leading dimensions, the
// bias type); `where` prefixes the stderr note. INVALID_VALUE for what cuBLASLt calls a conflict,
// NOT_SUPPORTED for what it (or the simulator) does not implement.
cublasStatus_t planGemm(const MatmulDesc &desc, const MatrixLayout &a, const MatrixLayout &b,
                        const MatrixLayout &c, const MatrixLayout &d, const char *where,
                        GemmProblem &out);

// A fake algorithm: what it requires of the caller is what real ones require.
struct AlgoSpec {
  int32_t id;
  const char *name;
  bool vectorized; // 16-byte loads: pointers and leading dimensions aligned to 16 bytes
  bool splitK;     // partial sums in the workspace (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
};
constexpr int kAlgoCount = 3;
// In the heuristic's order: fastest first.
const AlgoSpec &algoSpec(int index);

// Workspace the algorithm needs for the problem, in bytes.
size_t algoWorkspace(const AlgoSpec &spec, const GemmProblem &problem);
float wavesCount(const AlgoSpec &spec, const GemmProblem &problem);
// Alignment in bytes it needs of a matrix of `type` (pointer and ld * element size).
uint32_t algoAlignment(const AlgoSpec &spec, cudaDataType_t type);

// Whether the algorithm applies to the problem: leading dimensions and the bias pointer aligned
// as it needs. NOT_SUPPORTED with a note otherwise (quiet when `where` is null).
cublasStatus_t checkAlgoFits(const AlgoSpec &spec, const GemmProblem &problem, const char *where);
// Whether the heuristic may return it under `pref` (workspace, alignments, reduction and
// implementation masks, waves).
bool preferenceAllows(const AlgoSpec &spec, const GemmProblem &problem, const Preference &pref);

// The algorithm's cublasLtMatmulAlgo_t: its id and the types it was chosen for.
cublasLtMatmulAlgo_t encodeAlgo(const AlgoSpec &spec, const MatmulDesc &desc,
                                const GemmProblem &problem);
// The spec of an algorithm from encodeAlgo, checked against the descriptors: INVALID_VALUE
// ("don't match algo descriptor") when it was made for other types or is not one at all.
cublasStatus_t decodeAlgo(const cublasLtMatmulAlgo_t &algo, const MatmulDesc &desc,
                          const GemmProblem &problem, const char *where, const AlgoSpec *&out);

// One matmul with every input resolved, so it can run later (stream order, graph replay).
struct GemmJob {
  GemmProblem problem;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void *d = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  // CUBLASLT_POINTER_MODE_DEVICE: read when the job runs, as a kernel would.
  const float *alphaAt = nullptr, *betaAt = nullptr;
  void *workspace = nullptr;
  size_t workspaceUsed = 0;
};

// The checks cublasLtMatmul makes on the pointers once the algorithm is known: present where
// read, aligned as the algorithm needs, C == D only with D's layout, D overlapping no input.
cublasStatus_t checkJobPointers(const GemmJob &job, const AlgoSpec &spec, const char *where);
// Whether every pointer the job reads or writes is aligned as the algorithm needs (no note).
bool pointersAligned(const GemmJob &job, const AlgoSpec &spec);

void runGemm(const GemmJob &job);

} // namespace kiln::cudasim::blaslt

#pragma GCC visibility pop
