// Randomized runs of scheduler + KV cache manager with a simulated model: random arrivals, prompt
// and output lengths, shared prefixes, parallel-sample forks and cancellations over a tiny pool.
// Every step is checked against the invariants; at the end no block may be left referenced. With
// KV cache groups a sequence's sliding-window table gives blocks back as it grows: 64 tokens then
// fit in pools that its full tables (16 blocks each) would overflow: 30 blocks for a full and a
// window-8 group, 10 for one window-8 group.
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>

namespace kiln::rt {
namespace {

struct RandomRunParams {
  uint32_t seed;
  bool chunked;
  bool prefix;
  std::vector<int32_t> windows = {}; // KvCacheConfig::groupWindows
  int32_t blocks = 24;               // the pool
};

class SchedulerRandomTest : public ::testing::TestWithParam<RandomRunParams> {};

constexpr int32_t kBlockSize = 4;
constexpr int32_t kMaxSeqLen = 64;

struct Live {
  int32_t target = 0; // stop after this many generated tokens
  int32_t forks = 0;  // parallel samples to fork at the first token
  int32_t waited = 0; // consecutive steps without being scheduled
};

void checkStep(const Scheduler &sched, const KvCacheManager &kv, const SchedulerOutput &out) {
  const SchedulerConfig &c = sched.config();
  int32_t sum = 0;
  std::set<int32_t> written;
  for (const ScheduledChunk &chunk : out.chunks) {
    sum += chunk.numTokens;
    const Sequence *seq = sched.find(chunk.id);
    ASSERT_NE(seq, nullptr);
    ASSERT_TRUE(seq->running);
    EXPECT_EQ(chunk.startPosition, seq->numComputed);
    EXPECT_GE(chunk.numTokens, 1);
    EXPECT_EQ(chunk.wantsLogits, chunk.startPosition + chunk.numTokens == seq->numTokens());
    const int32_t end = chunk.startPosition + chunk.numTokens;
    for (int32_t g = 0; g < kv.numGroups(); ++g) {
      const std::vector<int32_t> &table = kv.blockTable(chunk.id, g);
      EXPECT_EQ(static_cast<int32_t>(table.size()), (end + kBlockSize - 1) / kBlockSize);
      // Every block the step reads is held; only those before a window may be given back.
      const int32_t window = kv.config().groupWindows.empty() ? 0 : kv.config().groupWindows[g];
      const int32_t firstRead = firstBlockInWindow(window, chunk.startPosition, kBlockSize);
      for (int32_t b = firstRead; b < static_cast<int32_t>(table.size()); ++b)
        EXPECT_NE(table[b], kNoKvBlock) << "seq " << chunk.id << " group " << g << " block " << b;
      // Blocks about to be written are private: nothing shared is ever overwritten.
      for (int32_t b = chunk.startPosition / kBlockSize; b < static_cast<int32_t>(table.size());
           ++b) {
        EXPECT_EQ(kv.pool().refCount(table[b]), 1) << "seq " << chunk.id << " block " << table[b];
        EXPECT_TRUE(written.insert(table[b]).second) << "two sequences write block " << table[b];
      }
    }
  }
  EXPECT_EQ(sum, out.numTokens);
  EXPECT_LE(out.numTokens, c.maxTokensPerStep);
  EXPECT_LE(static_cast<int32_t>(out.chunks.size()), c.maxBatch);
  EXPECT_LE(sched.numRunning(), c.maxBatch);
}

// Reference counts equal the number of block tables holding each block; waiting sequences hold
// none. This is the no-leak / never-negative invariant, checked every step.
void checkRefCounts(const Scheduler &sched, const KvCacheManager &kv) {
  std::map<int32_t, int32_t> holders;
  for (SeqId id : sched.runningQueue())
    for (const std::vector<int32_t> &table : kv.blockTables(id))
      for (int32_t b : table)
        if (b != kNoKvBlock)
          holders[b]++;
  for (SeqId id : sched.waitingQueue())
    EXPECT_TRUE(kv.blockTables(id).empty() || kv.blockTable(id).empty())
        << "waiting seq " << id << " holds blocks";
  for (int32_t b = 0; b < kv.pool().numBlocks(); ++b) {
    const int32_t expected = holders.count(b) ? holders[b] : 0;
    ASSERT_EQ(kv.pool().refCount(b), expected) << "block " << b;
  }
  EXPECT_EQ(kv.pool().numUsedBlocks(), static_cast<int32_t>(holders.size()));
}

TEST_P(SchedulerRandomTest, InvariantsHoldAndEverythingFinishes) {
  const RandomRunParams p = GetParam();
  std::mt19937 rng(p.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto kv = std::make_unique<KvCacheManager>(
      std::move(KvCacheManager::create({p.blocks, kBlockSize, 64, p.prefix, p.windows})).value());
  SchedulerConfig config{4, p.chunked ? 12 : kMaxSeqLen, kMaxSeqLen, p.chunked};
  Scheduler sched = std::move(Scheduler::create(config, kv.get())).value();
  const std::vector<std::vector<int32_t>> prefixes = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                                                      {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30}};

  std::map<SeqId, Live> live;
  std::set<SeqId> forked;
  SeqId lastFirstAdmission = 0;
  SeqId nextId = 1;
  uint64_t arrival = 0;
  int32_t maxWait = 0, finished = 0, cancelled = 0, preemptions = 0;
  // Steps the same sequence has been at the head of the waiting queue: it waits only for running
  // sequences (each bounded by max_seq_len) to free blocks, never for later arrivals.
  SeqId head = -1;
  int32_t headWait = 0, maxHeadWait = 0;
  const int kArrivalSteps = 5000, kMaxSteps = 20000;
  int step = 0;
  for (; step < kMaxSteps && (step < kArrivalSteps || sched.hasWork()); ++step) {
    if (step < kArrivalSteps && uniform(0, 99) < 10) {
      std::vector<int32_t> prompt;
      if (uniform(0, 1))
        prompt = prefixes[uniform(0, 1)];
      for (int n = uniform(1, 30); n > 0; --n)
        prompt.push_back(uniform(0, 99));
      const SeqId id = nextId++;
      ASSERT_TRUE(sched.addSequence(id, prompt, arrival++).isOk());
      live[id] = {uniform(1, 40), uniform(0, 9) < 2 ? uniform(1, 2) : 0, 0};
    }
    if (!live.empty() && uniform(0, 99) < 2) {
      auto it = std::next(live.begin(), uniform(0, static_cast<int>(live.size()) - 1));
      ASSERT_TRUE(sched.finishSequence(it->first).isOk());
      live.erase(it);
      ++cancelled;
    }
    SchedulerOutput out = sched.schedule();
    EXPECT_TRUE(out.failed.empty());
    preemptions += static_cast<int32_t>(out.preempted.size());
    checkStep(sched, *kv, out);
    checkRefCounts(sched, *kv);
    ASSERT_TRUE(sched.onStepComputed(out).isOk());
    std::set<SeqId> scheduled;
    for (const ScheduledChunk &c : out.chunks) {
      scheduled.insert(c.id);
      // FCFS: first admissions happen in arrival order (ids are arrival order).
      if (c.startPosition == 0 && !forked.count(c.id) && c.id > lastFirstAdmission) {
        for (SeqId w : sched.waitingQueue())
          EXPECT_TRUE(w > c.id || forked.count(w) || sched.find(w)->admittedOnce)
              << "seq " << c.id << " admitted before earlier arrival " << w;
        lastFirstAdmission = c.id;
      }
    }
    const SeqId newHead = sched.waitingQueue().empty() ? -1 : sched.waitingQueue().front();
    headWait = newHead >= 0 && newHead == head ? headWait + 1 : 0;
    head = newHead;
    maxHeadWait = std::max(maxHeadWait, headWait);
    for (auto &[id, l] : live) {
      l.waited = scheduled.count(id) ? 0 : l.waited + 1;
      maxWait = std::max(maxWait, l.waited);
    }
    for (const ScheduledChunk &c : out.chunks) {
      if (!c.wantsLogits)
        continue;
      const Sequence *seq = sched.find(c.id);
      Live &l = live.at(c.id);
      const int32_t token = static_cast<int32_t>((c.id * 31 + seq->numTokens() * 7) % 100);
      if (l.forks > 0 && seq->numTokens() == seq->promptLen) {
        for (int f = 0; f < l.forks; ++f) {
          const SeqId child = nextId++;
          ASSERT_TRUE(sched.forkSequence(c.id, child, token + f + 1).isOk());
          live[child] = {uniform(1, 40), 0, 0};
          forked.insert(child);
        }
        live.at(c.id).forks = 0;
      }
      ASSERT_TRUE(sched.appendToken(c.id, token).isOk());
      seq = sched.find(c.id);
      const int32_t generated = seq->numTokens() - seq->promptLen;
      if (generated >= live.at(c.id).target || seq->numTokens() >= kMaxSeqLen) {
        ASSERT_TRUE(sched.finishSequence(c.id).isOk());
        live.erase(c.id);
        ++finished;
      }
    }
    checkRefCounts(sched, *kv);
    if (HasFatalFailure())
      return;
  }
  EXPECT_LT(step, kMaxSteps) << "the run did not drain";
  EXPECT_TRUE(live.empty());
  EXPECT_FALSE(sched.hasWork());
  EXPECT_EQ(kv->numSequences(), 0);
  EXPECT_EQ(kv->pool().numFreeBlocks(), p.blocks) << "blocks leaked";
  EXPECT_GT(finished, 400);
  EXPECT_GT(cancelled, 20);
  EXPECT_GT(preemptions, 0) << "the pool should be tight enough to preempt";
  EXPECT_LT(maxHeadWait, 2 * kMaxSeqLen);
  EXPECT_LT(maxWait, 1000);
  RecordProperty("max_wait_steps", maxWait);
  RecordProperty("max_head_wait_steps", maxHeadWait);
  RecordProperty("preemptions", preemptions);
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, SchedulerRandomTest,
    ::testing::Values(RandomRunParams{1, true, true}, RandomRunParams{2, true, false},
                      RandomRunParams{3, false, true}, RandomRunParams{4, false, false},
                      RandomRunParams{5, true, true}, RandomRunParams{6, true, true, {0, 8}, 30},
                      RandomRunParams{7, true, false, {0, 8}, 30},
                      RandomRunParams{8, true, true, {8}, 10}));

} // namespace
} // namespace kiln::rt
