// GPTQ and AWQ checkpoints (compiler/import/hf_quantized_checkpoint.h) compiled by the real
// compiler and run on the cpu backend, against transformers in fp32 on the weights their stored
// words stand for (tools/goldens/make_gptq_awq_goldens.py writes the fixtures in each format's
// published layout and dequantizes them in numpy): logits within 1e-4 at every position, greedy
// ids, chunked prefill and prefix-cache hits. Symmetric GPTQ stays packed as Q4, asymmetric GPTQ
// and AWQ as Q4Z (integer zero points). A quantization_config kiln cannot read fails to compile,
// naming the field.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace kiln::e2e {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(KILN_TEST_DATA_DIR);

// tiny-llama: 2 layers of qkv, o, gate_up, down (fused as kiln fuses them); F32: the embedding
// table, the lm_head, 5 norms and the rope inverse frequencies.
TEST(GptqAwqModels, SymmetricGptqStaysPackedAndMatchesTransformers) {
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-gptq")).count;
  EXPECT_EQ(formats["Q4 g32"], 8);
  EXPECT_EQ(formats["F32"], 8);
  checkGoldenLogits("tiny-llama-gptq");
  checkGoldenChunkedAndCached("tiny-llama-gptq", 5);
}

// One group per output: the group is the row (64 columns; down_proj's 128).
TEST(GptqAwqModels, AsymmetricPerOutputGptqStaysPackedAndMatchesTransformers) {
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-gptq-asym")).count;
  EXPECT_EQ(formats["Q4Z g64"], 6);
  EXPECT_EQ(formats["Q4Z g128"], 2);
  EXPECT_EQ(formats["F32"], 8);
  checkGoldenLogits("tiny-llama-gptq-asym");
  checkGoldenChunkedAndCached("tiny-llama-gptq-asym", 7);
}

TEST(GptqAwqModels, AwqStaysPackedAndMatchesTransformers) {
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-awq")).count;
  EXPECT_EQ(formats["Q4Z g64"], 8);
  checkGoldenLogits("tiny-llama-awq");
  checkGoldenChunkedAndCached("tiny-llama-awq", 6);
}

// --dtype dequantizes packed weights, as for GGUF blocks.
TEST(GptqAwqModels, DtypeDequantizesGptqAndAwq) {
  compiler::CompileOptions dense;
  dense.keepGgufBlocks = false;
  for (const char *model : {"tiny-llama-gptq", "tiny-llama-awq"}) {
    SCOPED_TRACE(model);
    std::map<std::string, int> formats =
        weightFormats(compileForTest(kData + "/models/" + model, dense)).count;
    EXPECT_EQ(formats["F32"], 16);
    checkGoldenLogits(model, "cpu", dense);
  }
}

// A GPU target keeps the packed weights too (one weights file serves every target of the
// artifact; tests/e2e/cuda_quantized_test.cc runs them on cuda).
TEST(GptqAwqModels, GpuTargetsKeepGptqPacked) {
#ifndef KILN_HAVE_CODEGEN
  GTEST_SKIP() << "built without the CUDA code generator (KILN_ENABLE_CUDA=OFF)";
#else
  compiler::CompileOptions options;
  options.targets = {"cpu", "sm_90"};
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-gptq", options)).count;
  EXPECT_EQ(formats["Q4 g32"], 8);
  EXPECT_EQ(formats["F32"], 8);
#endif
}

// A copy of the GPTQ fixture with its quantization_config edited.
std::string editedFixture(const std::string &name, const nlohmann::json &changes) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln-gptq-" + name);
  fs::remove_all(dir);
  fs::copy(kData + "/models/tiny-llama-gptq", dir);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  for (const auto &[key, value] : changes.items())
    config["quantization_config"][key] = value;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

TEST(GptqAwqModels, UnreadableQuantizationConfigsFailNamingTheField) {
  struct Case {
    std::string name;
    nlohmann::json changes;
    std::string expected;
  };
  const Case cases[] = {
      {"bnb",
       {{"quant_method", "bitsandbytes"}},
       "'quantization_config.quant_method' is 'bitsandbytes'"},
      {"bits8", {{"bits", 8}}, "'quantization_config.bits' 8: kiln reads 4-bit gptq"},
      {"descact", {{"desc_act", true}}, "'quantization_config.desc_act' is true"},
      {"group0", {{"group_size", 0}}, "'quantization_config.group_size' must be -1"},
      {"group16", {{"group_size", 16}}, "is F16 [4, 64]; the gptq (config.json"},
  };
  for (const Case &c : cases) {
    compiler::CompileOptions options;
    options.modelDir = editedFixture(c.name, c.changes);
    options.outDir = ::testing::TempDir() + "/kiln-gptq-never-written.kiln";
    const Status status = compiler::compileModel(options);
    ASSERT_FALSE(status.isOk()) << c.name;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
  }
}

} // namespace
} // namespace kiln::e2e
