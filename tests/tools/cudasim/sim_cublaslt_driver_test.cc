// The simulated cuBLASLt beside the simulated driver (tools/cudasim/sim_driver*.cc): Linear through
// CudaDevice runs on its stream and, inside a CUDA graph, only when the graph is replayed; a
// captured matmul keeps the state it was called with.
#include "tests/tools/cudasim/sim_cublaslt_test_util.h"

namespace kiln::rt::cublaslt_sim_test {
namespace {

// With the simulated driver (tools/cudasim/sim_driver.cc) beside it: Linear through CudaDevice,
// whose matmuls run on its stream, and inside a CUDA graph only when the graph is replayed.
class SimCublasLtOnTheDriverTest : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string driver = kLibDir + "/libcuda.so.1";
    if (!std::filesystem::exists(driver))
      GTEST_SKIP() << "the simulated driver " << driver << " is not built";
    CudaDeviceOptions options;
    options.driverLibrary = driver;
    options.cublasLtLibraries = {kLibDir + "/libcublasLt.so.13"};
    auto device = createCudaDevice(options);
    ASSERT_TRUE(device.isOk()) << device.status().toString();
    device_ = std::move(device).value();
  }
  void TearDown() override {
    for (DeviceMemory &m : memory_)
      device_->free(m);
  }
  void *upload(const HostMatrix &m) {
    auto memory = device_->allocate(m.bytes.size(), MemoryKind::kDevice);
    EXPECT_TRUE(memory.isOk()) << memory.status().toString();
    if (!memory.isOk())
      return nullptr;
    memory_.push_back(*memory);
    EXPECT_TRUE(device_->copyToDevice(memory->data, m.bytes.data(), m.bytes.size()).isOk());
    return memory->data;
  }
  HostMatrix download(const void *data, const HostMatrix &like) {
    HostMatrix out(like.type, like.size());
    EXPECT_TRUE(device_->copyToHost(out.data(), data, out.bytes.size()).isOk());
    return out;
  }

  std::unique_ptr<Device> device_;
  std::vector<DeviceMemory> memory_;
};

TEST_F(SimCublasLtOnTheDriverTest, LinearRunsOnTheStreamAndReplaysInAGraph) {
  LinearOp host(DType::BF16, DType::BF16, true, 64, 32, 8, 23);
  BoundOp op = host.op;
  void *x = upload(host.x);
  op.inputs[0].data = x;
  op.inputs[1].data = upload(host.w);
  op.inputs[2].data = upload(host.bias);
  void *y = op.outputs[0].data = upload(host.y);
  auto prepared = device_->prepareOp(op);
  ASSERT_TRUE(prepared.isOk()) << prepared.status().toString();
  // Autotuning at prepare ran candidate matmuls into y: start again from the poison.
  ASSERT_TRUE(device_->copyToDevice(y, host.y.bytes.data(), host.y.bytes.size()).isOk());
  ASSERT_TRUE(device_->runOp(**prepared, {5, 5, 5, 5}).isOk());
  ASSERT_TRUE(device_->synchronize().isOk());
  expectSameBytes(download(y, host.y), host.expected(5), "on the stream, 5 rows");

  ASSERT_TRUE(device_->supportsGraphs());
  ASSERT_TRUE(device_->copyToDevice(y, host.y.bytes.data(), host.y.bytes.size()).isOk());
  ASSERT_TRUE(device_->beginCapture().isOk());
  Status ran = device_->runOp(**prepared, {8, 8, 8, 8});
  auto program = device_->endCapture();
  ASSERT_TRUE(ran.isOk()) << ran.toString();
  ASSERT_TRUE(program.isOk()) << program.status().toString();
  EXPECT_EQ(download(y, host.y).bytes, host.y.bytes) << "captured, not run";
  ASSERT_TRUE(device_->replay(**program).isOk());
  ASSERT_TRUE(device_->synchronize().isOk());
  expectSameBytes(download(y, host.y), host.expected(8), "replayed, 8 rows");
  // New inputs copied in before a replay are what it reads.
  host.x = randomMatrix(host.x.type, host.x.size(), 1.0f, 99);
  ASSERT_TRUE(device_->copyToDevice(x, host.x.bytes.data(), host.x.bytes.size()).isOk());
  ASSERT_TRUE(device_->replay(**program).isOk());
  ASSERT_TRUE(device_->synchronize().isOk());
  expectSameBytes(download(y, host.y), host.expected(8), "replayed with new x");
}

// The simulated driver's API, for matmuls on a stream of the test's own.
class SimCublasLtOnAStreamTest : public SimCublasLtTest {
protected:
  void SetUp() override {
    const std::string path = kLibDir + "/libcuda.so.1";
    if (!std::filesystem::exists(path))
      GTEST_SKIP() << "the simulated driver " << path << " is not built";
    SimCublasLtTest::SetUp();
    driver_ = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    ASSERT_TRUE(driver_) << dlerror();
#define KILN_RESOLVE(name)                                                                         \
  name = reinterpret_cast<decltype(&::name)>(dlsym(driver_, #name));                               \
  ASSERT_TRUE(name) << #name;
    KILN_RESOLVE(cuInit)
    KILN_RESOLVE(cuDeviceGet)
    KILN_RESOLVE(cuDevicePrimaryCtxRetain)
    KILN_RESOLVE(cuCtxSetCurrent)
    KILN_RESOLVE(cuStreamCreate)
    KILN_RESOLVE(cuStreamDestroy_v2)
    KILN_RESOLVE(cuStreamBeginCapture_v2)
    KILN_RESOLVE(cuStreamEndCapture)
    KILN_RESOLVE(cuStreamSynchronize)
    KILN_RESOLVE(cuGraphInstantiateWithFlags)
    KILN_RESOLVE(cuGraphLaunch)
    KILN_RESOLVE(cuGraphExecDestroy)
    KILN_RESOLVE(cuGraphDestroy)
#undef KILN_RESOLVE
    CUdevice device = 0;
    CUcontext context = nullptr;
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (stream_) {
      EXPECT_EQ(cuStreamDestroy_v2(stream_), CUDA_SUCCESS);
    }
    SimCublasLtTest::TearDown();
  }

  // Records what `enqueue` puts on the stream into a graph (run nothing yet).
  CUgraphExec capture(const std::function<void()> &enqueue) {
    EXPECT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    enqueue();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
    return exec;
  }
  void launch(CUgraphExec exec) {
    ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  }

  void *driver_ = nullptr;
  CUstream stream_ = nullptr;
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy_v2) cuStreamDestroy_v2 = nullptr;
  decltype(&::cuStreamBeginCapture_v2) cuStreamBeginCapture_v2 = nullptr;
  decltype(&::cuStreamEndCapture) cuStreamEndCapture = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) cuGraphInstantiateWithFlags = nullptr;
  decltype(&::cuGraphLaunch) cuGraphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) cuGraphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) cuGraphDestroy = nullptr;
};

// A captured matmul keeps what it was called with: host-mode alpha/beta as they were at the call
// and the descriptors' state (destroying them afterwards changes nothing), while device-mode
// alpha/beta are read each time the graph runs, like any other device memory.
TEST_F(SimCublasLtOnAStreamTest, CapturedMatmulsKeepTheirCallsState) {
  LinearOp op(DType::F32, DType::F32, false, 40, 24, 6, 37);
  const HostMatrix want = op.expected(6);
  auto d = descriptors(op);
  float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_NOT_INITIALIZED;
  CUgraphExec hostMode = capture([&] {
    status = lt_->matmul(handle_, d->matmul, &alpha, op.w.data(), d->a, op.x.data(), d->b, &beta,
                         op.y.data(), d->d, op.y.data(), d->d, nullptr, nullptr, 0, stream_);
  });
  ASSERT_EQ(status, CUBLAS_STATUS_SUCCESS);
  alpha = 2.0f;
  d.reset();
  EXPECT_EQ(op.y.bytes, poisoned(op.y.type, op.y.size()).bytes) << "captured, not run";
  launch(hostMode);
  expectSameBytes(op.y, want, "alpha 1 at the call, descriptors destroyed since");
  EXPECT_EQ(cuGraphExecDestroy(hostMode), CUDA_SUCCESS);

  d = descriptors(op);
  const int32_t device = CUBLASLT_POINTER_MODE_DEVICE;
  ASSERT_EQ(lt_->matmulDescSetAttribute(d->matmul, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device,
                                        sizeof(device)),
            CUBLAS_STATUS_SUCCESS);
  op.y.poison();
  alpha = 1.0f;
  CUgraphExec deviceMode = capture([&] {
    status = lt_->matmul(handle_, d->matmul, &alpha, op.w.data(), d->a, op.x.data(), d->b, &beta,
                         op.y.data(), d->d, op.y.data(), d->d, nullptr, nullptr, 0, stream_);
  });
  ASSERT_EQ(status, CUBLAS_STATUS_SUCCESS);
  alpha = 2.0f;
  launch(deviceMode);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(op.y.at(i), 2.0f * want.at(i)) << "alpha read at the launch, element " << i;
  EXPECT_EQ(cuGraphExecDestroy(deviceMode), CUDA_SUCCESS);
}

} // namespace
} // namespace kiln::rt::cublaslt_sim_test
