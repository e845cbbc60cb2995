// The ChatTemplate API around the renderer: apply_chat_template input handling, tokenizer_config
// helpers, key order, the injectable clock, and concurrent rendering of one parsed template.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/text/chat_template.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::ordered_json;

ChatTemplate mustParse(const std::string &source) {
  auto parsed = ChatTemplate::parse(source);
  EXPECT_TRUE(parsed.isOk()) << parsed.status().toString();
  return std::move(parsed).value();
}

const char *kEcho = "{% for m in messages %}[{{ m | tojson }}]{% endfor %}"
                    "|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ bos_token }}";

TEST(ChatTemplateApiTest, RenderChatMirrorsApplyChatTemplate) {
  ChatTemplate tmpl = mustParse(kEcho);
  Json messages = Json::parse(R"([{"role": "user", "content": "hi", "name": null},
                                  {"role": "assistant", "content": "yo", "reasoning": "why"}])");
  auto rendered = tmpl.renderChat(messages, true, {{"bos_token", "<s>"}});
  ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
  EXPECT_EQ(*rendered,
            "[{\"role\": \"user\", \"content\": \"hi\"}]"
            "[{\"thinking\": \"why\", \"role\": \"assistant\", \"content\": \"yo\", "
            "\"reasoning\": \"why\", \"reasoning_content\": \"why\"}]|None|None|True|<s>");
}

TEST(ChatTemplateApiTest, ExtraVariablesReachTheTemplate) {
  ChatTemplate tmpl = mustParse("{{ tools | length }}|{{ date_string }}|{{ eos_token }}");
  Json extra = {{"tools", Json::array({Json{{"name", "f"}}})}, {"date_string", "1 Jan"}};
  auto rendered =
      tmpl.renderChat(Json::array({Json{{"role", "user"}, {"content", "x"}}}), false,
                      {{"eos_token", "</s>"}}, extra);
  ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
  EXPECT_EQ(*rendered, "1|1 Jan|</s>");
}

TEST(ChatTemplateApiTest, RenderChatRejectsBadInput) {
  ChatTemplate tmpl = mustParse("x");
  EXPECT_EQ(tmpl.renderChat(Json::array(), false, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tmpl.renderChat(Json::array({1}), false, {}).status().message(),
            "chat message 0 is not a JSON object");
  EXPECT_FALSE(tmpl.renderChat(Json::object(), false, {}).isOk());
  EXPECT_FALSE(tmpl.render(Json::array()).isOk());
}

TEST(ChatTemplateApiTest, OrderedJsonKeepsKeyOrderPlainJsonSortsIt) {
  ChatTemplate tmpl = mustParse("{{ tool | tojson }}");
  const char *text = R"({"tool": {"name": "f", "description": "d", "arguments": {}}})";
  auto ordered = tmpl.render(Json::parse(text));
  auto sorted = tmpl.render(nlohmann::json::parse(text));
  ASSERT_TRUE(ordered.isOk() && sorted.isOk());
  EXPECT_EQ(*ordered, R"({"name": "f", "description": "d", "arguments": {}})");
  EXPECT_EQ(*sorted, R"({"arguments": {}, "description": "d", "name": "f"})");
}

TEST(ChatTemplateApiTest, StrftimeNowReadsTheInjectedClock) {
  ChatTemplate tmpl = mustParse("{{ strftime_now('%d %b %Y, %A %H:%M') }}");
  tmpl.setClock([] {
    std::tm t{};
    t.tm_year = 125;
    t.tm_mon = 0;
    t.tm_mday = 2;
    t.tm_hour = 7;
    t.tm_min = 5;
    t.tm_wday = 4;
    return t;
  });
  auto rendered = tmpl.render(Json::object());
  ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
  EXPECT_EQ(*rendered, "02 Jan 2025, Thursday 07:05");
}

TEST(ChatTemplateApiTest, TokenizerConfigTemplateAndSpecialTokens) {
  const char *plain = R"({"chat_template": "{{ bos_token }}", "bos_token": "<s>",
                          "eos_token": {"__type": "AddedToken", "content": "</s>"},
                          "pad_token": null})";
  auto source = chatTemplateFromTokenizerConfig(plain);
  ASSERT_TRUE(source.isOk());
  EXPECT_EQ(*source, "{{ bos_token }}");
  auto tokens = specialTokensFromTokenizerConfig(plain);
  ASSERT_TRUE(tokens.isOk());
  EXPECT_EQ(*tokens, (ChatSpecialTokens{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));

  const char *named = R"({"chat_template": [{"name": "default", "template": "A"},
                                            {"name": "tool_use", "template": "B"}]})";
  EXPECT_EQ(*chatTemplateFromTokenizerConfig(named), "A");
  EXPECT_EQ(*chatTemplateFromTokenizerConfig(named, "tool_use"), "B");
  EXPECT_EQ(chatTemplateFromTokenizerConfig(named, "rag").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(chatTemplateFromTokenizerConfig("{}").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(chatTemplateFromTokenizerConfig("not json").status().code(),
            StatusCode::kInvalidArgument);
}

// The golden script read special tokens from the same configs; kiln's reader must agree.
TEST(ChatTemplateApiTest, SpecialTokensMatchTheGoldenScript) {
  std::ifstream goldenFile(std::string(KILN_TEST_DATA_DIR) +
                           "/chat_templates/render_goldens.json");
  std::stringstream goldenText;
  goldenText << goldenFile.rdbuf();
  Json goldens = Json::parse(goldenText.str(), nullptr, false);
  ASSERT_FALSE(goldens.is_discarded());
  int compared = 0;
  for (const Json &t : goldens["templates"]) {
    std::string id = t["id"].get<std::string>();
    std::string path = std::string(KILN_ASSETS_DIR) + "/" + id;
    if (id.find("tokenizer_config") == std::string::npos || !std::filesystem::exists(path))
      continue;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    auto tokens = specialTokensFromTokenizerConfig(text.str());
    ASSERT_TRUE(tokens.isOk()) << id;
    ChatSpecialTokens expected;
    for (auto it = t["special_tokens"].begin(); it != t["special_tokens"].end(); ++it)
      expected[it.key()] = it.value().get<std::string>();
    EXPECT_EQ(*tokens, expected) << id;
    ++compared;
  }
  if (compared == 0)
    GTEST_SKIP() << "no tokenizer_config.json assets under " << KILN_ASSETS_DIR;
}

TEST(ChatTemplateApiTest, OneParsedTemplateRendersConcurrently) {
  ChatTemplate tmpl = mustParse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content | upper }}{% endfor %}{{ ns.n }}");
  Json messages = Json::array();
  for (int i = 0; i < 50; ++i)
    messages.push_back(Json{{"role", "user"}, {"content", "m" + std::to_string(i)}});
  auto expected = tmpl.renderChat(messages, false, {});
  ASSERT_TRUE(expected.isOk());
  std::vector<std::string> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) {
        auto r = tmpl.renderChat(messages, false, {});
        results[t] = r.isOk() ? *r : r.status().toString();
      }
    });
  for (auto &thread : threads)
    thread.join();
  for (const auto &r : results)
    EXPECT_EQ(r, *expected);
}

} // namespace
} // namespace kiln::rt
