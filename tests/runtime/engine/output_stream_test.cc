// OutputStream and the OutputSignal shared by several streams: a reader waiting on the signal
// wakes for a push or close on any of them, and a push between reading the generation and
// waiting is never lost.
#include "runtime/engine/output_stream.h"

#include <gtest/gtest.h>

#include <functional>
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
  // Already changed: returns at once, long before a far deadline (a failure guard only).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  signal->waitChanged(0, deadline);
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
}

// Blocks until a reader is asleep inside signal.waitChanged (see OutputSignal::waiting); fails
// the test if none gets there within a generous guard.
void waitUntilAReaderSleeps(const OutputSignal &signal) {
  auto guard = std::chrono::steady_clock::now() + 30s;
  while (signal.waiting() == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), guard) << "the reader never started waiting";
    std::this_thread::sleep_for(1ms);
  }
}

// A reader already asleep in waitChanged wakes for a push (or close) on another stream sharing
// the signal. The push happens only once the reader is known to be inside the wait, so the
// change cannot be seen by the wait's first check: only the notification can end the wait
// before its deadline. Without it (changed_.notify_all() or signal->notify() removed in
// runtime/engine/output_stream.cc) the reader sleeps to the deadline and the test fails.
void expectAWaiterWakesFor(const std::function<void(OutputStream &)> &change) {
  auto signal = std::make_shared<OutputSignal>();
  OutputStream watched, changed;
  watched.setSignal(signal);
  changed.setSignal(signal);
  const uint64_t seen = signal->generation();
  const auto deadline = std::chrono::steady_clock::now() + 30s; // only a failure guard
  bool wokeBeforeDeadline = false;
  std::thread reader([&] {
    signal->waitChanged(seen, deadline);
    wokeBeforeDeadline = std::chrono::steady_clock::now() < deadline;
  });
  waitUntilAReaderSleeps(*signal);
  change(changed);
  reader.join();
  EXPECT_TRUE(wokeBeforeDeadline) << "the reader slept until its deadline: the wake-up was lost";
  EXPECT_EQ(signal->generation(), seen + 1);
  EXPECT_EQ(signal->waiting(), 0);
}

TEST(OutputSignalTest, ASleepingReaderWakesForAPushOnAnotherThread) {
  expectAWaiterWakesFor([](OutputStream &stream) { stream.push(outputWithText("late")); });
}

TEST(OutputSignalTest, ASleepingReaderWakesForACloseOnAnotherThread) {
  expectAWaiterWakesFor([](OutputStream &stream) { stream.close(); });
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
