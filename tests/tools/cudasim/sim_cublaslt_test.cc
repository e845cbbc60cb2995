// The simulated cuBLASLt (tools/cudasim/sim_cublaslt.cc) loaded as kiln loads the real one and
// driven as cuda_linear.cc drives it, on host buffers (device pointers are host addresses in the
// simulator): exact results against a naive reference that accumulates in the same order
// (fp32 fused multiply-adds in increasing k, one rounding into D's type), the layouts,
// transposes, leading dimensions and epilogues cuda_linear uses (and descriptors that get them
// wrong giving wrong numbers), and the errors cuBLASLt reports for shapes that do not match,
// workspaces that are too small and attributes it does not take. With the simulated driver
// beside it, Linear also runs through CudaDevice, on its stream and inside a CUDA graph.
#include "tests/tools/cudasim/sim_cublaslt_test_util.h"

namespace kiln::rt::cublaslt_sim_test {
namespace {

TEST_F(SimCublasLtTest, LoadsAsCuda13WithCublasStatusTexts) {
  EXPECT_EQ(std::filesystem::path(lt_->library()).filename(), "libcublasLt.so.13");
  EXPECT_GE(lt_->getVersion(), 130000u);
  EXPECT_LT(lt_->getVersion(), 140000u);
  EXPECT_EQ(lt_->describe(CUBLAS_STATUS_NOT_SUPPORTED),
            "CUBLAS_STATUS_NOT_SUPPORTED (the requested functionality is not supported)");
  EXPECT_EQ(lt_->describe(CUBLAS_STATUS_INVALID_VALUE),
            "CUBLAS_STATUS_INVALID_VALUE (an unsupported value or parameter was passed to the "
            "function)");
  EXPECT_EQ(lt_->describe(static_cast<cublasStatus_t>(2)),
            "unrecognized status (unrecognized status)");
  EXPECT_EQ(lt_->destroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

// CudaLinear itself (prepare: descriptors, row buckets, heuristic + AlgoCheck per bucket; run:
// setRows + cublasLtMatmul) over every dtype combination, with and without bias, odd and even
// shapes, row counts inside and on the edges of the buckets: y's rows bit-identical to the
// reference, the rows past the step's count untouched.
TEST_F(SimCublasLtTest, CudaLinearMatchesTheReferenceBitForBit) {
  std::vector<uint8_t> workspace(kLinearWorkspaceBytes);
  auto linear = CudaLinear::create(lt_, workspace.data(), workspace.size());
  ASSERT_TRUE(linear.isOk()) << linear.status().toString();
  constexpr int64_t kMaxRows = 20;
  for (const Combination &c : kCombinations)
    for (bool hasBias : {false, true})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{7, 5}, {64, 64}, {129, 33}}) {
        LinearOp op(c.t, c.y, hasBias, in, out, kMaxRows, uint32_t(in * 31 + out));
        const std::string what = "x/W " + std::string(schema::EnumNameDType(c.t)) + ", y " +
                                 schema::EnumNameDType(c.y) + (hasBias ? ", bias" : "") + ", in " +
                                 std::to_string(in) + ", out " + std::to_string(out);
        auto prepared = (*linear)->prepare(op.op);
        ASSERT_TRUE(prepared.isOk()) << what << ": " << prepared.status().toString();
        for (int32_t rows : {1, 2, 3, 5, 16, 17, 20}) {
          op.y.poison();
          Status ran = (*linear)->run(**prepared, {rows, rows, rows, rows}, nullptr);
          ASSERT_TRUE(ran.isOk()) << what << ": " << ran.toString();
          expectSameBytes(op.y, op.expected(rows), what + ", rows " + std::to_string(rows));
        }
      }
}

// The same numbers the cpu backend's kernel gives for the plan op (it sums in another order,
// so within the tolerances cuda_linear_gpu.cc uses against a real GPU).
TEST_F(SimCublasLtTest, CudaLinearAgreesWithTheCpuKernel) {
  namespace kc = kiln::kernels::cpu;
  std::vector<uint8_t> workspace(kLinearWorkspaceBytes);
  auto linear = CudaLinear::create(lt_, workspace.data(), workspace.size());
  ASSERT_TRUE(linear.isOk()) << linear.status().toString();
  auto elem = [](DType d) {
    return d == DType::F16    ? kc::ElemType::kF16
           : d == DType::BF16 ? kc::ElemType::kBF16
                              : kc::ElemType::kF32;
  };
  for (const Combination &c : kCombinations) {
    constexpr int32_t kRows = 9, kIn = 300, kOut = 40;
    LinearOp op(c.t, c.y, true, kIn, kOut, kRows, 7);
    auto prepared = (*linear)->prepare(op.op);
    ASSERT_TRUE(prepared.isOk()) << prepared.status().toString();
    ASSERT_TRUE((*linear)->run(**prepared, {kRows, kRows, kRows, kRows}, nullptr).isOk());
    std::vector<float> biasF32(kOut);
    for (int32_t o = 0; o < kOut; ++o)
      biasF32[o] = op.bias.at(o);
    HostMatrix cpu(op.y.type, op.y.size());
    kc::linear({op.x.data(), op.w.data(), elem(c.t), biasF32.data(), cpu.data(), kRows, kIn, kOut,
                elem(c.t), elem(c.y)});
    const float atol = c.y == DType::F32 ? 1e-4f : c.y == DType::F16 ? 2e-3f : 1.6e-2f;
    const float rtol = c.y == DType::F32 ? 1e-5f : c.y == DType::F16 ? 1e-3f : 8e-3f;
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_LE(std::fabs(op.y.at(i) - cpu.at(i)), atol + rtol * std::fabs(cpu.at(i)))
          << "y element " << i << ", x/W " << schema::EnumNameDType(c.t);
  }
}

// Descriptors that get cuda_linear's mapping wrong are caught: a transpose left out is a shape
// conflict; a wrong leading dimension or a dropped bias epilogue runs and gives other numbers.
TEST_F(SimCublasLtTest, WrongLinearDescriptorsGiveErrorsOrWrongNumbers) {
  std::vector<uint8_t> workspace(kLinearWorkspaceBytes);
  LinearOp op(DType::F32, DType::F32, true, 48, 32, 8, 3);
  op.x.bytes.resize(op.x.bytes.size() + 64 * 4); // room for an ld one too long
  op.op.inputs[0].data = op.x.data();
  const HostMatrix want = op.expected(8);
  auto run = [&](void (*edit)(GemmDesc &)) {
    auto d = descriptors(op, edit);
    op.y.poison();
    auto found = heuristic(*d, workspace.size());
    if (found.empty())
      return CUBLAS_STATUS_NOT_SUPPORTED;
    return matmul(*d, op.w.data(), op.x.data(), op.y.data(), &found[0].algo, workspace.data(),
                  workspace.size());
  };
  ASSERT_EQ(run(nullptr), CUBLAS_STATUS_SUCCESS);
  expectSameBytes(op.y, want, "as described");

  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  auto noTranspose = descriptors(op, [](GemmDesc &g) { g.transA = CUBLAS_OP_N; });
  EXPECT_TRUE(heuristic(*noTranspose, workspace.size(), &status).empty());
  EXPECT_EQ(status, CUBLAS_STATUS_INVALID_VALUE);

  ASSERT_EQ(run([](GemmDesc &g) { g.ldb += 1; }), CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(op.y.bytes, want.bytes) << "ldb one too long";
  ASSERT_EQ(run([](GemmDesc &g) { g.epilogue = CUBLASLT_EPILOGUE_DEFAULT; }),
            CUBLAS_STATUS_SUCCESS);
  for (size_t i = 0; i < 32; ++i) // exactly the bias missing: each row's sum comes first
    EXPECT_EQ(want.at(i), op.y.at(i) + op.bias.at(i)) << i;
  EXPECT_NE(op.y.bytes, want.bytes);
}

// Descriptors made through the library directly, for what cuda_linear does not set itself.
struct Descriptors {
  std::shared_ptr<const CublasLt> lt;
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  ~Descriptors() {
    for (cublasLtMatrixLayout_t layout : {a, b, c, d})
      lt->matrixLayoutDestroy(layout);
    lt->matmulDescDestroy(matmul);
  }
};

// Any transposes, padded leading dimensions, row-major order, alpha and beta with C apart from D:
// D = alpha op(A) op(B) + beta C exactly, D's padding untouched.
TEST_F(SimCublasLtTest, GeneralGemmTransposesLeadingDimensionsOrdersAndScalars) {
  constexpr uint64_t m = 6, n = 5, k = 9;
  for (cudaDataType_t in : {CUDA_R_32F, CUDA_R_16BF})
    for (bool rowMajor : {false, true})
      for (int32_t transA : {CUBLAS_OP_N, CUBLAS_OP_T})
        for (int32_t transB : {CUBLAS_OP_N, CUBLAS_OP_T}) {
          Descriptors g{lt_};
          ASSERT_EQ(lt_->matmulDescCreate(&g.matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                    CUBLAS_STATUS_SUCCESS);
          lt_->matmulDescSetAttribute(g.matmul, CUBLASLT_MATMUL_DESC_TRANSA, &transA, 4);
          lt_->matmulDescSetAttribute(g.matmul, CUBLASLT_MATMUL_DESC_TRANSB, &transB, 4);
          const uint64_t aRows = transA ? k : m, aCols = transA ? m : k;
          const uint64_t bRows = transB ? n : k, bCols = transB ? k : n;
          // ld padded by 3 past the minimum (rows column-major, cols row-major).
          auto ld = [&](uint64_t rows, uint64_t cols) {
            return int64_t((rowMajor ? cols : rows) + 3);
          };
          auto count = [&](uint64_t rows, uint64_t cols) {
            return size_t(ld(rows, cols)) * (rowMajor ? rows : cols);
          };
          const HostMatrix a = randomMatrix(in, count(aRows, aCols), 1.0f, 1);
          const HostMatrix b = randomMatrix(in, count(bRows, bCols), 1.0f, 2);
          const HostMatrix c = randomMatrix(CUDA_R_32F, count(m, n), 1.0f, 3);
          HostMatrix d = randomMatrix(CUDA_R_32F, count(m, n), 1.0f, 4);
          const std::tuple<cublasLtMatrixLayout_t *, cudaDataType_t, uint64_t, uint64_t> layouts[] =
              {{&g.a, in, aRows, aCols},
               {&g.b, in, bRows, bCols},
               {&g.c, CUDA_R_32F, m, n},
               {&g.d, CUDA_R_32F, m, n}};
          const int32_t order = rowMajor ? CUBLASLT_ORDER_ROW : CUBLASLT_ORDER_COL;
          for (auto [layout, type, rows, cols] : layouts) {
            ASSERT_EQ(lt_->matrixLayoutCreate(layout, type, rows, cols, ld(rows, cols)),
                      CUBLAS_STATUS_SUCCESS);
            ASSERT_EQ(
                lt_->matrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, 4),
                CUBLAS_STATUS_SUCCESS);
          }
          HostMatrix want = d;
          const Operand cOperand{&c, m, n, ld(m, n), rowMajor};
          referenceGemm({&a, aRows, aCols, ld(aRows, aCols), rowMajor}, transA,
                        {&b, bRows, bCols, ld(bRows, bCols), rowMajor}, transB, 0.5f, -2.0f,
                        &cOperand, nullptr, want, {&want, m, n, ld(m, n), rowMajor});
          const float alpha = 0.5f, beta = -2.0f;
          ASSERT_EQ(lt_->matmul(handle_, g.matmul, &alpha, a.bytes.data(), g.a, b.bytes.data(), g.b,
                                &beta, c.bytes.data(), g.c, d.data(), g.d, nullptr, nullptr, 0,
                                nullptr),
                    CUBLAS_STATUS_SUCCESS);
          expectSameBytes(d, want,
                          "A " + std::to_string(in) + (rowMajor ? " row-major" : " col-major") +
                              " transA " + std::to_string(transA) + " transB " +
                              std::to_string(transB));
        }
}

TEST_F(SimCublasLtTest, ReluBiasEpilogueClampsAfterTheBias) {
  LinearOp op(DType::F32, DType::F32, true, 24, 16, 4, 29);
  auto d = descriptors(op, [](GemmDesc &g) { g.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS; });
  // LinearDescriptors sets the bias pointer for CUBLASLT_EPILOGUE_BIAS only.
  const void *bias = op.bias.data();
  ASSERT_EQ(lt_->matmulDescSetAttribute(d->matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof(bias)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), nullptr, nullptr, 0),
            CUBLAS_STATUS_SUCCESS);
  HostMatrix want = op.expected(4);
  int clamped = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    clamped += want.at(i) < 0.0f;
    want.set(i, std::fmax(want.at(i), 0.0f));
  }
  EXPECT_GT(clamped, 0);
  expectSameBytes(op.y, want, "relu(x W^T + b)");
}

// cuBLASLt's bias has D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): why CudaDevice converts an
// F32 bias of a half y before CudaLinear::prepare.
TEST_F(SimCublasLtTest, ABiasOfAnotherTypeThanDIsNotSupported) {
  LinearOp op(DType::BF16, DType::BF16, true, 16, 8, 4, 31);
  auto d = descriptors(op, [](GemmDesc &g) { g.biasType = CUDA_R_32F; });
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  EXPECT_TRUE(heuristic(*d, 1 << 20, &status).empty());
  EXPECT_EQ(status, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), nullptr, nullptr, 0),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

// op(A), op(B), C and D that do not fit together are refused by AlgoCheck, the heuristic and the
// matmul, which then writes nothing.
TEST_F(SimCublasLtTest, ShapeConflictsAreInvalidValues) {
  LinearOp op(DType::F32, DType::F32, false, 16, 8, 4, 5);
  auto d = descriptors(op);
  const std::vector<cublasLtMatmulHeuristicResult_t> found = heuristic(*d, 0);
  ASSERT_FALSE(found.empty());
  const cublasLtMatmulAlgo_t algo = found[0].algo;
  auto set = [&](cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, auto value) {
    ASSERT_EQ(lt_->matrixLayoutSetAttribute(layout, attr, &value, sizeof(value)),
              CUBLAS_STATUS_SUCCESS);
  };
  auto expectRefused = [&](const char *what) {
    cublasLtMatmulHeuristicResult_t checked = {};
    EXPECT_EQ(lt_->algoCheck(handle_, d->matmul, d->a, d->b, d->d, d->d, &algo, &checked),
              CUBLAS_STATUS_INVALID_VALUE)
        << what;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    EXPECT_TRUE(heuristic(*d, 0, &status).empty()) << what;
    EXPECT_EQ(status, CUBLAS_STATUS_INVALID_VALUE) << what;
    EXPECT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), &algo, nullptr, 0),
              CUBLAS_STATUS_INVALID_VALUE)
        << what;
  };
  set(d->d, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t(7));
  expectRefused("D one row short of op(A)'s 8");
  set(d->d, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t(8));
  set(d->b, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t(17));
  set(d->b, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(17));
  expectRefused("op(B) with 17 rows for op(A)'s 16 columns");
  set(d->b, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t(16));
  set(d->b, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(16));
  set(d->a, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(15));
  expectRefused("A's ld below its 16 rows");
  set(d->a, CUBLASLT_MATRIX_LAYOUT_LD, int64_t(16));

  Descriptors other{lt_};
  ASSERT_EQ(lt_->matrixLayoutCreate(&other.c, CUDA_R_32F, 8, 3, 8), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 1.0f;
  EXPECT_EQ(lt_->matmul(handle_, d->matmul, &alpha, op.w.data(), d->a, op.x.data(), d->b, &beta,
                        op.y.data(), other.c, op.y.data(), d->d, &algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE)
      << "C of 3 columns, D of 4";
  EXPECT_EQ(op.y.bytes, poisoned(op.y.type, op.y.size()).bytes) << "a refused matmul wrote D";
  ASSERT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), &algo, nullptr, 0),
            CUBLAS_STATUS_SUCCESS);
  expectSameBytes(op.y, op.expected(4), "restored");
}

TEST_F(SimCublasLtTest, HeuristicKeepsToTheWorkspaceLimit) {
  LinearOp op(DType::BF16, DType::BF16, true, 64, 48, 16, 9);
  auto d = descriptors(op);
  const std::vector<cublasLtMatmulHeuristicResult_t> all = heuristic(*d, uint64_t(1) << 30);
  ASSERT_EQ(all.size(), 3u);
  const size_t splitK = all[0].workspaceSize; // partial sums of every output: 2 x 48 x 16 fp32
  EXPECT_EQ(splitK, 2u * 48 * 16 * 4);
  EXPECT_EQ(all[1].workspaceSize, 0u);
  EXPECT_EQ(all[2].workspaceSize, 0u);
  for (const auto &r : all)
    EXPECT_EQ(r.state, CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(std::memcmp(&all[0].algo, &all[1].algo, sizeof(cublasLtMatmulAlgo_t)), 0);
  EXPECT_NE(std::memcmp(&all[1].algo, &all[2].algo, sizeof(cublasLtMatmulAlgo_t)), 0);
  for (uint64_t limit : {uint64_t(0), uint64_t(splitK - 1), uint64_t(splitK)}) {
    const auto results = heuristic(*d, limit);
    EXPECT_EQ(results.size(), limit >= splitK ? 3u : 2u) << "limit " << limit;
    for (const auto &r : results)
      EXPECT_LE(r.workspaceSize, limit);
  }
  EXPECT_EQ(heuristic(*d, uint64_t(1) << 30, nullptr, 1).size(), 1u) << "one requested";
}

TEST_F(SimCublasLtTest, AWorkspaceSmallerThanTheAlgorithmNeedsIsRefused) {
  LinearOp op(DType::F32, DType::F32, false, 32, 16, 8, 11);
  auto d = descriptors(op);
  const auto found = heuristic(*d, uint64_t(1) << 20);
  ASSERT_FALSE(found.empty());
  const size_t needed = found[0].workspaceSize;
  ASSERT_GT(needed, 0u);
  std::vector<uint8_t> workspace(needed, 0);
  EXPECT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), &found[0].algo, workspace.data(),
                   needed - 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), &found[0].algo, nullptr, needed),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(op.y.bytes, poisoned(op.y.type, op.y.size()).bytes) << "a refused matmul wrote D";
  ASSERT_EQ(
      matmul(*d, op.w.data(), op.x.data(), op.y.data(), &found[0].algo, workspace.data(), needed),
      CUBLAS_STATUS_SUCCESS);
  expectSameBytes(op.y, op.expected(8), "split-k");
  EXPECT_EQ(workspace[needed - 1], 0xa5) << "the algorithm filled its workspace";
  // Without an algorithm cublasLtMatmul picks one that fits the workspace given: none here.
  op.y.poison();
  ASSERT_EQ(matmul(*d, op.w.data(), op.x.data(), op.y.data(), nullptr, nullptr, 0),
            CUBLAS_STATUS_SUCCESS);
  expectSameBytes(op.y, op.expected(8), "implicit algorithm");
}

TEST_F(SimCublasLtTest, AlignmentPreferencesAndPointersAreChecked) {
  LinearOp op(DType::F16, DType::F16, false, 32, 16, 8, 13);
  auto d = descriptors(op);
  const auto scalarOnly = heuristic(*d, uint64_t(1) << 20, nullptr, 8, 2, 2, 2);
  ASSERT_EQ(scalarOnly.size(), 1u) << "2-byte aligned pointers leave the scalar algorithm";
  const auto vectorized = heuristic(*d, 0);
  ASSERT_EQ(vectorized.size(), 2u);
  // W's bytes at an address 2 bytes past a 16-byte boundary.
  std::vector<uint8_t> storage(op.w.bytes.size() + 32);
  uint8_t *shifted = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) + 2;
  std::memcpy(shifted, op.w.data(), op.w.bytes.size());
  EXPECT_EQ(matmul(*d, shifted, op.x.data(), op.y.data(), &vectorized[0].algo, nullptr, 0),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(matmul(*d, shifted, op.x.data(), op.y.data(), &scalarOnly[0].algo, nullptr, 0),
            CUBLAS_STATUS_SUCCESS);
  expectSameBytes(op.y, op.expected(8), "scalar algorithm, 2-byte aligned W");
  // ld 7 halves = 14 bytes: no 16-byte algorithm, whatever the pointers.
  LinearOp odd(DType::F16, DType::F16, false, 7, 5, 3, 17);
  EXPECT_EQ(heuristic(*descriptors(odd), uint64_t(1) << 20).size(), 1u);
}

TEST_F(SimCublasLtTest, AlgoCheckMatchesTheAlgorithmToTheProblem) {
  LinearOp f32(DType::F32, DType::F32, false, 32, 16, 8, 19);
  LinearOp bf16(DType::BF16, DType::BF16, false, 32, 16, 8, 19);
  auto d32 = descriptors(f32);
  auto d16 = descriptors(bf16);
  const auto found = heuristic(*d32, uint64_t(1) << 20);
  ASSERT_FALSE(found.empty());
  auto check = [&](const LinearDescriptors &d, const cublasLtMatmulAlgo_t &algo,
                   cublasLtMatmulHeuristicResult_t &result) {
    return lt_->algoCheck(handle_, d.matmul, d.a, d.b, d.d, d.d, &algo, &result);
  };
  cublasLtMatmulHeuristicResult_t checked = {};
  ASSERT_EQ(check(*d32, found[0].algo, checked), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(checked.workspaceSize, found[0].workspaceSize);
  EXPECT_EQ(checked.state, CUBLAS_STATUS_SUCCESS);
  ASSERT_TRUE(d32->setRows(2).isOk()); // a bucket's lowest row count, as cuda_linear checks
  ASSERT_EQ(check(*d32, found[0].algo, checked), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(checked.workspaceSize, found[0].workspaceSize / 4);
  EXPECT_EQ(check(*d16, found[0].algo, checked), CUBLAS_STATUS_INVALID_VALUE)
      << "an F32 algorithm for BF16 descriptors";
  EXPECT_EQ(matmul(*d16, bf16.w.data(), bf16.x.data(), bf16.y.data(), &found[0].algo, nullptr,
                   uint64_t(1) << 20),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulAlgo_t garbage = {};
  garbage.data[0] = 42;
  EXPECT_EQ(check(*d32, garbage, checked), CUBLAS_STATUS_INVALID_VALUE);
}

// Setters take exactly the attribute's size (cuBLASLt's own check) and refuse values that are not
// the enum's (INVALID_VALUE) or that the simulator does not compute (NOT_SUPPORTED).
TEST_F(SimCublasLtTest, MatmulDescAttributesAreCheckedForSizeAndValue) {
  Descriptors g{lt_};
  ASSERT_EQ(lt_->matmulDescCreate(&g.matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  auto setDesc = [&](cublasLtMatmulDescAttributes_t attr, auto value) {
    return lt_->matmulDescSetAttribute(g.matmul, attr, &value, sizeof(value));
  };
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T)), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_TRANSA, int64_t(CUBLAS_OP_T)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt_->matmulDescSetAttribute(g.matmul, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(7)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setDesc(static_cast<cublasLtMatmulDescAttributes_t>(9), int32_t(0)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_TRANSC, int32_t(CUBLAS_OP_T)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_BIAS)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(3)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, int64_t(CUBLASLT_EPILOGUE_BIAS)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(
      setDesc(CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t(CUBLASLT_POINTER_MODE_DEVICE_VECTOR)),
      CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void *>(&g)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void *>(nullptr)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setDesc(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_8I)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulDesc_t tf32 = nullptr;
  EXPECT_EQ(lt_->matmulDescCreate(&tf32, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(SimCublasLtTest, LayoutAttributesAreCheckedForSizeAndValue) {
  Descriptors g{lt_};
  ASSERT_EQ(lt_->matrixLayoutCreate(&g.a, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  auto setLayout = [&](cublasLtMatrixLayoutAttribute_t attr, auto value) {
    return lt_->matrixLayoutSetAttribute(g.a, attr, &value, sizeof(value));
  };
  EXPECT_EQ(setLayout(CUBLASLT_MATRIX_LAYOUT_COLS, uint64_t(9)), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setLayout(CUBLASLT_MATRIX_LAYOUT_COLS, uint32_t(9)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setLayout(CUBLASLT_MATRIX_LAYOUT_ORDER, int32_t(CUBLASLT_ORDER_COL32)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setLayout(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(2)), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setLayout(static_cast<cublasLtMatrixLayoutAttribute_t>(99), int32_t(0)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt_->matrixLayoutCreate(&g.b, CUDA_R_8I, 4, 4, 4), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(lt_->matrixLayoutCreate(&g.b, CUDA_R_32F, 4, 4, -4), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(SimCublasLtTest, PreferenceAttributesAreCheckedForSizeAndValue) {
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(lt_->preferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  auto setPref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    return lt_->preferenceSetAttribute(pref, attr, &value, sizeof(value));
  };
  EXPECT_EQ(setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(1) << 20),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint32_t(1) << 20),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(3)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(setPref(CUBLASLT_MATMUL_PREF_SEARCH_MODE, uint32_t(CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(setPref(static_cast<cublasLtMatmulPreferenceAttributes_t>(2), uint32_t(0)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt_->preferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(0)),
            CUBLAS_STATUS_INVALID_VALUE)
      << "a destroyed preference";
  EXPECT_EQ(lt_->preferenceDestroy(pref), CUBLAS_STATUS_INVALID_VALUE) << "destroyed twice";
}

} // namespace
} // namespace kiln::rt::cublaslt_sim_test
