// GGUF metadata -> HF config.json (compiler/import/gguf_config.h) and GGUF tensors under HF names
// and layout (gguf_checkpoint.h), on GGUF bytes built by the test.
#include "compiler/import/gguf_checkpoint.h"
#include "compiler/import/gguf_config.h"
#include "tests/compiler/import/gguf_test_builder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>

namespace kiln::compiler {
namespace {

using testing::GgufBuilder;
using testing::podBytes;

GgufBuilder &kvF32(GgufBuilder &b, const std::string &key, float value) {
  return b.kvRaw(key, 6, podBytes(value));
}

// A llama file's metadata: 2 heads of dim 4 over 1 KV head, hidden 8.
GgufBuilder llamaMetadata(const std::string &arch = "llama") {
  GgufBuilder b;
  b.kvString("general.architecture", arch);
  b.kvU32(arch + ".block_count", 1).kvU32(arch + ".embedding_length", 8);
  b.kvU32(arch + ".feed_forward_length", 16).kvU32(arch + ".attention.head_count", 2);
  b.kvU32(arch + ".attention.head_count_kv", 1).kvU32(arch + ".context_length", 128);
  b.kvU32(arch + ".vocab_size", 32);
  kvF32(b, arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  kvF32(b, arch + ".rope.freq_base", 500000.0f);
  b.kvU32("tokenizer.ggml.bos_token_id", 1).kvU32("tokenizer.ggml.eos_token_id", 2);
  b.kvU32("tokenizer.ggml.eot_token_id", 7);
  return b;
}

std::string f32Bytes(const std::vector<float> &values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

Result<GgufFile> parse(const GgufBuilder &builder) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(builder.bytes());
  return GgufFile::parse(*bytes, "test.gguf", bytes);
}

TEST(GgufConfigTest, LlamaMetadataBecomesTheHfConfig) {
  GgufBuilder b = llamaMetadata();
  b.tensor("token_embd.weight", {8, 32}, 0, f32Bytes(std::vector<float>(256, 0.f)));
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  Result<GgufHfConfig> config = ggufHfConfig(*file);
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  nlohmann::json json = nlohmann::json::parse(config->configJson);
  EXPECT_EQ(json["model_type"], "llama");
  EXPECT_EQ(json["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(json["num_hidden_layers"], 1);
  EXPECT_EQ(json["hidden_size"], 8);
  EXPECT_EQ(json["intermediate_size"], 16);
  EXPECT_EQ(json["num_attention_heads"], 2);
  EXPECT_EQ(json["num_key_value_heads"], 1);
  EXPECT_EQ(json["head_dim"], 4);
  EXPECT_EQ(json["vocab_size"], 32);
  EXPECT_EQ(json["max_position_embeddings"], 128);
  EXPECT_DOUBLE_EQ(json["rms_norm_eps"].get<double>(), static_cast<double>(1e-5f));
  EXPECT_DOUBLE_EQ(json["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(json["tie_word_embeddings"], true); // no output.weight
  EXPECT_FALSE(json.contains("rope_scaling"));
  EXPECT_EQ(json["bos_token_id"], 1);
  EXPECT_EQ(json["eos_token_id"], nlohmann::json::array({2, 7})); // eos, then eot
  EXPECT_EQ(nlohmann::json::parse(config->generationConfigJson)["eos_token_id"],
            nlohmann::json::array({2, 7}));
}

TEST(GgufConfigTest, RopeScalingKeysAndKeyLength) {
  GgufBuilder b = llamaMetadata("qwen3");
  b.kvU32("qwen3.attention.key_length", 16);
  b.kvString("qwen3.rope.scaling.type", "yarn");
  kvF32(b, "qwen3.rope.scaling.factor", 4.0f);
  b.kvU32("qwen3.rope.scaling.original_context_length", 32);
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  Result<GgufHfConfig> config = ggufHfConfig(*file);
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  nlohmann::json json = nlohmann::json::parse(config->configJson);
  EXPECT_EQ(json["model_type"], "qwen3");
  EXPECT_EQ(json["head_dim"], 16);
  EXPECT_EQ(json["rope_scaling"]["rope_type"], "yarn");
  EXPECT_DOUBLE_EQ(json["rope_scaling"]["factor"].get<double>(), 4.0);
  EXPECT_EQ(json["rope_scaling"]["original_max_position_embeddings"], 32);
}

TEST(GgufConfigTest, UnsupportedArchitectureNamesItAndTheSupportedOnes) {
  GgufBuilder b = llamaMetadata("falcon");
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk());
  Result<GgufHfConfig> config = ggufHfConfig(*file);
  ASSERT_FALSE(config.isOk());
  EXPECT_NE(config.status().message().find("general.architecture 'falcon'"), std::string::npos)
      << config.status().message();
  EXPECT_NE(config.status().message().find("llama, qwen2, qwen3, phi3"), std::string::npos);
}

TEST(GgufConfigTest, MissingKeyIsNamed) {
  GgufBuilder b;
  b.kvString("general.architecture", "llama").kvU32("llama.embedding_length", 8);
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk());
  Result<GgufHfConfig> config = ggufHfConfig(*file);
  ASSERT_FALSE(config.isOk());
  EXPECT_NE(config.status().message().find("llama.block_count"), std::string::npos)
      << config.status().message();
}

TEST(GgufConfigTest, Llama31RopeFreqsTensorIsRefusedByName) {
  GgufBuilder b = llamaMetadata();
  b.tensor("rope_freqs.weight", {2}, 0, f32Bytes({1.f, 8.f}));
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk());
  Result<GgufHfConfig> config = ggufHfConfig(*file);
  ASSERT_FALSE(config.isOk());
  EXPECT_NE(config.status().message().find("rope_freqs.weight"), std::string::npos);
}

// llama.cpp stores q rows per head as interleaved halves (row h*d + 2i + j holds HF row
// h*d + j*d/2 + i); the checkpoint gives them back in HF order, as fp32 only.
TEST(GgufCheckpointTest, LlamaQkRowsAreUnpermutedAndNamesAreHf) {
  GgufBuilder b = llamaMetadata();
  // attn_q: 8 rows (2 heads x dim 4) of 8 columns; row r's values are all r (the GGUF row).
  std::vector<float> q(64);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c)
      q[r * 8 + c] = static_cast<float>(r);
  b.tensor("blk.0.attn_q.weight", {8, 8}, 0, f32Bytes(q));
  b.tensor("blk.0.attn_v.weight", {8, 4}, 0, f32Bytes(std::vector<float>(32, 0.5f)));
  b.tensor("blk.0.ffn_norm.weight", {8}, 0, f32Bytes(std::vector<float>(8, 1.f)));
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  auto shared = std::make_shared<const GgufFile>(std::move(*file));
  auto checkpoint = GgufCheckpoint::create(shared, ggufArchitectures()[0], 2, 1);
  ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
  const GgufCheckpoint &ckpt = **checkpoint;
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{
                              "model.layers.0.post_attention_layernorm.weight",
                              "model.layers.0.self_attn.q_proj.weight",
                              "model.layers.0.self_attn.v_proj.weight"}));
  ASSERT_TRUE(ckpt.contains("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_TRUE(ckpt.contains("model.layers.0.self_attn.v_proj.weight"));
  ASSERT_TRUE(ckpt.contains("model.layers.0.post_attention_layernorm.weight"));
  const TensorInfo *info = *ckpt.info("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(info->shape, (std::vector<int64_t>{8, 8}));
  EXPECT_FALSE(info->rawReadable); // reordered rows: fp32 only
  EXPECT_FALSE(ckpt.rawBytes("model.layers.0.self_attn.q_proj.weight").isOk());
  Result<std::vector<float>> values = ckpt.readF32("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(values.isOk());
  // HF row h*4 + j*2 + i comes from GGUF row h*4 + 2i + j.
  const float expected[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ((*values)[r * 8], expected[r]) << "HF row " << r;
  const TensorInfo *v = *ckpt.info("model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(v->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(v->rawReadable); // F32, not reordered: copied as stored
  EXPECT_TRUE(ckpt.rawBytes("model.layers.0.self_attn.v_proj.weight").isOk());
}

TEST(GgufCheckpointTest, ATypeKilnDoesNotReadIsNamedWithItsTensor) {
  GgufBuilder b = llamaMetadata();
  b.tensor("blk.0.attn_v.weight", {256, 1}, 15, std::string(292, '\0')); // one Q8_K block
  Result<GgufFile> file = parse(b);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  auto shared = std::make_shared<const GgufFile>(std::move(*file));
  auto checkpoint = GgufCheckpoint::create(shared, ggufArchitectures()[0], 2, 1);
  ASSERT_FALSE(checkpoint.isOk());
  const std::string &message = checkpoint.status().message();
  EXPECT_NE(message.find("tensor 'blk.0.attn_v.weight' has ggml type Q8_K"), std::string::npos)
      << message;
  EXPECT_NE(message.find("Q4_K"), std::string::npos) << message; // the list of readable types
}

TEST(GgufCheckpointTest, Phi3FfnUpIsTheFusedGateUp) {
  const GgufArchitecture *phi3 = nullptr;
  for (const GgufArchitecture &arch : ggufArchitectures())
    if (std::string(arch.name) == "phi3")
      phi3 = &arch;
  ASSERT_NE(phi3, nullptr);
  EXPECT_EQ(GgufCheckpoint::hfName("blk.3.ffn_up.weight", *phi3),
            "model.layers.3.mlp.gate_up_proj.weight");
  EXPECT_EQ(GgufCheckpoint::hfName("blk.3.attn_qkv.weight", *phi3),
            "model.layers.3.self_attn.qkv_proj.weight");
  EXPECT_EQ(GgufCheckpoint::hfName("blk.3.ffn_up.weight", ggufArchitectures()[0]),
            "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(GgufCheckpoint::hfName("output.weight", *phi3), "lm_head.weight");
  EXPECT_EQ(GgufCheckpoint::hfName("rope_factors_long.weight", *phi3), "");
}

} // namespace
} // namespace kiln::compiler
