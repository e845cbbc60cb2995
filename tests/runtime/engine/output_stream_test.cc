// OutputStream and the OutputSignal shared by several streams: a reader waiting on the signal
// wakes for a push or close on any of them, and a push between reading the generation and
// waiting is never lost.
#include "runtime/engine/output_stream.h"

#include <gtest/gtest.h>

#include <thread>

namespace kiln::rt {
namespace {

using namespace std::chrono_literals;

RequestOutput outputWithText(std::string text) {
  RequestOutput out;
  out.text = std::move(text);
  return out;
}

TEST(OutputStreamTest, QueueDrainsInOrderThenReportsFinished) {
  OutputStream stream;
  stream.push(outputWithText("a"));
  stream.push(outputWithText("b"));
  stream.close();
  EXPECT_FALSE(stream.finished());
  EXPECT_EQ(stream.next()->text, "a");
  EXPECT_EQ(stream.tryNext()->text, "b");
  EXPECT_FALSE(stream.next().has_value());
  EXPECT_TRUE(stream.finished());
}

TEST(OutputSignalTest, PushAndCloseOnAnyStreamBumpTheGeneration) {
  auto signal = std::make_shared<OutputSignal>();
  OutputStream first, second;
  first.setSignal(signal);
  second.setSignal(signal);
  EXPECT_EQ(signal->generation(), 0u);
  second.push(outputWithText("x"));
  EXPECT_EQ(signal->generation(), 1u);
  first.close();
  EXPECT_EQ(signal->generation(), 2u);
  // Already changed: returns at once even with a far deadline.
  signal->waitChanged(0, std::chrono::steady_clock::now() + 1h);
}

TEST(OutputSignalTest, AWaiterWakesForAPushOnAnotherThread) {
  auto signal = std::make_shared<OutputSignal>();
  OutputStream stream;
  stream.setSignal(signal);
  uint64_t seen = signal->generation();
  std::thread pusher([&] {
    std::this_thread::sleep_for(20ms);
    stream.push(outputWithText("late"));
  });
  // Bounded by the deadline so a lost wake-up fails the assertions instead of hanging.
  signal->waitChanged(seen, std::chrono::steady_clock::now() + 30s);
  pusher.join();
  EXPECT_NE(signal->generation(), seen);
  EXPECT_EQ(stream.tryNext()->text, "late");
}

TEST(OutputSignalTest, WaitEndsAtTheDeadlineWithoutAChange) {
  OutputSignal signal;
  auto start = std::chrono::steady_clock::now();
  signal.waitChanged(signal.generation(), start + 30ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_EQ(signal.generation(), 0u);
}

} // namespace
} // namespace kiln::rt
