#include "tests/e2e/encoder_util.h"

#include "runtime/base/file.h"
#include "runtime/embed/embedder.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::e2e {
namespace {

struct EncoderCase {
  std::string what;
  std::vector<int32_t> ids;
  std::vector<int32_t> types; // token type ids (a text pair's second text: 1 in BERT)
  std::vector<float> hidden;  // [tokens, width]
  std::vector<float> pooled;
};

struct EncoderGolden {
  std::string modelDir;
  int32_t width = 0;
  float tolerance = 0;
  std::string pooling;
  bool normalize = false;
  std::vector<EncoderCase> cases;
};

EncoderGolden loadEncoderGolden(const std::string &name) {
  const std::string dir = std::string(KILN_TEST_DATA_DIR) + "/golden/";
  Result<std::string> text = readFile(dir + name + ".embed.json");
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  EncoderGolden golden;
  if (!text.isOk())
    return golden;
  const nlohmann::json json = nlohmann::json::parse(*text);
  golden.modelDir = std::string(KILN_TEST_DATA_DIR) + "/models/" + name;
  golden.width = json["hidden_size"];
  golden.tolerance = json["tolerance"]["hidden_max_abs"];
  if (json.contains("pooling")) { // BART's has none: feature extraction returns hidden states
    golden.pooling = json["pooling"]["mode"];
    golden.normalize = json["pooling"]["normalize"];
  }
  for (const nlohmann::json &c : json["cases"]) {
    EncoderCase ec{c["what"],
                   c["input_ids"],
                   c["token_type_ids"],
                   {},
                   c.value("pooled", std::vector<float>())};
    Result<std::string> bytes = readFile(dir + c["hidden_file"].get<std::string>());
    EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
    if (!bytes.isOk())
      continue;
    ec.hidden.resize(bytes->size() / sizeof(float));
    std::memcpy(ec.hidden.data(), bytes->data(), ec.hidden.size() * sizeof(float));
    EXPECT_EQ(ec.hidden.size(), ec.ids.size() * golden.width) << name << " " << ec.what;
    golden.cases.push_back(std::move(ec));
  }
  return golden;
}

float maxDiff(const std::vector<float> &a, const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

} // namespace

void checkEncoder(const std::string &name, size_t expectedCases, const std::string &device,
                  compiler::CompileOptions options) {
  EncoderGolden golden = loadEncoderGolden(name);
  ASSERT_EQ(golden.cases.size(), expectedCases) << name;
  options.maxBatch = 8;
  options.maxSeqLen = 128;
  options.maxTokensPerStep = 512;
  LoadedArtifact loaded = loadForTest(compileForTest(golden.modelDir, options), 256, device);
  ASSERT_NE(loaded.executor, nullptr);
  const schema::ModelInfo &model = *loaded.artifact->plan().model();
  const std::string pooling = model.pooling() ? model.pooling()->str() : "";
  EXPECT_EQ(pooling, golden.pooling);
  EXPECT_EQ(model.normalize_embeddings(), golden.normalize);
  Result<rt::PoolingMode> mode = rt::parsePoolingMode(pooling);
  ASSERT_TRUE(mode.isOk());
  Result<rt::Embedder> embedder = rt::Embedder::create({loaded.executor.get(), *mode});
  ASSERT_TRUE(embedder.isOk()) << embedder.status().toString();
  ASSERT_EQ(embedder->width(), golden.width);

  std::vector<std::vector<int32_t>> all, allTypes;
  for (const EncoderCase &c : golden.cases) {
    all.push_back(c.ids);
    allTypes.push_back(c.types);
    Result<std::vector<rt::Embedding>> alone = embedder->embed({c.ids}, {c.types});
    ASSERT_TRUE(alone.isOk()) << alone.status().toString();
    EXPECT_LE(maxDiff((*alone)[0].hidden, c.hidden), golden.tolerance) << name << " " << c.what;
    const std::vector<float> pooled =
        golden.normalize ? rt::normalizedL2((*alone)[0].pooled) : (*alone)[0].pooled;
    if (!golden.pooling.empty())
      EXPECT_LE(maxDiff(pooled, c.pooled), golden.tolerance) << name << " " << c.what;
  }
  // Together (one step: 8 sequences, 512 tokens), each exactly as alone.
  Result<std::vector<rt::Embedding>> together = embedder->embed(all, allTypes);
  ASSERT_TRUE(together.isOk()) << together.status().toString();
  for (size_t i = 0; i < golden.cases.size(); ++i)
    EXPECT_LE(maxDiff((*together)[i].hidden, golden.cases[i].hidden), golden.tolerance)
        << name << " batched " << golden.cases[i].what;
}

} // namespace kiln::e2e
