// Events in the simulated CUDA driver (libcuda.so.1 from tools/cudasim/sim_driver*.cc), loaded
// as kiln loads the NVIDIA one: timestamps in stream order, and the errors a GPU reports for
// unrecorded, untimed, foreign, destroyed and captured events, checked by value.
#include "runtime/hal/cuda/cuda_driver.h"
#include "tests/tools/cudasim/sim_driver_fixture.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace kiln::cudasim {
namespace {

// Read by the driver's first cuInit: two devices, so events can belong to another context.
const bool kEnvironment = [] {
  setenv("KILN_CUDASIM_DEVICES", "2", 1);
  setenv("KILN_CUDASIM_MEMORY_MB", "16", 1);
  return true;
}();

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Device 0's context and a stream (sim_driver_fixture.h); the last release of the context also
// destroys the events a test left.
class SimDriverEventTest : public SimDriverContextTest {
protected:
  CUevent create(unsigned flags = CU_EVENT_DEFAULT) {
    CUevent event = nullptr;
    CUresult rc = d_->eventCreate(&event, flags);
    EXPECT_EQ(rc, CUDA_SUCCESS) << d_->describe(rc);
    return event;
  }
};

TEST_F(SimDriverEventTest, ElapsedTimeIsTheHostTimeBetweenTwoRecords) {
  CUevent start = create(), end = create(CU_EVENT_BLOCKING_SYNC);
  ASSERT_EQ(d_->eventRecord(start, stream_), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(d_->eventRecord(end, stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventSynchronize(end), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(d_->eventElapsedTime(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 15.0f);
  EXPECT_LE(ms, 200.0f);
  // The same interval the other way round is negative, as on a GPU.
  float back = 0;
  ASSERT_EQ(d_->eventElapsedTime(&back, end, start), CUDA_SUCCESS);
  EXPECT_EQ(back, -ms);
  float none = -1;
  ASSERT_EQ(d_->eventElapsedTime(&none, start, start), CUDA_SUCCESS);
  EXPECT_EQ(none, 0.0f);
  EXPECT_EQ(d_->eventDestroy(start), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventDestroy(end), CUDA_SUCCESS);
}

TEST_F(SimDriverEventTest, ARecordOverwritesTheLastOneOnAnyStreamOfTheContext) {
  CUevent start = create(), end = create();
  ASSERT_EQ(d_->eventRecord(start, stream_), CUDA_SUCCESS);
  ASSERT_EQ(d_->eventRecord(end, nullptr), CUDA_SUCCESS); // the legacy stream
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(d_->eventRecord(end, CU_STREAM_LEGACY), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(d_->eventElapsedTime(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 15.0f);
  EXPECT_LE(ms, 200.0f);
  ASSERT_EQ(d_->eventRecord(start, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(d_->eventElapsedTime(&ms, start, end), CUDA_SUCCESS);
  EXPECT_LE(ms, 0.0f);
}

TEST_F(SimDriverEventTest, ElapsedTimeNeedsTwoRecordedTimedEvents) {
  CUevent start = create(), end = create();
  float ms = 42;
  CUresult rc = d_->eventElapsedTime(&ms, start, end);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(contains(describe(rc), "start event")) << describe(rc);
  EXPECT_TRUE(contains(describe(rc), "has not been recorded")) << describe(rc);
  ASSERT_EQ(d_->eventRecord(start, stream_), CUDA_SUCCESS);
  rc = d_->eventElapsedTime(&ms, start, end);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(contains(describe(rc), "end event")) << describe(rc);
  EXPECT_EQ(ms, 42.0f); // untouched by a failed call
  ASSERT_EQ(d_->eventRecord(end, stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventElapsedTime(nullptr, start, end), CUDA_ERROR_INVALID_VALUE);

  // Untimed events order work (record, synchronize) but have no timestamp.
  CUevent untimed = create(CU_EVENT_DISABLE_TIMING);
  ASSERT_EQ(d_->eventRecord(untimed, stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventSynchronize(untimed), CUDA_SUCCESS);
  rc = d_->eventElapsedTime(&ms, start, untimed);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(contains(describe(rc), "CU_EVENT_DISABLE_TIMING")) << describe(rc);
  EXPECT_EQ(d_->eventElapsedTime(&ms, untimed, end), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(ms, 42.0f);
}

TEST_F(SimDriverEventTest, CreateRefusesUnknownFlagsAndANullPointer) {
  CUevent event = nullptr;
  CUresult rc = d_->eventCreate(&event, 0x8);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(contains(describe(rc), "unknown flags 0x8")) << describe(rc);
  EXPECT_EQ(event, nullptr);
  EXPECT_EQ(d_->eventCreate(&event, CU_EVENT_DISABLE_TIMING | 0x100), CUDA_ERROR_INVALID_VALUE);
  rc = d_->eventCreate(&event, CU_EVENT_INTERPROCESS);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(contains(describe(rc), "requires CU_EVENT_DISABLE_TIMING")) << describe(rc);
  EXPECT_EQ(d_->eventCreate(nullptr, CU_EVENT_DEFAULT), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(event, nullptr);
  EXPECT_NE(create(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
            nullptr);

  ASSERT_EQ(d_->ctxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventCreate(&event, CU_EVENT_DEFAULT), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(event, nullptr);
}

TEST_F(SimDriverEventTest, DestroyedEventsAreNoLongerLive) {
  CUevent event = create();
  ASSERT_EQ(d_->eventRecord(event, stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventDestroy(event), CUDA_SUCCESS);
  CUresult rc = d_->eventDestroy(event);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(contains(describe(rc), "is not a live event")) << describe(rc);
  EXPECT_EQ(d_->eventRecord(event, stream_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d_->eventSynchronize(event), CUDA_ERROR_INVALID_HANDLE);
  float ms = 0;
  EXPECT_EQ(d_->eventElapsedTime(&ms, event, event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d_->eventSynchronize(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d_->eventDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimDriverEventTest, RecordingIntoACaptureFailsAndInvalidatesIt) {
  CUevent event = create();
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUresult rc = d_->eventRecord(event, stream_);
  EXPECT_EQ(rc, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(contains(describe(rc), "cudasim does not simulate event-record nodes"))
      << describe(rc);
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  rc = d_->streamEndCapture(stream_, &graph);
  EXPECT_EQ(rc, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_TRUE(contains(describe(rc), "invalidated by cuEventRecord into stream")) << describe(rc);
  EXPECT_EQ(graph, nullptr);
  float ms = 0;
  EXPECT_EQ(d_->eventElapsedTime(&ms, event, event), CUDA_ERROR_INVALID_HANDLE); // not recorded

  // The legacy stream waits for a blocking stream's capture: recording there invalidates it.
  CUstream blocking = nullptr;
  ASSERT_EQ(d_->streamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventRecord(event, nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(d_->streamEndCapture(blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(d_->streamDestroy(blocking), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventRecord(event, nullptr), CUDA_SUCCESS);
}

TEST_F(SimDriverEventTest, EventsAndStreamsOfAnotherContextAreRejected) {
  CUevent mine = create();
  CUcontext other = nullptr;
  ASSERT_EQ(d_->devicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  ASSERT_EQ(d_->ctxSetCurrent(other), CUDA_SUCCESS);
  CUevent theirs = create();
  CUstream theirStream = nullptr;
  ASSERT_EQ(d_->streamCreate(&theirStream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(d_->eventRecord(theirs, theirStream), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventRecord(mine, theirStream), CUDA_ERROR_INVALID_HANDLE);
  CUresult rc = d_->eventRecord(mine, nullptr);
  EXPECT_EQ(rc, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(contains(describe(rc), "belongs to device 0's context, but the legacy stream to "
                                     "device 1's context"))
      << describe(rc);
  ASSERT_EQ(d_->ctxSetCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(d_->eventRecord(mine, stream_), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventRecord(theirs, stream_), CUDA_ERROR_INVALID_HANDLE);
  // Each GPU has its own clock.
  float ms = 0;
  EXPECT_EQ(d_->eventElapsedTime(&ms, mine, theirs), CUDA_ERROR_INVALID_HANDLE);
  // Releasing device 1's last retain destroys its events.
  ASSERT_EQ(d_->devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  EXPECT_EQ(d_->eventSynchronize(theirs), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d_->eventSynchronize(mine), CUDA_SUCCESS);
}

// A graph replay into freed memory faults like a GPU and poisons the context: records fail
// with the sticky error, while destroy still releases the event (and reports the error).
TEST_F(SimDriverEventTest, AStickyErrorFailsRecordsButNotDestroy) {
  CUevent event = create();
  CUdeviceptr p = 0;
  ASSERT_EQ(d_->memAlloc(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(d_->streamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(d_->memsetD8Async(p, 0, 16, stream_), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(d_->streamEndCapture(stream_, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(d_->graphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(d_->memFree(p), CUDA_SUCCESS);
  ASSERT_EQ(d_->graphLaunch(exec, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);

  EXPECT_EQ(d_->eventRecord(event, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(d_->eventSynchronize(event), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUevent another = nullptr;
  EXPECT_EQ(d_->eventCreate(&another, CU_EVENT_DEFAULT), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(d_->eventDestroy(event), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(d_->eventDestroy(event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(d_->graphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(d_->graphDestroy(graph), CUDA_SUCCESS);
}

} // namespace
} // namespace kiln::cudasim
