#include "runtime/serve/sse.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

TEST(SseTest, FramesEventsAndLines) {
  EXPECT_EQ(frameEvent(Framing::kSse, R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(frameEvent(Framing::kJsonLines, R"({"a":1})"), "{\"a\":1}\n");
  EXPECT_EQ(doneMarker(Framing::kSse), "data: [DONE]\n\n");
  EXPECT_EQ(doneMarker(Framing::kJsonLines), "");
}

TEST(SseTest, ParsesWhatItFrames) {
  std::string body = frameEvent(Framing::kSse, "{\"x\":1}") + ": keep-alive\n\n" +
                     "data:{\"y\":2}\r\n\r\n" + doneMarker(Framing::kSse);
  std::vector<std::string> events;
  std::string error;
  ASSERT_TRUE(parseSseEvents(body, events, error)) << error;
  EXPECT_EQ(events, (std::vector<std::string>{"{\"x\":1}", "{\"y\":2}", "[DONE]"}));
}

TEST(SseTest, RejectsMalformedStreams) {
  std::vector<std::string> events;
  std::string error;
  EXPECT_FALSE(parseSseEvents("data: {}\n", events, error)); // unterminated event
  EXPECT_NE(error.find("blank line"), std::string::npos);
  EXPECT_FALSE(parseSseEvents("data: {}", events, error));
  EXPECT_NE(error.find("newline"), std::string::npos);
  EXPECT_FALSE(parseSseEvents("event: x\n\n", events, error));
  EXPECT_NE(error.find("line 1"), std::string::npos);
  std::vector<std::string> lines;
  ASSERT_TRUE(parseJsonLines("{}\n{\"a\":1}\n", lines, error));
  EXPECT_EQ(lines, (std::vector<std::string>{"{}", "{\"a\":1}"}));
  EXPECT_FALSE(parseJsonLines("{}\n\n", lines, error));
  EXPECT_FALSE(parseJsonLines("{}", lines, error));
}

} // namespace
} // namespace kiln::rt::serve
