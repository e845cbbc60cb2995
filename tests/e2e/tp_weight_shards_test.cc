// Weight sharding round trip: concatenating the rank shards of a --tp N artifact along each
// weight's sharded dim reproduces the --tp 1 artifact's tensors byte for byte (fused q/k/v and
// gate/up part by part, o/down by columns, the embedding table and lm_head by vocab rows minus the
// zero padding), and replicated weights are identical on every rank. A tied model stores its
// table's vocab shard once per rank, shared by the embedding and lm_head.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace kiln::e2e {
namespace {

using Bytes = std::vector<uint8_t>;

struct Tensor {
  Bytes bytes;
  std::vector<uint64_t> shape;
  size_t element = 4;
  size_t rowBytes() const { return (shape.size() == 2 ? shape[1] : 1) * element; }
};

std::map<std::string, Tensor> tensorsOf(const rt::Artifact &artifact, int rank) {
  std::map<std::string, Tensor> tensors;
  const auto *weights = artifact.rank(rank).weights();
  for (uint32_t w = 0; w < weights->size(); ++w) {
    const schema::WeightEntry *entry = weights->Get(w);
    std::span<const uint8_t> bytes = artifact.weightBytes(rank, static_cast<int>(w));
    Tensor t;
    t.bytes.assign(bytes.begin(), bytes.end());
    t.shape.assign(entry->shape()->begin(), entry->shape()->end());
    t.element = rt::dtypeSize(entry->dtype());
    tensors[entry->name()->str()] = std::move(t);
  }
  return tensors;
}

// Rows [begin, begin + count) of t.
Bytes rowsOf(const Tensor &t, uint64_t begin, uint64_t count) {
  return Bytes(t.bytes.begin() + begin * t.rowBytes(),
               t.bytes.begin() + (begin + count) * t.rowBytes());
}

void append(Bytes &to, const Bytes &from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Rebuilds the tp 1 tensor `name` from the ranks' shards.
Bytes reassemble(const std::string &name, const std::vector<std::map<std::string, Tensor>> &ranks,
                 const schema::ModelInfo &model) {
  size_t tp = ranks.size();
  const Tensor &first = ranks[0].at(name);
  Bytes out;
  auto partsByRows = [&](std::vector<uint64_t> partRows) { // fused [part0; part1; ...] per rank
    uint64_t offset = 0;
    for (uint64_t rows : partRows) {
      for (size_t r = 0; r < tp; ++r)
        append(out, rowsOf(ranks[r].at(name), offset, rows / tp));
      offset += rows / tp;
    }
  };
  if (name.ends_with(".attn.qkv.weight")) {
    uint64_t d = model.head_dim();
    partsByRows({model.num_heads() * d, model.num_kv_heads() * d, model.num_kv_heads() * d});
  } else if (name.ends_with(".mlp.gate_up.weight")) {
    partsByRows({model.intermediate_size(), model.intermediate_size()});
  } else if (name.ends_with(".attn.o.weight") || name.ends_with(".mlp.down.weight")) {
    for (uint64_t row = 0; row < first.shape[0]; ++row)
      for (size_t r = 0; r < tp; ++r)
        append(out, rowsOf(ranks[r].at(name), row, 1));
  } else if (name == "lm_head.weight" || name == "embed.weight") {
    for (size_t r = 0; r < tp; ++r) {
      EXPECT_EQ(ranks[r].at(name).shape[0], (model.vocab_size() + tp - 1) / tp) << name;
      append(out, ranks[r].at(name).bytes);
    }
    size_t real = model.vocab_size() * first.rowBytes();
    for (size_t i = real; i < out.size(); ++i)
      EXPECT_EQ(out[i], 0) << name << " padding byte " << i;
    out.resize(real);
  } else {
    for (size_t r = 1; r < tp; ++r)
      EXPECT_EQ(ranks[r].at(name).bytes, first.bytes) << name << " differs on rank " << r;
    out = first.bytes;
  }
  return out;
}

void checkRoundTrip(const std::string &modelDir, int64_t tp, const std::string &dtype) {
  SCOPED_TRACE(modelDir + " --tp " + std::to_string(tp) + " --dtype " + dtype);
  compiler::CompileOptions options;
  options.dtype = dtype;
  options.maxBatch = 4;
  options.maxSeqLen = 64;
  auto whole = rt::Artifact::load(compileForTest(modelDir, options));
  options.tp = tp;
  auto sharded = rt::Artifact::load(compileForTest(modelDir, options));
  ASSERT_TRUE(whole.isOk() && sharded.isOk());
  ASSERT_EQ((*sharded)->numRanks(), tp);
  std::map<std::string, Tensor> original = tensorsOf(**whole, 0);
  std::vector<std::map<std::string, Tensor>> ranks;
  for (int r = 0; r < tp; ++r)
    ranks.push_back(tensorsOf(**sharded, r));
  const schema::ModelInfo &model = *(*whole)->plan().model();
  // A tied lm_head has no tensor of its own at tp 1 or tp N: it reads the embedding's shard.
  if (!original.count("lm_head.weight"))
    for (const auto &rank : ranks)
      EXPECT_FALSE(rank.count("lm_head.weight")) << "a tied table is stored twice";
  size_t checked = 0;
  for (const auto &[name, tensor] : original) {
    for (const auto &rank : ranks)
      ASSERT_TRUE(rank.count(name)) << name << " is missing from a rank";
    Bytes rebuilt = reassemble(name, ranks, model);
    EXPECT_EQ(rebuilt.size(), tensor.bytes.size()) << name;
    EXPECT_TRUE(rebuilt == tensor.bytes) << name << ": shards do not reassemble to the original";
    ++checked;
  }
  EXPECT_EQ(checked, ranks[0].size()) << "every rank tensor is a shard of a tp 1 tensor";
  // Per rank: KV heads split, weights files distinct.
  EXPECT_EQ((*sharded)->plan().kv_cache()->num_kv_heads(), model.num_kv_heads() / tp);
  EXPECT_EQ((*sharded)->rank(1).weights_file()->str(), "weights.rank1.bin");
}

TEST(TpWeightShards, TinyLlamaReassemblesExactly) {
  std::string dir = std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama";
  checkRoundTrip(dir, 2, "fp32");
  checkRoundTrip(dir, 2, "bf16");
}

TEST(TpWeightShards, TiedTinyStoriesReassemblesExactlyAtTp4) {
  auto dir = assetModelDir("models/tinystories-656K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/tinystories-656K-hf is absent";
  checkRoundTrip(*dir, 4, "fp16");
}

} // namespace
} // namespace kiln::e2e
