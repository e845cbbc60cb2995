// `kiln verify` through the binary: the diff of a regression shows the golden's ids, exit codes
// tell a regression (1) from an error (2), and the half-precision transformers goldens of
// tests/data/golden verify artifacts compiled in their dtype (and fail another model's).
#include "tests/tools/kiln/kiln_command.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kiln::tools {
namespace {

const std::string kGoldenDir = std::string(KILN_TEST_DATA_DIR) + "/golden/";

// `model` compiled with `flags` once per test process.
std::string compiled(const std::string &model, const std::string &flags) {
  static const TempDir temp;
  const std::string out = temp.path + "/" + model + std::to_string(std::hash<std::string>{}(flags));
  if (!std::filesystem::exists(out)) {
    CommandResult r = runCommand(kKiln + " compile " + KILN_TEST_DATA_DIR + "/models/" + model +
                                     " -o " + out + " " + flags + " --quiet",
                                 true);
    EXPECT_EQ(r.exitCode, 0) << r.output;
  }
  return out;
}

std::string idsWindow(const std::vector<int32_t> &ids, size_t at) {
  size_t from = at >= 3 ? at - 3 : 0, to = std::min(ids.size(), at + 4);
  std::string out = from > 0 ? "[... " : "[";
  for (size_t i = from; i < to; ++i)
    out += (i > from ? " " : "") + std::string(i == at ? ">" : "") + std::to_string(ids[i]) +
           (i == at ? "<" : "");
  return out + (to < ids.size() ? " ...]" : "]");
}

// Issue 18: after the first differing id the "expected" row printed the artifact's own ids.
TEST(VerifyCommand, ExpectedRowIsTheGoldensAtEveryDifference) {
  const TempDir temp;
  const std::string golden = temp.path + "/g.json";
  CommandResult r = runCommand(kKiln + " verify " + fixtureArtifact() + " --write " + golden +
                                   " --prompt-ids \"1 17 300 42\" --max-tokens 12",
                               true);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  Result<std::string> text = readFile(golden);
  ASSERT_TRUE(text.isOk());
  nlohmann::json json = nlohmann::json::parse(*text);
  nlohmann::json &c = json["cases"][0];
  c.erase("logits"); // ids only: the report is the ids diff
  std::vector<int32_t> expected = c["expected_ids"].get<std::vector<int32_t>>();
  const int32_t first = expected[4];
  expected[4] = (expected[4] + 1) % 512; // the artifact still predicts `first` here
  expected[6] = (expected[6] + 7) % 512;
  c["expected_ids"] = expected;
  ASSERT_TRUE(writeFileAtomic(golden, json.dump()).isOk());

  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + golden, true);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("  first differing id at output index 4: expected " +
                          std::to_string(expected[4]) + ", got " + std::to_string(first) + "\n"),
            std::string::npos)
      << r.output;
  const std::string expectedLine = "  expected " + idsWindow(expected, 4) + "\n";
  EXPECT_NE(r.output.find(expectedLine), std::string::npos) << "want " << expectedLine << "in\n"
                                                            << r.output;
  EXPECT_NE(r.output.find("verify: FAIL (1 of 1 cases differ)\n"), std::string::npos) << r.output;
}

TEST(VerifyCommand, ErrorsExitTwoRegressionsOne) {
  const TempDir temp;
  const std::string absent = temp.path + "/absent.json";
  CommandResult r =
      runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + absent, true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(r.output,
            "kiln verify: error: cannot open '" + absent + "': No such file or directory\n");

  const std::string garbage = temp.path + "/garbage.json";
  ASSERT_TRUE(writeFileAtomic(garbage, "not json").isOk());
  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + garbage, true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(r.output, "kiln verify: error: golden '" + garbage + "' is not a JSON object\n");

  // A golden whose logits file is gone.
  const std::string orphan = temp.path + "/orphan.json";
  Result<std::string> text = readFile(kGoldenDir + "tiny-llama.json");
  ASSERT_TRUE(text.isOk());
  ASSERT_TRUE(writeFileAtomic(orphan, *text).isOk());
  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + orphan, true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(r.output, "kiln verify: error: cannot open '" + temp.path +
                          "/tiny-llama.case0.logits.f32': No such file or directory\n");

  r = runCommand(
      kKiln + " verify " + temp.path + "/no.kiln --golden " + kGoldenDir + "tiny-llama.json", true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(r.output, "kiln verify: error: cannot open '" + temp.path +
                          "/no.kiln/plan.kiln': No such file or directory\n");

  // A case longer than the artifact's max_seq_len (160) is an error, not a regression.
  const std::string longer = temp.path + "/long.json";
  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --write " + longer +
                     " --prompt-ids 1 --max-tokens 2",
                 true);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  text = readFile(longer);
  nlohmann::json json = nlohmann::json::parse(*text);
  json["cases"][0]["prompt_ids"] = std::vector<int32_t>(170, 5);
  json["cases"][0].erase("logits");
  ASSERT_TRUE(writeFileAtomic(longer, json.dump()).isOk());
  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + longer, true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("the artifact's compiled max_seq_len is 160"), std::string::npos)
      << r.output;

  for (const std::string &flags : {std::string("--golden a.json --write b.json"), std::string(""),
                                   "--golden " + kGoldenDir + "tiny-llama.json --tolerance -1"}) {
    r = runCommand(kKiln + " verify " + fixtureArtifact() + " " + flags, true);
    EXPECT_EQ(r.exitCode, 2) << flags << ": " << r.output;
  }

  r = runCommand(kKiln + " verify --help", false);
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_NE(r.output.find("Exit codes: 0 pass; 1 regression (an id or a logit differs); 2 error"),
            std::string::npos)
      << r.output;
}

// transformers' bf16 / fp16 goldens (make_half_goldens.py: raw half logits, no tolerance field)
// against artifacts compiled in that dtype; the bf16 golden of another model fails.
TEST(VerifyCommand, HalfPrecisionTransformersGoldens) {
  CommandResult r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + kGoldenDir +
                                   "tiny-llama.bf16.json",
                               true);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("verify: tolerance 0.35 (the golden has no tolerance; the bf16 default "
                          "of transformers goldens; --tolerance overrides)\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("verify: PASS (3 cases)\n"), std::string::npos) << r.output;

  const std::string fp16 = compiled("tiny-llama", "--dtype fp16 --max-seq-len 64");
  r = runCommand(kKiln + " verify " + fp16 + " --golden " + kGoldenDir + "tiny-llama.fp16.json",
                 true);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("verify: PASS (3 cases)\n"), std::string::npos) << r.output;

  // Another model with the same vocabulary: a regression, every case.
  const std::string tied = compiled("tiny-llama-tied", "--dtype bf16 --max-seq-len 64");
  r = runCommand(kKiln + " verify " + tied + " --golden " + kGoldenDir + "tiny-llama.bf16.json",
                 true);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("verify: FAIL (3 of 3 cases differ)\n"), std::string::npos) << r.output;

  // --tolerance replaces the default: the same bf16 artifact fails at fp32's 1e-4.
  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + kGoldenDir +
                     "tiny-llama.bf16.json --tolerance 1e-4",
                 true);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_EQ(r.output.find("verify: tolerance"), std::string::npos) << r.output;
}

// Embedding goldens (tests/data/golden/*.embed.json, transformers' hidden states and
// sentence-transformers' pooled vectors): tiny-bert's single texts and its text pair (token type 1
// on the second text) pass, tiny-bart's decoder states pass; --tolerance 0 makes a regression (exit
// 1); another model's pooling or a generating artifact is an error (exit 2).
TEST(VerifyCommand, EmbeddingGoldens) {
  const std::string bert = compiled("tiny-bert", "--max-seq-len 128 --max-batch 8");
  CommandResult r = runCommand(
      kKiln + " verify " + bert + " --golden " + kGoldenDir + "tiny-bert.embed.json", true);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("verify: PASS (6 cases)\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("case sentence pair (text, text_pair) (18 tokens): hidden max |diff| "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("case short (11 tokens): hidden max |diff| "), std::string::npos)
      << r.output;

  const std::string bart = compiled("tiny-bart", "--max-seq-len 128 --max-batch 8");
  r = runCommand(kKiln + " verify " + bart + " --golden " + kGoldenDir + "tiny-bart.embed.json",
                 true);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("verify: PASS (6 cases)\n"), std::string::npos) << r.output;

  r = runCommand(kKiln + " verify " + bert + " --golden " + kGoldenDir +
                     "tiny-bert.embed.json --tolerance 0",
                 true);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("verify: FAIL (6 of 6 cases differ)\n"), std::string::npos) << r.output;

  const std::string xlmr = compiled("tiny-xlm-roberta", "--max-seq-len 128 --max-batch 8");
  r = runCommand(kKiln + " verify " + xlmr + " --golden " + kGoldenDir + "tiny-bert.embed.json",
                 true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("the golden is for another model"), std::string::npos) << r.output;

  r = runCommand(kKiln + " verify " + fixtureArtifact() + " --golden " + kGoldenDir +
                     "tiny-bert.embed.json",
                 true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("generates text"), std::string::npos) << r.output;

  // A hidden-state file must sit beside the golden and match its hidden_sha256.
  const TempDir temp;
  Result<std::string> text = readFile(kGoldenDir + "tiny-bert.embed.json");
  ASSERT_TRUE(text.isOk());
  nlohmann::json golden = nlohmann::json::parse(*text);
  for (nlohmann::json &c : golden["cases"]) {
    const std::string file = c["hidden_file"];
    Result<std::string> bytes = readFile(kGoldenDir + file);
    ASSERT_TRUE(bytes.isOk());
    ASSERT_TRUE(writeFileAtomic(temp.path + "/" + file, *bytes).isOk());
  }
  golden["cases"][2]["hidden_sha256"] = std::string(64, '0');
  ASSERT_TRUE(writeFileAtomic(temp.path + "/g.embed.json", golden.dump()).isOk());
  r = runCommand(kKiln + " verify " + bert + " --golden " + temp.path + "/g.embed.json", true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("does not match the golden's hidden_sha256"), std::string::npos)
      << r.output;
  golden["cases"][2]["hidden_file"] = "../" + golden["cases"][2]["hidden_file"].get<std::string>();
  ASSERT_TRUE(writeFileAtomic(temp.path + "/g.embed.json", golden.dump()).isOk());
  r = runCommand(kKiln + " verify " + bert + " --golden " + temp.path + "/g.embed.json", true);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("must be a file name beside the golden"), std::string::npos) << r.output;
}

} // namespace
} // namespace kiln::tools
