// The device factory, the cpu backend's memory and copies, and one op run through the dispatch
// table with hand-computed expected values.
#include "runtime/hal/device.h"

#include "runtime/base/half.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

namespace kiln::rt {
namespace {

TEST(CreateDeviceTest, CpuAndErrors) {
  auto cpu = createDevice("cpu");
  ASSERT_TRUE(cpu.isOk()) << cpu.status().toString();
  EXPECT_EQ((*cpu)->name(), "cpu");
  EXPECT_EQ((*cpu)->target(), "cpu");
  EXPECT_EQ((*cpu)->kind(), DeviceKind::kCpu);

  auto cuda = createDevice("cuda");
#ifdef KILN_HAVE_CUDA_BACKEND
  // tests/runtime/hal_cuda covers the CUDA backend's answers (no driver / no device / a GPU).
  (void)cuda;
#else
  ASSERT_FALSE(cuda.isOk());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cuda.status().message(),
            "device 'cuda': this kiln was built without the CUDA backend (use --device cpu, or a "
            "kiln built with -DKILN_ENABLE_CUDA=ON)");
#endif

  auto tpu = createDevice("tpu");
  ASSERT_FALSE(tpu.isOk());
  EXPECT_EQ(tpu.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tpu.status().message(), "unknown device 'tpu': expected cpu, cuda or cuda:N");
}

TEST(CpuDeviceTest, AllocateCopyFree) {
  auto device = std::move(createDevice("cpu")).value();
  auto memory = device->allocate(100, MemoryKind::kHostVisible);
  ASSERT_TRUE(memory.isOk());
  EXPECT_EQ(memory->bytes, 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->data) % 64, 0u);
  EXPECT_EQ(static_cast<uint8_t *>(memory->data)[99], 0); // zeroed
  const int32_t values[3] = {7, -8, 9};
  ASSERT_TRUE(device->copyToDevice(memory->data, values, sizeof(values)).isOk());
  int32_t back[3] = {};
  ASSERT_TRUE(device->copyToHost(back, memory->data, sizeof(back)).isOk());
  EXPECT_EQ(std::memcmp(values, back, sizeof(values)), 0);
  device->free(*memory);
  EXPECT_EQ(memory->data, nullptr);

  std::vector<uint8_t> host = {1, 2, 3};
  auto borrowed = device->importWeights(host);
  ASSERT_TRUE(borrowed.isOk());
  EXPECT_EQ(borrowed->data, host.data()); // no copy
  EXPECT_TRUE(borrowed->borrowed);
  device->free(*borrowed); // must not free the caller's bytes
  EXPECT_EQ(host[2], 3);
}

// y = x W^T with BF16 W; every value is exact in bf16 and fp32, so the result is exact too.
class CpuLinearTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto params = schema::CreateLinearParams(fbb_, false);
    std::vector<uint32_t> inputs = {0, 1}, outputs = {2};
    fbb_.Finish(schema::CreateOpDirect(fbb_, "proj", schema::OpParams::LinearParams, params.Union(),
                                       &inputs, &outputs));
    for (float w : {0.5f, -1.25f, 2.0f, 1.0f, 0.25f, -3.0f})
      weight_.push_back(f32ToBf16(w));
    op_.op = flatbuffers::GetRoot<schema::Op>(fbb_.GetBufferPointer());
    op_.inputs = {bound(x_, schema::DType::F32, schema::RowScale::Tokens, 4, 3),
                  bound(weight_.data(), schema::DType::BF16, schema::RowScale::Fixed, 2, 3)};
    op_.inputs[1].kind = schema::BufferKind::Weight;
    op_.outputs = {bound(y_, schema::DType::F32, schema::RowScale::Tokens, 4, 2)};
  }
  static BoundBuffer bound(void *data, schema::DType dtype, schema::RowScale rows,
                           int64_t fixedRows, int64_t width) {
    BoundBuffer b;
    b.data = data;
    b.dtype = dtype;
    b.rows = rows;
    b.fixedRows = fixedRows;
    b.width = width;
    return b;
  }

  flatbuffers::FlatBufferBuilder fbb_;
  float x_[12] = {1, 2, 3, -1, 0.5f, 4};
  std::vector<uint16_t> weight_;
  float y_[8] = {};
  BoundOp op_;
};

TEST_F(CpuLinearTest, RunsThroughTheDispatchTable) {
  auto device = std::move(createDevice("cpu")).value();
  auto prepared = device->prepareOp(op_);
  ASSERT_TRUE(prepared.isOk()) << prepared.status().toString();
  StepCounts counts;
  counts.numTokens = 2;
  y_[4] = 99.0f; // row 2 is beyond this step's rows and must stay untouched
  ASSERT_TRUE(device->runOp(**prepared, counts).isOk());
  EXPECT_EQ(y_[0], 4.0f);
  EXPECT_EQ(y_[1], -7.5f);
  EXPECT_EQ(y_[2], 6.875f);
  EXPECT_EQ(y_[3], -12.875f);
  EXPECT_EQ(y_[4], 99.0f);
}

// Half activations run too: x in BF16 (every value exact), y in F32 (the lm_head's fp32 logits)
// or BF16 (a hidden state, the exact results rounded to themselves).
TEST_F(CpuLinearTest, RunsHalfActivations) {
  auto device = std::move(createDevice("cpu")).value();
  uint16_t xHalf[12] = {};
  for (int i = 0; i < 12; ++i)
    xHalf[i] = f32ToBf16(x_[i]);
  op_.inputs[0] = bound(xHalf, schema::DType::BF16, schema::RowScale::Tokens, 4, 3);
  StepCounts counts;
  counts.numTokens = 2;
  auto toF32 = device->prepareOp(op_);
  ASSERT_TRUE(toF32.isOk()) << toF32.status().toString();
  ASSERT_TRUE(device->runOp(**toF32, counts).isOk());
  EXPECT_EQ(std::vector<float>(y_, y_ + 4), (std::vector<float>{4.0f, -7.5f, 6.875f, -12.875f}));

  uint16_t yHalf[8] = {};
  op_.outputs[0] = bound(yHalf, schema::DType::BF16, schema::RowScale::Tokens, 4, 2);
  auto toBf16 = device->prepareOp(op_);
  ASSERT_TRUE(toBf16.isOk()) << toBf16.status().toString();
  ASSERT_TRUE(device->runOp(**toBf16, counts).isOk());
  EXPECT_EQ(std::vector<uint16_t>(yHalf, yHalf + 4),
            (std::vector<uint16_t>{f32ToBf16(4.0f), f32ToBf16(-7.5f), f32ToBf16(6.875f),
                                   f32ToBf16(-12.875f)}));
}

TEST_F(CpuLinearTest, RejectsUnsupportedDtypesAndBadBindings) {
  auto device = std::move(createDevice("cpu")).value();
  op_.inputs[0].dtype = schema::DType::I32;
  auto intActivation = device->prepareOp(op_);
  ASSERT_FALSE(intActivation.isOk());
  EXPECT_EQ(intActivation.status().message(),
            "cpu backend: op 'proj' (Linear): input 0 has dtype I32; the cpu kernels take F32, "
            "F16 or BF16 activations");
  op_.inputs[0].dtype = schema::DType::F32;
  op_.inputs[1].dtype = schema::DType::U8;
  auto byteWeights = device->prepareOp(op_);
  ASSERT_FALSE(byteWeights.isOk());
  EXPECT_EQ(byteWeights.status().message(),
            "cpu backend: op 'proj' (Linear): input 1 has dtype U8; weight matrices are F32, F16, "
            "BF16, Q8, Q4, Q4M, Q4Z, Q8F or Q8F32");
  op_.inputs[1].dtype = schema::DType::BF16;
  op_.inputs.pop_back();
  auto missing = device->prepareOp(op_);
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().message(),
            "cpu backend: op 'proj' (Linear): bound 1/1 buffers, the op has 2/1");
}

// One op's activations share a dtype (a Linear's output excepted): an Add over BF16 and F32
// inputs is refused, naming the input and the dtype it met.
TEST(CpuOpsTest, RejectsMixedActivationDtypesOutsideLinear) {
  flatbuffers::FlatBufferBuilder fbb;
  auto params = schema::CreateAddParams(fbb);
  std::vector<uint32_t> inputs = {0, 1}, outputs = {2};
  fbb.Finish(schema::CreateOpDirect(fbb, "residual", schema::OpParams::AddParams, params.Union(),
                                    &inputs, &outputs));
  BoundOp op;
  op.op = flatbuffers::GetRoot<schema::Op>(fbb.GetBufferPointer());
  op.inputs.resize(2);
  op.outputs.resize(1);
  op.inputs[0].dtype = schema::DType::BF16;
  op.inputs[1].dtype = schema::DType::F32;
  op.outputs[0].dtype = schema::DType::BF16;
  auto device = std::move(createDevice("cpu")).value();
  auto mixed = device->prepareOp(op);
  ASSERT_FALSE(mixed.isOk());
  EXPECT_EQ(mixed.status().message(),
            "cpu backend: op 'residual' (Add): input 1 has dtype F32; the op's other activations "
            "are BF16 (one op's activations share one dtype; only a Linear's output may differ)");
  op.inputs[1].dtype = schema::DType::BF16;
  EXPECT_TRUE(device->prepareOp(op).isOk());
}

// Greedy sampling's argmax (Device::argmaxRows): lowest id among the largest finite values.
TEST(CpuDeviceTest, ArgmaxRowsKeepsTheLowestIdOfTheLargestFiniteValue) {
  auto device = std::move(createDevice("cpu")).value();
  ASSERT_TRUE(device->canArgmaxRows());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {
      1.0f,  5.0f,  2.0f,  5.0f,  0.0f,  // tie: id 1
      nan,   -1.0f, inf,   -2.0f, -1.0f, // NaN and +inf never win; tie at -1: id 1
      nan,   -inf,  nan,   -inf,  nan,   // nothing finite: -1
      -3.0f, -3.0f, -3.0f, -3.0f, 7.0f,  // the last id
  };
  std::vector<int32_t> ids(4, 99);
  ASSERT_TRUE(device->argmaxRows(logits.data(), 4, 5, ids.data()).isOk());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 1, -1, 4}));
}

} // namespace
} // namespace kiln::rt
