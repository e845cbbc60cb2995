// Every real chat template in the shared assets, over a set of conversations, rendered exactly as
// transformers' apply_chat_template(tokenize=False) renders them
// (tests/data/chat_templates/render_goldens.json, from tools/goldens/make_chat_template_goldens.py).
#include "tests/runtime/text/chat_template_test_util.h"
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/text/chat_template.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::ordered_json;

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const Json &goldens() {
  static const Json kGoldens = Json::parse(
      readText(std::string(KILN_TEST_DATA_DIR) + "/chat_templates/render_goldens.json"), nullptr,
      false);
  return kGoldens;
}

std::vector<std::string> templateIds() {
  std::vector<std::string> ids;
  if (goldens().is_discarded())
    return {"render_goldens.json missing"};
  for (const Json &t : goldens()["templates"])
    ids.push_back(t["id"].get<std::string>());
  return ids;
}

std::tm fixedNow() { return testing::goldenFixedNow(); }

// The template source as the golden script read it: a .jinja file, or a tokenizer_config field.
Result<std::string> loadTemplate(const std::string &id) {
  std::string path = std::string(KILN_ASSETS_DIR) + "/" + id;
  if (!std::filesystem::exists(path))
    return notFound(path);
  std::string text = readText(path);
  if (id.size() > 6 && id.substr(id.size() - 6) == ".jinja")
    return text;
  return chatTemplateFromTokenizerConfig(text);
}

class ChatTemplateGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGoldenTest, RendersLikeTransformers) {
  ASSERT_FALSE(goldens().is_discarded()) << "render_goldens.json missing or invalid";
  const std::string id = GetParam();
  auto source = loadTemplate(id);
  if (!source.isOk())
    GTEST_SKIP() << "asset not available: " << source.status().toString();
  auto tmpl = ChatTemplate::parse(*source);
  ASSERT_TRUE(tmpl.isOk()) << tmpl.status().toString();
  tmpl->setClock(fixedNow);

  ChatSpecialTokens special;
  for (const Json &t : goldens()["templates"])
    if (t["id"] == id)
      for (auto it = t["special_tokens"].begin(); it != t["special_tokens"].end(); ++it)
        special[it.key()] = it.value().get<std::string>();

  int checked = 0;
  for (const Json &c : goldens()["cases"]) {
    if (c["template"] != id)
      continue;
    const Json &conversation = goldens()["conversations"][c["conversation"].get<std::string>()];
    bool agp = c["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(c["conversation"].get<std::string>() + (agp ? " +generation prompt" : ""));
    Json extra = conversation.contains("extra") ? conversation["extra"] : Json();
    auto rendered = tmpl->renderChat(conversation["messages"], agp, special, extra);
    if (c.contains("expected")) {
      ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
      EXPECT_EQ(*rendered, c["expected"].get<std::string>());
    } else {
      ASSERT_FALSE(rendered.isOk()) << "kiln rendered:\n" << *rendered;
      if (c["error"]["kind"] == "raise")
        EXPECT_EQ(rendered.status().message(), c["error"]["message"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_GE(checked, 2 * static_cast<int>(goldens()["conversations"].size()));
}

std::string testName(const ::testing::TestParamInfo<std::string> &info) {
  std::string name;
  for (char c : info.param)
    name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllTemplates, ChatTemplateGoldenTest, ::testing::ValuesIn(templateIds()),
                         testName);

} // namespace
} // namespace kiln::rt
