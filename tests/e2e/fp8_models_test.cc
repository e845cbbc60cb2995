// fp8 checkpoints (compiler/import/hf_fp8_checkpoint.h: transformers' FineGrainedFP8 layout, e4m3
// weights and one fp32 scale per 48 x 48 block, partial blocks at the edges; llm-compressor's
// compressed-tensors with one scale per tensor or per output channel) compiled by the real
// compiler and run on the cpu backend, against transformers in fp32 on the weights each layout
// stands for (tools/goldens/make_fp8_goldens.py writes the fixtures and dequantizes them with
// torch): logits within 1e-4 at every position, greedy ids, chunked prefill and prefix-cache
// hits. Weights whose scale blocks are whole groups (per tensor, per channel) stay fp8 with their
// fp32 scales (Q8F32) unless --dtype asks for floats; 48-column blocks are dequantized into the
// compile's dtype. A layout or config kiln cannot read fails to compile, naming the tensor or
// field.
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/fixture_edit.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kiln::e2e {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(KILN_TEST_DATA_DIR);

// tiny-llama: 2 layers of qkv, o, gate_up, down (fused as kiln fuses them) dequantized to fp32
// (48-column blocks are no whole groups of kiln's layout), and the embedding table, the lm_head
// (left in fp32 by the quantizer), 5 norms and the rope inverse frequencies.
TEST(Fp8Models, BlockScaledCheckpointMatchesTransformers) {
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-fp8")).count;
  EXPECT_EQ(formats["F32"], 16);
  checkGoldenLogits("tiny-llama-fp8");
  checkGoldenChunkedAndCached("tiny-llama-fp8", 5);
}

// weight_block_size [32, 64]: whole groups of 64 columns, so the 8 linears stay fp8 (Q8F32 g64),
// each row with its block's fp32 scale.
TEST(Fp8Models, WholeGroupBlocksStayFp8AndMatchTransformers) {
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-fp8-block")).count;
  EXPECT_EQ(formats["Q8F32 g64"], 8);
  EXPECT_EQ(formats["F32"], 8);
  checkGoldenLogits("tiny-llama-fp8-block");
  checkGoldenChunkedAndCached("tiny-llama-fp8-block", 5);
}

// Kept in fp8: the 8 linears as Q8F32, one fp32 scale a row (the tensor's scale repeated, or the
// channel's), groups of 64 inputs (qkv, o, gate_up) and 128 (down); 8 F32 tensors left.
TEST(Fp8Models, CompressedTensorsPerTensorAndPerChannelMatchTransformers) {
  for (const char *model : {"tiny-llama-fp8-tensor", "tiny-llama-fp8-channel"}) {
    SCOPED_TRACE(model);
    std::map<std::string, int> formats =
        weightFormats(compileForTest(kData + "/models/" + model)).count;
    EXPECT_EQ(formats["Q8F32 g64"], 6);
    EXPECT_EQ(formats["Q8F32 g128"], 2);
    EXPECT_EQ(formats["F32"], 8);
    checkGoldenLogits(model);
    checkGoldenChunkedAndCached(model, 6);
  }
}

// --dtype fp32 (keepGgufBlocks off, as the CLI sets it) dequantizes every fp8 linear instead.
TEST(Fp8Models, DtypeDequantizesTheFp8Linears) {
  compiler::CompileOptions options;
  options.dtype = "fp32";
  options.keepGgufBlocks = false;
  std::map<std::string, int> formats =
      weightFormats(compileForTest(kData + "/models/tiny-llama-fp8-channel", options)).count;
  EXPECT_EQ(formats["F32"], 16);
  EXPECT_EQ(formats["Q8F32 g64"], 0);
  checkGoldenLogits("tiny-llama-fp8-channel", "cpu", options);
}

// A copy of an fp8 fixture with its quantization_config edited (`changes` at its top level, or
// in its config group's weights for compressed-tensors).
std::string editedFixture(const std::string &name, const nlohmann::json &changes,
                          const std::string &fixture = "tiny-llama-fp8") {
  const fs::path dir = fixtureCopy(name, fixture);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  nlohmann::json &q = config["quantization_config"];
  for (const auto &[key, value] : changes.items())
    (q.contains("config_groups") && key != "format" ? q["config_groups"]["group_0"]["weights"]
                                                    : q)[key] = value;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

// The compile says which fp8 linears it keeps, and that a kv_cache_scheme's calibrated k_scale /
// v_scale are not applied without an fp8 KV cache (--kv-dtype fp8); the weights still match.
TEST(Fp8Models, CompileLogSaysWhatIsKeptAndThatKvScalesAreNotApplied) {
  const std::string dir = fixtureWithScalars(
      "kvscales", "tiny-llama-fp8-block",
      {{"model.layers.0.self_attn.k_scale", 0.05f}, {"model.layers.0.self_attn.v_scale", 0.02f}});
  std::ostringstream log;
  compiler::CompileOptions options;
  options.log = &log;
  const std::string artifact = compileForTest(dir, options);
  EXPECT_NE(log.str().find("fp8 checkpoint, 14 linears with a scale per [32, 64] block: 14 kept "
                           "in fp8 (Q8F32: fp32 scales)"),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("the checkpoint's 2 calibrated k_scale / v_scale tensors "
                           "(kv_cache_scheme) are not applied"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(weightFormats(artifact).count["Q8F32 g64"], 8);
}

// --kv-dtype fp8 applies a checkpoint's calibrated scales, so they must be there for every layer:
// one layer's only fails the compile, naming the first missing tensor.
TEST(Fp8Models, KvScalesOfSomeLayersOnlyFailAnFp8CacheCompile) {
  const std::string dir = fixtureWithScalars(
      "kvscales-partial", "tiny-llama-fp8-block",
      {{"model.layers.0.self_attn.k_scale", 0.05f}, {"model.layers.0.self_attn.v_scale", 0.02f}});
  compiler::CompileOptions options;
  options.modelDir = dir;
  options.outDir = ::testing::TempDir() + "/kiln-fp8-never-written.kiln";
  options.kvDtype = "fp8";
  const Status status = compiler::compileModel(options);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("it has 2 of the 4 (k_scale and v_scale of each layer); "
                                  "'model.layers.1.self_attn.k_scale' is missing"),
            std::string::npos)
      << status.message();
}

// A NaN among the e4m3 bytes of a weight kept in fp8 fails the compile, naming the tensor and the
// position (the kernels read the bytes as numbers: a NaN would come out as a finite weight).
TEST(Fp8Models, AnFp8NanFailsNamingTensorAndPosition) {
  const fs::path dir = fixtureCopy("nan", "tiny-llama-fp8-channel");
  const std::string tensor = "model.layers.0.mlp.down_proj.weight"; // [64, 128]
  std::fstream file(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t headerBytes = 0;
  const nlohmann::json entry = safetensorsHeader(file, headerBytes).at(tensor);
  ASSERT_EQ(entry.at("dtype"), "F8_E4M3");
  const uint64_t at = 8 + headerBytes + entry.at("data_offsets")[0].get<uint64_t>() + 1 * 128 + 2;
  file.seekp(std::streamoff(at));
  file.put(char(0xFF)); // -NaN
  file.close();
  compiler::CompileOptions options;
  options.modelDir = dir.string();
  options.outDir = ::testing::TempDir() + "/kiln-fp8-never-written.kiln";
  const Status status = compiler::compileModel(options);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("tensor '" + tensor + "' holds an fp8 NaN at [1, 2]"),
            std::string::npos)
      << status.message();
}

TEST(Fp8Models, UnreadableConfigsAndLayoutsFailNamingTheFieldOrTensor) {
  struct Case {
    std::string name;
    nlohmann::json changes;
    std::string expected;
    std::string fixture = "tiny-llama-fp8";
  };
  const Case cases[] = {
      {"e5m2", {{"fmt", "e5m2"}}, "'quantization_config.fmt' 'e5m2' is not supported"},
      {"block0",
       {{"weight_block_size", {0, 48}}},
       "'quantization_config.weight_block_size' must be two positive integers"},
      {"block3", {{"weight_block_size", {48, 48, 1}}}, "must be two positive integers"},
      // down_proj (64 x 128, the first linear by name) stores [2, 3] scales for 48 x 48 blocks.
      {"block16",
       {{"weight_block_size", {16, 16}}},
       "'model.layers.0.mlp.down_proj.weight_scale_inv' is F32 [2, 3]; the fp8 (config.json "
       "quantization_config) layout with blocks of [16, 16] needs F32 [4, 8]"},
      // Per-channel scales ([out, 1]) read as one per tensor.
      {"tensorOverChannel",
       {{"strategy", "tensor"}},
       "'model.layers.0.mlp.down_proj.weight_scale' is F32 [64, 1]; the compressed-tensors "
       "(config.json quantization_config) layout with blocks of [64, 128] needs F32 [1, 1]",
       "tiny-llama-fp8-channel"},
      {"group",
       {{"strategy", "group"}},
       "'quantization_config.config_groups.group_0.weights.strategy' 'group' is not supported",
       "tiny-llama-fp8-channel"},
      {"int8",
       {{"type", "int"}},
       "'quantization_config.config_groups.group_0.weights.type' 'int' with 8 bits",
       "tiny-llama-fp8-channel"},
      {"packed",
       {{"format", "pack-quantized"}},
       "'quantization_config.format' 'pack-quantized' is not supported",
       "tiny-llama-fp8-channel"},
  };
  for (const Case &c : cases) {
    compiler::CompileOptions options;
    options.modelDir = editedFixture(c.name, c.changes, c.fixture);
    options.outDir = ::testing::TempDir() + "/kiln-fp8-never-written.kiln";
    const Status status = compiler::compileModel(options);
    ASSERT_FALSE(status.isOk()) << c.name;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
  }
}

} // namespace
} // namespace kiln::e2e
