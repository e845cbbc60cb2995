// kiln profile's step profiler on the tiny-llama plan on cpu: the decode step it times sits on a
// cache that real prefill steps filled with the sequences' tokens (the step's logits match the
// dense reference), bad shapes fail naming the flag and the limit, and the JSON/table report the
// rates and fractions of a hand-made report exactly. Times are never compared with a threshold.
#include "runtime/service/step_profiler.h"
#include "tests/runtime/exec/tiny_llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace kiln::rt::testing {
namespace {

// The plan is F32 and the reference double: what the executor tests allow for a forward pass.
constexpr double kLogitsTolerance = 1e-4;

class StepProfilerTest : public TinyLlamaOnCpuTest {
protected:
  static void SetUpTestSuite() { setUpTinyLlama("step-profiler"); }

  std::unique_ptr<Executor> executor(int32_t kvBlocks = 0) {
    ExecutorOptions options;
    options.numKvBlocks = kvBlocks;
    auto made = Executor::create(*artifact_, *cpu_, options);
    EXPECT_TRUE(made.isOk()) << made.status().message();
    return made.isOk() ? std::move(made).value() : nullptr;
  }

  Result<ProfileReport> profile(Executor &e, ProfileRequest request) {
    return profileStep(e, *artifact_->plan().kv_cache(), request);
  }

  std::string error(ProfileRequest request, int32_t kvBlocks = 0) {
    auto e = executor(kvBlocks);
    auto r = profile(*e, request);
    return r.isOk() ? "(no error)" : r.status().message();
  }
};

TEST(OpGroupName, DropsTheLayerIndexOnly) {
  EXPECT_EQ(opGroupName("layers.12.mlp.down"), "layers.*.mlp.down");
  EXPECT_EQ(opGroupName("layers.0.attention"), "layers.*.attention");
  EXPECT_EQ(opGroupName("embed"), "embed");
  EXPECT_EQ(opGroupName("layers.x.qkv"), "layers.x.qkv");
  EXPECT_EQ(opGroupName("layers..qkv"), "layers..qkv");
  EXPECT_EQ(opGroupName("layers.3"), "layers.3");
}

TEST_F(StepProfilerTest, DecodeStepRunsOnACacheFilledWithTheSequencesTokens) {
  auto e = executor();
  ProfileRequest request;
  // 4 x 39 cache positions take three fill steps of at most 64 tokens, splitting sequences.
  request.batch = 4;
  request.context = 40;
  request.repeats = 2;
  auto report = profile(*e, request);
  ASSERT_TRUE(report.isOk()) << report.status().message();
  EXPECT_EQ(report->mode, "decode");
  EXPECT_EQ(report->newTokens, 1);
  EXPECT_EQ(report->context, 40);
  EXPECT_EQ(report->ops.size(), e->rank().program()->size());
  ASSERT_EQ(report->stepBatch.sequences.size(), 4u);
  ASSERT_EQ(report->sequenceIds.size(), 4u);
  for (const SequenceStep &s : report->stepBatch.sequences) {
    EXPECT_EQ(s.startPosition, 39);
    EXPECT_EQ(s.tokenIds.size(), 1u);
  }
  auto out = e->execute(report->stepBatch);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  const int32_t vocab = model_->config.vocab;
  for (size_t s = 0; s < 4; ++s) {
    ASSERT_EQ(report->sequenceIds[s].size(), 40u);
    const std::vector<double> expected = referenceLogits(*model_, report->sequenceIds[s]);
    for (int32_t v = 0; v < vocab; ++v)
      ASSERT_NEAR(out->row(int32_t(s))[v], expected[39 * vocab + v], kLogitsTolerance)
          << "sequence " << s << " logit " << v;
  }
}

TEST_F(StepProfilerTest, TotalsAreTheSumOfTheOps) {
  auto e = executor();
  ProfileRequest request;
  request.batch = 2;
  request.prefill = 5;
  request.repeats = 1;
  auto report = profile(*e, request);
  ASSERT_TRUE(report.isOk()) << report.status().message();
  EXPECT_EQ(report->mode, "prefill");
  EXPECT_EQ(report->step.counts.numTokens, 10);
  EXPECT_EQ(report->step.counts.numSeqs, 2);
  OpCost sum;
  for (const OpProfile &op : report->ops) {
    sum.bytesRead += op.cost.bytesRead;
    sum.bytesWritten += op.cost.bytesWritten;
    sum.flops += op.cost.flops;
    sum.weightBytes += op.cost.weightBytes;
  }
  EXPECT_EQ(report->total.bytesRead, sum.bytesRead);
  EXPECT_EQ(report->total.bytesWritten, sum.bytesWritten);
  EXPECT_EQ(report->total.flops, sum.flops);
  EXPECT_EQ(report->total.weightBytes, sum.weightBytes);
  EXPECT_GT(report->total.flops, 0u);
}

TEST_F(StepProfilerTest, BadShapesNameTheFlagAndTheLimit) {
  ProfileRequest r;
  r.batch = 5;
  EXPECT_NE(error(r).find("--batch 5 is outside 1..4"), std::string::npos) << error(r);
  r = {};
  r.context = 65;
  EXPECT_NE(error(r).find("--context 65 is outside 1..64"), std::string::npos) << error(r);
  r = {};
  r.batch = 4;
  r.prefill = 20;
  EXPECT_NE(error(r).find("80 tokens in one step exceeds the compiled --max-tokens-per-step 64"),
            std::string::npos)
      << error(r);
  r = {};
  r.batch = 2;
  r.context = 12; // 3 blocks of 4 each
  EXPECT_NE(error(r, 5).find("need 6 KV blocks; the cache holds 5"), std::string::npos)
      << error(r, 5);
  r = {};
  r.repeats = 0;
  EXPECT_NE(error(r).find("--repeats 0"), std::string::npos) << error(r);
}

ProfileReport handMadeReport() {
  ProfileReport r;
  r.mode = "decode";
  r.batch = 1;
  r.context = 8;
  r.newTokens = 1;
  r.repeats = 3;
  OpCost linear{1000000, 2000, 4000000, 1000000};
  r.ops = {{"layers.0.x", "Linear", "layers.*.x", "gemv", 10.0, linear},
           {"layers.1.x", "Linear", "layers.*.x", "gemv", 30.0, linear},
           {"attn", "Attention", "attn", "", 5.0, OpCost{500, 100, 800, 0}}};
  r.total = {2000500, 4100, 8000800, 2000000};
  r.step.eagerMicros = 46;
  r.step.graphMicros = 40;
  r.step.graphBatch = 1;
  return r;
}

TEST(ProfileReport, JsonGivesRatesAndFractionsOfTheCeilings) {
  const Ceilings ceilings{1e11, 1e12, "test GPU"};
  const nlohmann::ordered_json j = profileJson(handMadeReport(), ceilings);
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_DOUBLE_EQ(j["step"]["us"].get<double>(), 40.0); // the graph's time
  EXPECT_DOUBLE_EQ(j["step"]["sum_of_ops_us"].get<double>(), 45.0);
  EXPECT_DOUBLE_EQ(j["step"]["bytes_per_s"].get<double>(), 2004600 / 40e-6);
  EXPECT_DOUBLE_EQ(j["step"]["hbm_fraction"].get<double>(), 2004600 / 40e-6 / 1e11);
  EXPECT_DOUBLE_EQ(j["step"]["peak_fraction"].get<double>(), 8000800 / 40e-6 / 1e12);
  ASSERT_EQ(j["groups"].size(), 2u);
  EXPECT_EQ(j["groups"][0]["group"], "layers.*.x");
  EXPECT_EQ(j["groups"][0]["impl"], "gemv");
  EXPECT_EQ(j["groups"][1]["impl"], "");
  EXPECT_EQ(j["groups"][0]["ops"], 2);
  EXPECT_DOUBLE_EQ(j["groups"][0]["us"].get<double>(), 40.0);
  EXPECT_EQ(j["groups"][0]["bytes_read"], 2000000u);
  EXPECT_DOUBLE_EQ(j["groups"][0]["hbm_fraction"].get<double>(), 2004000 / 40e-6 / 1e11);
  ASSERT_EQ(j["ops"].size(), 3u);
  EXPECT_EQ(j["ops"][2]["name"], "attn");
  EXPECT_EQ(j["ops"][1]["impl"], "gemv");
  EXPECT_DOUBLE_EQ(j["ops"][2]["flops_per_s"].get<double>(), 800 / 5e-6);
  EXPECT_EQ(j["ceilings"]["device_name"], "test GPU");
}

TEST(ProfileReport, AGroupWhoseOpsRunDifferentlyIsMixed) {
  ProfileReport r = handMadeReport();
  r.ops[1].impl = "cublasLt 2/8";
  const nlohmann::ordered_json j = profileJson(r, Ceilings{});
  EXPECT_EQ(j["groups"][0]["impl"], "mixed");
  EXPECT_EQ(j["ops"][1]["impl"], "cublasLt 2/8");
  const std::string table = profileTable(r, Ceilings{}, 3);
  EXPECT_NE(table.find("Linear mixed"), std::string::npos) << table;
  EXPECT_NE(table.find("Linear cublasLt 2/8"), std::string::npos) << table;
}

TEST(ProfileReport, FractionsAreNullWithoutCeilings) {
  const nlohmann::ordered_json j = profileJson(handMadeReport(), Ceilings{});
  EXPECT_TRUE(j["step"]["hbm_fraction"].is_null());
  EXPECT_TRUE(j["groups"][1]["peak_fraction"].is_null());
}

TEST(ProfileReport, TableListsGroupsSlowestOpsAndBothStepTimes) {
  const std::string table = profileTable(handMadeReport(), Ceilings{1e11, 1e12, "test GPU"}, 1);
  EXPECT_NE(table.find("decode step: batch 1, 1 new token(s) per sequence, context 8"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("layers.*.x"), std::string::npos) << table;
  // Only the slowest op is listed: layers.1.x at 30 us (66.7% of the 45 us of ops).
  EXPECT_NE(table.find("layers.1.x"), std::string::npos) << table;
  EXPECT_EQ(table.find("layers.0.x "), std::string::npos) << table;
  EXPECT_NE(table.find("66.7%"), std::string::npos) << table;
  EXPECT_NE(table.find("step, graph (batch 1)"), std::string::npos) << table;
  EXPECT_NE(table.find("ceilings of test GPU: HBM 100.0 GB/s, bf16 1.0 TFLOP/s"), std::string::npos)
      << table;
}

TEST(ReadRooflineJson, ReadsTheCeilingsAndRejectsFilesWithout) {
  const std::string dir = makeTempDir("roofline-json");
  const std::string good = dir + "/roofline.json", empty = dir + "/empty.json";
  std::ofstream(good) << R"({"device_name": "NVIDIA H100", "hbm_bytes_per_s": 3.1e12,)"
                      << R"( "bf16_flops_per_s": 7.2e14, "errors": []})";
  std::ofstream(empty) << R"({"device_name": "x"})";
  auto c = readRooflineJson(good);
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->hbmBytesPerS, 3.1e12);
  EXPECT_DOUBLE_EQ(c->flopsPerS, 7.2e14);
  EXPECT_EQ(c->deviceName, "NVIDIA H100");
  auto missing = readRooflineJson(empty);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("neither hbm_bytes_per_s nor bf16_flops_per_s"),
            std::string::npos);
  std::ofstream(empty) << "not json";
  EXPECT_FALSE(readRooflineJson(empty).isOk());
  EXPECT_FALSE(readRooflineJson(dir + "/absent.json").isOk());
}

} // namespace
} // namespace kiln::rt::testing
