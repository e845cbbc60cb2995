// Linear through CudaDevice (cuBLASLt) against the cpu kernel (kernels/cpu linear, what the cpu
// backend runs for the same plan op), label gpu. Every dtype combination a plan can hold (x and W
// of one dtype, y of it or F32, no bias / F32 bias / bias of y's dtype), shapes up to 4096 x 4096
// and row counts 1..300 that fall inside and on the edges of the row buckets algorithms are
// chosen for. Skips with "no CUDA device: ..." without a GPU.
#include "runtime/hal/cuda/cuda_device.h"

#include "kernels/cpu/kernels.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

namespace kiln::rt {
namespace {

namespace kc = kiln::kernels::cpu;
using schema::DType;
using schema::RowScale;

constexpr int32_t kMaxRows = 300;

size_t bytesOf(DType dtype) {
  return dtype == DType::F32 ? 4 : 2;
}

kc::ElemType elemOf(DType dtype) {
  return dtype == DType::F16    ? kc::ElemType::kF16
         : dtype == DType::BF16 ? kc::ElemType::kBF16
                                : kc::ElemType::kF32;
}

std::vector<uint8_t> encode(const std::vector<float> &values, DType dtype) {
  std::vector<uint8_t> out(values.size() * bytesOf(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
      continue;
    }
    const uint16_t h = dtype == DType::BF16 ? f32ToBf16(values[i]) : f32ToF16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

std::vector<float> decode(const std::vector<uint8_t> &bytes, DType dtype) {
  std::vector<float> out(bytes.size() / bytesOf(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
      continue;
    }
    uint16_t h = 0;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = dtype == DType::BF16 ? bf16ToF32(h) : f16ToF32(h);
  }
  return out;
}

std::vector<float> uniform(size_t n, float bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

// |gpu - cpu| <= atol + rtol |cpu|. F32 y: both accumulate in fp32 in different orders (and F32
// inputs never go through TF32). Half y: both round once, so they may differ by one unit in the
// last place, plus the converted bias's rounding (an F32 bias of a half y, cuda_linear.h).
struct Tolerance {
  float atol, rtol;
};
Tolerance toleranceFor(DType y) {
  return y == DType::F32   ? Tolerance{1e-4f, 1e-5f}
         : y == DType::F16 ? Tolerance{2e-3f, 1e-3f}
                           : Tolerance{1.6e-2f, 8e-3f};
}

struct Combination {
  DType t, y;
  bool hasBias;
  DType bias;
};

std::string describe(const Combination &c, int64_t in, int64_t out) {
  return "x/W " + std::to_string(int(c.t)) + ", y " + std::to_string(int(c.y)) +
         (c.hasBias ? ", bias " + std::to_string(int(c.bias)) : ", no bias") + ", in " +
         std::to_string(in) + ", out " + std::to_string(out);
}

std::vector<Combination> combinations() {
  std::vector<Combination> all;
  const std::pair<DType, DType> pairs[] = {{DType::F32, DType::F32},
                                           {DType::F16, DType::F16},
                                           {DType::F16, DType::F32},
                                           {DType::BF16, DType::BF16},
                                           {DType::BF16, DType::F32}};
  for (auto [t, y] : pairs) {
    all.push_back({t, y, false, DType::F32});
    all.push_back({t, y, true, DType::F32});
    if (y != DType::F32)
      all.push_back({t, y, true, y});
  }
  return all;
}

class CudaLinearGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto device = createDevice("cuda");
    if (!device.isOk())
      GTEST_SKIP() << "no CUDA device: " << device.status().message();
    device_ = std::move(device).value();
  }
  void TearDown() override {
    for (DeviceMemory &m : memory_)
      device_->free(m);
  }

  void *upload(const std::vector<uint8_t> &bytes) {
    auto memory = device_->allocate(bytes.size(), MemoryKind::kDevice);
    EXPECT_TRUE(memory.isOk()) << memory.status().toString();
    if (!memory.isOk())
      return nullptr;
    memory_.push_back(*memory);
    EXPECT_TRUE(device_->copyToDevice(memory->data, bytes.data(), bytes.size()).isOk());
    return memory->data;
  }

  // One plan op and its bound buffers (x [300, in], W [out, in], bias [out], y [300, out]).
  BoundOp bind(const Combination &c, int64_t in, int64_t out, void *x, void *w, void *bias,
               void *y) {
    fbb_.Clear();
    std::vector<uint32_t> inputs = {0, 1}, outputs = {3};
    if (c.hasBias)
      inputs.push_back(2);
    fbb_.Finish(schema::CreateOpDirect(fbb_, "linear", schema::OpParams::LinearParams,
                                       schema::CreateLinearParams(fbb_, c.hasBias).Union(), &inputs,
                                       &outputs, ""));
    BoundOp op;
    op.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
    auto buffer = [](void *data, DType dtype, RowScale rows, int64_t fixedRows, int64_t width) {
      BoundBuffer b;
      b.data = data;
      b.dtype = dtype;
      b.rows = rows;
      b.fixedRows = fixedRows;
      b.width = width;
      return b;
    };
    op.inputs = {buffer(x, c.t, RowScale::Tokens, kMaxRows, in),
                 buffer(w, c.t, RowScale::Fixed, out, in)};
    op.inputs[1].kind = schema::BufferKind::Weight;
    if (c.hasBias) {
      op.inputs.push_back(buffer(bias, c.bias, RowScale::Fixed, out, 1));
      op.inputs[2].kind = schema::BufferKind::Weight;
    }
    op.outputs = {buffer(y, c.y, RowScale::Tokens, kMaxRows, out)};
    return op;
  }

  // Runs a bound op for a step's counts; made once per shape. The default prepares it on the
  // fixture's device.
  using Runner = std::function<Status(const StepCounts &)>;
  using MakeRunner = std::function<Result<Runner>(const BoundOp &)>;
  Result<Runner> deviceRunner(const BoundOp &op) {
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<PreparedOp> prepared, device_->prepareOp(op));
    return Runner(
        [this, prepared](const StepCounts &counts) { return device_->runOp(*prepared, counts); });
  }

  void checkShape(const Combination &c, int64_t in, int64_t out,
                  const std::vector<int32_t> &rowCounts, MakeRunner makeRunner = {});

  std::unique_ptr<Device> device_;
  std::vector<DeviceMemory> memory_;
  flatbuffers::FlatBufferBuilder fbb_;
};

void CudaLinearGpuTest::checkShape(const Combination &c, int64_t in, int64_t out,
                                   const std::vector<int32_t> &rowCounts, MakeRunner makeRunner) {
  SCOPED_TRACE(describe(c, in, out));
  const uint32_t seed = static_cast<uint32_t>(in * 31 + out);
  // Values exactly representable in the input dtype, so both backends start from the same numbers.
  const std::vector<uint8_t> x = encode(uniform(size_t(kMaxRows) * in, 1.0f, seed), c.t);
  const std::vector<uint8_t> w =
      encode(uniform(size_t(out) * in, 1.0f / std::sqrt(float(in)), seed + 1), c.t);
  const std::vector<uint8_t> bias = encode(uniform(size_t(out), 1.0f, seed + 2), c.bias);
  const std::vector<float> biasF32 = decode(bias, c.bias); // the cpu kernel takes an F32 bias

  std::vector<uint8_t> expected(size_t(kMaxRows) * out * bytesOf(c.y));
  kc::linear({x.data(), w.data(), elemOf(c.t), c.hasBias ? biasF32.data() : nullptr,
              expected.data(), kMaxRows, static_cast<int32_t>(in), static_cast<int32_t>(out),
              elemOf(c.t), elemOf(c.y)});
  const std::vector<float> reference = decode(expected, c.y);

  void *y = upload(std::vector<uint8_t>(expected.size(), 0));
  BoundOp op = bind(c, in, out, upload(x), upload(w), c.hasBias ? upload(bias) : nullptr, y);
  auto run = makeRunner ? makeRunner(op) : deviceRunner(op);
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  const Tolerance tol = toleranceFor(c.y);
  for (int32_t rows : rowCounts) {
    // Stale rows from the previous count must not matter: poison y first.
    std::vector<uint8_t> poison(expected.size(), 0xff);
    ASSERT_TRUE(device_->copyToDevice(y, poison.data(), poison.size()).isOk());
    StepCounts counts{rows, rows, rows, rows};
    Status ran = (*run)(counts);
    ASSERT_TRUE(ran.isOk()) << "rows " << rows << ": " << ran.toString();
    std::vector<uint8_t> got(size_t(rows) * out * bytesOf(c.y));
    ASSERT_TRUE(device_->copyToHost(got.data(), y, got.size()).isOk());
    const std::vector<float> gpu = decode(got, c.y);
    int failures = 0;
    double worst = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
      const double diff = std::fabs(double(gpu[i]) - reference[i]);
      worst = std::max(worst, std::isnan(diff) ? INFINITY : diff);
      if (!(diff <= tol.atol + tol.rtol * std::fabs(reference[i])) && failures++ < 3)
        ADD_FAILURE() << "rows " << rows << ": y[" << i / out << ", " << i % out << "] gpu "
                      << gpu[i] << " vs cpu " << reference[i];
    }
    EXPECT_EQ(failures, 0) << "rows " << rows << ": " << failures << " elements off, worst "
                           << worst;
  }
}

const std::vector<int32_t> kRowCounts = {1, 2, 3, 5, 16, 17, 64, 100, 129, 256, 257, 300};

TEST_F(CudaLinearGpuTest, EveryDtypeCombinationMatchesTheCpuKernel) {
  for (const Combination &c : combinations()) {
    for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{
             {64, 64}, {1000, 300}, {4096, 1024}, {1024, 4096}})
      checkShape(c, in, out, kRowCounts);
    checkShape(c, 4096, 4096, {1, 7, 300});
    if (HasFatalFailure())
      return;
  }
}

// Odd sizes: leading dimensions that are not multiples of 8 elements (16 bytes for halves).
TEST_F(CudaLinearGpuTest, OddShapes) {
  for (const Combination &c : combinations())
    for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{7, 5}, {33, 129}, {250, 1}})
      checkShape(c, in, out, {1, 3, 300});
}

// Autotuning with a scripted timer: every usable candidate of every row bucket runs once as
// it is timed (then the result must still match the cpu kernel), and the kept candidate is the
// one the times say, never one within the margin of the heuristic's first.
TEST_F(CudaLinearGpuTest, AutotuneRunsEveryCandidateAndKeepsTheFastest) {
  auto *cuda = dynamic_cast<CudaDevice *>(device_.get());
  ASSERT_NE(cuda, nullptr);
  const CUstream stream = cuda->nativeHandles().stream;
  auto lt = CublasLt::load(defaultCublasLtLibraries());
  ASSERT_TRUE(lt.isOk()) << lt.status().toString();
  auto workspace = device_->allocate(kLinearWorkspaceBytes, MemoryKind::kDevice);
  ASSERT_TRUE(workspace.isOk()) << workspace.status().toString();
  memory_.push_back(*workspace);
  for (bool laterIsFaster : {true, false}) {
    SCOPED_TRACE(laterIsFaster ? "later candidates faster" : "later candidates slower");
    int calls = 0;
    LinearTimer timer = [&](const std::function<Status(CUstream)> &work) -> Result<double> {
      KILN_RETURN_IF_ERROR(work(stream));
      ++calls;
      return laterIsFaster ? 100.0 / calls : double(calls);
    };
    auto linear = CudaLinear::create(*lt, workspace->data, workspace->bytes, timer);
    ASSERT_TRUE(linear.isOk()) << linear.status().toString();
    std::vector<CudaLinear::Choice> choices;
    MakeRunner make = [&](const BoundOp &op) -> Result<Runner> {
      KILN_ASSIGN_OR_RETURN(std::shared_ptr<PreparedOp> prepared, (*linear)->prepare(op));
      choices = CudaLinear::choices(*prepared);
      return Runner([&, prepared](const StepCounts &counts) {
        KILN_RETURN_IF_ERROR((*linear)->run(*prepared, counts, stream));
        return device_->synchronize();
      });
    };
    checkShape({DType::BF16, DType::BF16, true, DType::BF16}, 1024, 512, {1, 3, 100, 300}, make);
    ASSERT_EQ(choices.size(), linearRowBuckets(kMaxRows).size());
    int timed = 0;
    for (const CudaLinear::Choice &choice : choices) {
      ASSERT_GE(choice.candidates, 1u);
      const bool tuned = choice.candidates > 1;
      timed += tuned ? int(choice.candidates) : 0;
      EXPECT_EQ(choice.chosen, tuned && laterIsFaster ? choice.candidates - 1 : 0);
    }
    EXPECT_GT(timed, 0) << "no bucket had two candidates to choose from";
    EXPECT_EQ(calls, timed);
  }
}

TEST_F(CudaLinearGpuTest, MissingCublasLtIsAnErrorNamingTheLibraries) {
  CudaDeviceOptions options;
  options.cublasLtLibraries = {"/nonexistent/libcublasLt.so.13"};
  auto created = createCudaDevice(options);
  ASSERT_TRUE(created.isOk()) << created.status().toString(); // only Linear needs cuBLASLt
  // Its buffers come from the fixture's device: preparing reads no memory before loading.
  const Combination c{DType::F32, DType::F32, false, DType::F32};
  void *x = upload(std::vector<uint8_t>(kMaxRows * 16 * 4));
  void *w = upload(std::vector<uint8_t>(16 * 16 * 4));
  void *y = upload(std::vector<uint8_t>(kMaxRows * 16 * 4));
  auto prepared = (*created)->prepareOp(bind(c, 16, 16, x, w, nullptr, y));
  ASSERT_FALSE(prepared.isOk());
  EXPECT_EQ(prepared.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(prepared.status().message().rfind(
                "cuBLASLt not found (tried /nonexistent/libcublasLt.so.13): ", 0),
            0u)
      << prepared.status().message();
}

} // namespace
} // namespace kiln::rt
