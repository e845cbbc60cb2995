// The expression language, statements and whitespace rules, checked case by case against jinja2 as
// transformers configures it (tests/data/chat_templates/expression_goldens.json, made by
// tools/goldens/make_chat_template_goldens.py).
#include "tests/runtime/text/chat_template_test_util.h"
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/text/chat_template.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::ordered_json;

std::tm fixedNow() { return testing::goldenFixedNow(); }

Json loadGoldens() {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/chat_templates/expression_goldens.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Json::parse(buffer.str(), nullptr, false);
}

TEST(JinjaExpressionTest, GoldensRecordTheirVersions) {
  Json goldens = loadGoldens();
  ASSERT_FALSE(goldens.is_discarded()) << "expression_goldens.json missing or invalid";
  EXPECT_TRUE(goldens["versions"].contains("jinja2"));
  EXPECT_GE(goldens["cases"].size(), 100u);
}

TEST(JinjaExpressionTest, MatchesJinja2) {
  Json goldens = loadGoldens();
  ASSERT_FALSE(goldens.is_discarded());
  int checked = 0;
  for (const Json &c : goldens["cases"]) {
    std::string source = c["template"].get<std::string>();
    SCOPED_TRACE("template: " + source);
    auto parsed = ChatTemplate::parse(source);
    if (c.contains("expected")) {
      ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
      parsed->setClock(fixedNow);
      auto rendered = parsed->render(c["context"]);
      ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
      EXPECT_EQ(*rendered, c["expected"].get<std::string>());
    } else {
      const Json &error = c["error"];
      ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
      auto rendered = parsed->render(c["context"]);
      ASSERT_FALSE(rendered.isOk()) << "rendered " << *rendered << ", jinja2 raised "
                                    << error["type"].get<std::string>();
      if (error["kind"] == "raise")
        EXPECT_EQ(rendered.status().message(), error["message"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(goldens["cases"].size()));
}

} // namespace
} // namespace kiln::rt
