// StopStringMatcher: stop strings across delta boundaries, hold-back of possible prefixes, the
// stop string itself never emitted, which stop string matched.
#include "runtime/text/stop_strings.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

struct StopRun {
  std::vector<std::string> emitted; // per push, then finish (when not stopped)
  std::string text;
  int matched = -1;
};

StopRun feed(std::vector<std::string> stops, const std::vector<std::string> &deltas) {
  StopStringMatcher m(std::move(stops));
  StopRun r;
  for (const auto &d : deltas) {
    StopStringUpdate u = m.push(d);
    r.emitted.push_back(u.text);
    r.text += u.text;
    if (u.matched >= 0)
      r.matched = u.matched;
  }
  if (!m.stopped()) {
    r.emitted.push_back(m.finish());
    r.text += r.emitted.back();
  }
  EXPECT_EQ(m.matchedIndex(), r.matched);
  return r;
}

TEST(StopStringsTest, NoStopStringsPassesEverythingThrough) {
  StopRun r = feed({}, {"Hello", " world"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"Hello", " world", ""}));
  EXPECT_EQ(r.matched, -1);
}

TEST(StopStringsTest, MatchInsideOneDelta) {
  StopRun r = feed({"STOP"}, {"abc STOP def"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"abc "}));
  EXPECT_EQ(r.matched, 0);
}

TEST(StopStringsTest, MatchAcrossThreeDeltasHoldsBackThePrefix) {
  StopRun r = feed({"</answer>"}, {"The result is 4</", "ans", "wer> trailing"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"The result is 4", "", ""}));
  EXPECT_EQ(r.text, "The result is 4");
  EXPECT_EQ(r.matched, 0);
}

TEST(StopStringsTest, FalseStartIsReleasedWhenResolved) {
  StopRun r = feed({"###"}, {"a#", "#b", " c##"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"a", "##b", " c", "##"}));
  EXPECT_EQ(r.text, "a##b c##");
  EXPECT_EQ(r.matched, -1);
}

TEST(StopStringsTest, ReportsWhichStopStringMatched) {
  StopRun r = feed({"User:", "\n\n", "<|end|>"}, {"Sure.\n", "\nUser: hi"});
  EXPECT_EQ(r.text, "Sure.");
  EXPECT_EQ(r.matched, 1);
}

TEST(StopStringsTest, EarliestCompletedStopWins) {
  // "bc" completes at the same delta before "abcd" could; the stream stops at the earliest end.
  StopRun r = feed({"abcd", "bc"}, {"xab", "c", "d"});
  EXPECT_EQ(r.text, "xa");
  EXPECT_EQ(r.matched, 1);
  // Same end: the one starting first (longer) wins.
  StopRun s = feed({"c", "abc"}, {"xab", "c"});
  EXPECT_EQ(s.text, "x");
  EXPECT_EQ(s.matched, 1);
}

TEST(StopStringsTest, MultiByteStopStringSplitInsideCharacters) {
  // Deltas are whole characters; the stop string spans two of them across deltas.
  StopRun r = feed({"。\n"}, {"你好", "。", "\n再见"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"你好", "", ""}));
  EXPECT_EQ(r.text, "你好");
  EXPECT_EQ(r.matched, 0);
}

TEST(StopStringsTest, NothingAfterTheStop) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.push("xEN").text, "x");
  StopStringUpdate u = m.push("D more");
  EXPECT_EQ(u.text, "");
  EXPECT_EQ(u.matched, 0);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matchedString(), "END");
  EXPECT_EQ(m.push("again END").text, "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopStringsTest, HeldPrefixReleasedAtFinish) {
  StopRun r = feed({"<|im_end|>"}, {"done <|im"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"done ", "<|im"}));
  EXPECT_EQ(r.matched, -1);
}

TEST(StopStringsTest, EmptyStopStringsAreIgnoredAndIndicesKept) {
  StopRun r = feed({"", "x"}, {"abxcd"});
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.matched, 1);
}

TEST(StopStringsTest, OverlappingPrefixesHoldTheLongestCandidate) {
  // After "xaa" both "a" and "aa" could start "aab": hold "aa". The full text "xaaaab" stops
  // at the "aab" that starts at offset 3.
  StopRun r = feed({"aab"}, {"xaa", "aab"});
  EXPECT_EQ(r.emitted, (std::vector<std::string>{"x", "aa"}));
  EXPECT_EQ(r.text, "xaa");
  EXPECT_EQ(r.matched, 0);
}

} // namespace
} // namespace kiln::rt
