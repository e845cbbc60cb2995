// `kiln compile --kv-dtype fp8 --kv-calibration FILE` through the binary: kiln calibrates the fp8
// cache's scales on the prompts itself (tools/kiln/kv_calibration.h). On the golden's prompts it
// finds the scales transformers calibrated (tools/goldens/make_kv_dtype_goldens.py), `kiln
// inspect` shows them per layer and `kiln verify` passes the fp8-scaled golden; bad flags and
// prompt files fail naming the flag or the line, leaving no scratch directory behind.
#include "tests/tools/kiln/kiln_command.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace kiln::tools {
namespace {

const std::string kGolden =
    std::string(KILN_TEST_DATA_DIR) + "/golden/tiny-llama-tied.kv-fp8-scaled.json";
const std::string kModel = std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama-tied";

nlohmann::json readJson(const std::string &path) {
  Result<std::string> text = readFile(path);
  EXPECT_TRUE(text.isOk()) << path;
  return text.isOk() ? nlohmann::json::parse(*text) : nlohmann::json();
}

TEST(CompileCommand, KvCalibrationFindsTheGoldensScales) {
  const TempDir temp;
  const nlohmann::json golden = readJson(kGolden);
  std::string prompts = "\n"; // blank lines are skipped
  for (const nlohmann::json &c : golden.at("cases"))
    prompts += c.at("prompt_ids").dump() + "\n";
  ASSERT_TRUE(writeFileAtomic(temp.path + "/prompts.jsonl", prompts).isOk());
  const std::string out = temp.path + "/calibrated.kiln";
  CommandResult r = runCommand(kKiln + " compile " + kModel + " -o " + out +
                                   " --max-seq-len 64 --kv-dtype fp8 --kv-calibration " +
                                   temp.path + "/prompts.jsonl",
                               true);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("calibrate: 28 prompt tokens; per-layer k scales ["), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + ".calibrating"));

  r = runCommand(kKiln + " inspect " + out + " --no-verify-weights", false);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const nlohmann::json layers = nlohmann::json::parse(r.output).at("kv_cache").at("layers");
  const nlohmann::json &scales = golden.at("kv_scales");
  ASSERT_EQ(layers.size() * 2, scales.size());
  for (const nlohmann::json &layer : layers) {
    const std::string name =
        "model.layers." + std::to_string(layer.at("layer").get<int>()) + ".self_attn.";
    const double k = scales.at(name + "k_scale"), v = scales.at(name + "v_scale");
    EXPECT_NEAR(layer.at("k_scale").get<double>(), k, 1e-5 * k) << name;
    EXPECT_NEAR(layer.at("v_scale").get<double>(), v, 1e-5 * v) << name;
  }

  r = runCommand(kKiln + " verify " + out + " --golden " + kGolden, true);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("verify: PASS"), std::string::npos) << r.output;
}

TEST(CompileCommand, KvCalibrationErrorsNameTheFlagOrTheLine) {
  const TempDir temp;
  const std::string out = temp.path + "/never.kiln";
  ASSERT_TRUE(writeFileAtomic(temp.path + "/bad.jsonl", "[1, 2]\n{\"text\": 3}\n").isOk());
  ASSERT_TRUE(writeFileAtomic(temp.path + "/ok.jsonl", "[1, 2]\n").isOk());
  struct Case {
    std::string flags, expected;
    int exitCode; // 2: a bad argument; 1: another error
  };
  const Case cases[] = {
      {"--kv-calibration " + temp.path + "/ok.jsonl",
       "--kv-calibration calibrates an fp8 KV cache: give --kv-dtype fp8", 2},
      {"--kv-dtype fp8 --kv-calibration " + temp.path + "/bad.jsonl",
       temp.path + "/bad.jsonl:2: each line must be a JSON string (a text) or a non-empty array "
                   "of token ids",
       2},
      {"--kv-dtype fp8 --kv-calibration " + temp.path + "/absent.jsonl", "absent.jsonl", 1},
  };
  for (const Case &c : cases) {
    CommandResult r =
        runCommand(kKiln + " compile " + kModel + " -o " + out + " --quiet " + c.flags, true);
    EXPECT_EQ(r.exitCode, c.exitCode) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
    EXPECT_FALSE(std::filesystem::exists(out + ".calibrating"));
  }
}

} // namespace
} // namespace kiln::tools
