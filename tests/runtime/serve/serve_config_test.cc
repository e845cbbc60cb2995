#include "runtime/serve/serve_config.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace kiln::rt::serve {
namespace {

TEST(ServeConfigTest, ParsesProperties) {
  auto parsed = parseProperties("# comment\n! also\nengine=Python\n option.max_rolling_batch_size = 16\n"
                                "option.output_formatter: jsonlines\n\n",
                                "serving.properties");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->size(), 3u);
  EXPECT_EQ(parsed->at("option.max_rolling_batch_size"), "16");
  EXPECT_EQ(parsed->at("option.output_formatter"), "jsonlines");
  auto bad = parseProperties("a=1\njust words\n", "x.properties");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("x.properties:2"), std::string::npos);
}

TEST(ServeConfigTest, OptionsFromPropertiesThenEnvironment) {
  ServeConfig config;
  ASSERT_TRUE(applyServingProperties({{"option.max_rolling_batch_size", "16"},
                                      {"option.max_model_len", "64"},
                                      {"option.output_formatter", "sse"},
                                      {"option.gpu_memory_utilization", "0.9"},
                                      {"option.rolling_batch", "lmi-dist"},
                                      {"option.tool_call_parser", "hermes"},
                                      {"engine", "Python"}},
                                     "serving.properties", config)
                  .isOk());
  EXPECT_EQ(config.maxBatch, 16);
  EXPECT_EQ(config.maxModelLen, 64);
  EXPECT_EQ(config.sageMakerStreamFormat, Framing::kSse);
  ASSERT_EQ(config.warnings.size(), 1u);
  EXPECT_NE(config.warnings[0].find("option.rolling_batch"), std::string::npos);
  EXPECT_DOUBLE_EQ(config.gpuMemoryUtilization, 0.9);
  EXPECT_EQ(config.toolCallParser, "hermes");
  EXPECT_EQ(config.sources["tool_call_parser"],
            "option.tool_call_parser=hermes in serving.properties");
  // The environment overrides the file, as LMI does.
  ASSERT_TRUE(applyEnvironment({{"OPTION_MAX_ROLLING_BATCH_SIZE", "4"},
                                {"MAX_CONCURRENT_REQUESTS", "77"},
                                {"SAGEMAKER_BIND_TO_PORT", "9090"},
                                {"UNRELATED", "x"}},
                               config)
                  .isOk());
  EXPECT_EQ(config.maxBatch, 4);
  EXPECT_EQ(config.maxConcurrentRequests, 77);
  EXPECT_EQ(config.port, 9090);
  EXPECT_EQ(config.sources["max_batch"],
            "environment variable OPTION_MAX_ROLLING_BATCH_SIZE=4");
}

TEST(ServeConfigTest, BadValuesAndSourcesAreRejectedClearly) {
  ServeConfig config;
  Status s = applyServingProperties({{"option.max_rolling_batch_size", "many"}}, "sp", config);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("option.max_rolling_batch_size=many in sp"), std::string::npos);
  s = applyEnvironment({{"HF_MODEL_ID", "s3://"}}, config);
  EXPECT_EQ(s.message(), "environment variable HF_MODEL_ID=s3:// is 's3://': expected "
                         "s3://bucket/prefix");
  s = applyEnvironment({{"HF_MODEL_ID", "meta-llama/Llama-3-8B"}}, config);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("kiln compile"), std::string::npos);
  s = applyServingProperties({{"option.output_formatter", "csv"}}, "sp", config);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("jsonlines and sse"), std::string::npos);
  std::string dir = std::filesystem::temp_directory_path().string();
  ASSERT_TRUE(applyEnvironment({{"HF_MODEL_ID", dir}}, config).isOk());
  EXPECT_EQ(config.modelDir, dir);
}

TEST(ServeConfigTest, S3SourcesAreRecordedForTheServeCommandToPull) {
  ServeConfig config;
  ASSERT_TRUE(
      applyServingProperties({{"option.s3url", "s3://models/llama/v1"}}, "sp", config).isOk());
  EXPECT_EQ(config.s3Source, "s3://models/llama/v1");
  EXPECT_EQ(config.sources["model_dir"], "option.s3url=s3://models/llama/v1 in sp");
  ServeConfig fromEnv;
  ASSERT_TRUE(applyEnvironment({{"HF_MODEL_ID", "s3://b/p"}}, fromEnv).isOk());
  EXPECT_EQ(fromEnv.s3Source, "s3://b/p");
  ServeConfig bad;
  Status s = applyServingProperties({{"option.model_id", "s3:///p"}}, "sp", bad);
  EXPECT_EQ(s.message(), "option.model_id=s3:///p in sp is 's3:///p': expected s3://bucket/prefix");
}

// Found by tests/fuzz/serving_properties_fuzz: a model_id the kernel refuses as a path (a name
// over 255 bytes: ENAMETOOLONG) made std::filesystem::is_directory throw out of
// applyServingProperties, terminating kiln serve at start.
TEST(ServeConfigTest, AModelIdThatIsNoValidPathIsAnError) {
  for (const std::string &value : {std::string(300, 'x'), "/tmp/" + std::string(5000, 'y')}) {
    ServeConfig config;
    Status status =
        applyServingProperties({{"option.model_id", value}}, "serving.properties", config);
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("not a local artifact directory"), std::string::npos)
        << status.message();
    ServeConfig fromEnvironment;
    EXPECT_FALSE(applyEnvironment({{"HF_MODEL_ID", value}}, fromEnvironment).isOk());
  }
}

TEST(ServeConfigTest, GpuMemoryUtilizationFromPropertiesAndEnvironment) {
  ServeConfig config;
  ASSERT_TRUE(
      applyServingProperties({{"option.gpu_memory_utilization", "0.85"}}, "sp", config).isOk());
  EXPECT_DOUBLE_EQ(config.gpuMemoryUtilization, 0.85);
  ASSERT_TRUE(applyEnvironment({{"OPTION_GPU_MEMORY_UTILIZATION", "0.5"}}, config).isOk());
  EXPECT_DOUBLE_EQ(config.gpuMemoryUtilization, 0.5);
  Status s = applyServingProperties({{"option.gpu_memory_utilization", "1.5"}}, "sp", config);
  EXPECT_EQ(s.message(),
            "option.gpu_memory_utilization=1.5 in sp must be a number in (0, 1], got '1.5'");
  s = applyEnvironment({{"OPTION_GPU_MEMORY_UTILIZATION", "most"}}, config);
  EXPECT_EQ(s.message(), "environment variable OPTION_GPU_MEMORY_UTILIZATION=most must be a "
                         "number in (0, 1], got 'most'");
}

TEST(ServeConfigTest, ContradictionsWithTheArtifactNameTheKey) {
  ArtifactFacts facts{1, "fp32", 8, 128};
  ServeConfig config;
  EXPECT_TRUE(checkAgainstArtifact(config, facts).isOk());
  ASSERT_TRUE(applyEnvironment({{"OPTION_TENSOR_PARALLEL_DEGREE", "2"}}, config).isOk());
  Status s = checkAgainstArtifact(config, facts);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("OPTION_TENSOR_PARALLEL_DEGREE=2"), std::string::npos);
  EXPECT_NE(s.message().find("--tp 1"), std::string::npos);

  ServeConfig dtype;
  ASSERT_TRUE(applyServingProperties({{"option.dtype", "bf16"}}, "sp", dtype).isOk());
  s = checkAgainstArtifact(dtype, facts);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("option.dtype=bf16 in sp"), std::string::npos);

  ServeConfig batch;
  ASSERT_TRUE(applyServingProperties({{"option.max_rolling_batch_size", "9"}}, "sp", batch).isOk());
  s = checkAgainstArtifact(batch, facts);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("compiled max batch 8"), std::string::npos);

  ServeConfig len;
  ASSERT_TRUE(applyEnvironment({{"MAX_TOTAL_TOKENS", "4096"}}, len).isOk());
  s = checkAgainstArtifact(len, facts);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MAX_TOTAL_TOKENS=4096"), std::string::npos);
  EXPECT_NE(s.message().find("128"), std::string::npos);

  ServeConfig gpus;
  gpus.device = "cuda";
  ASSERT_TRUE(applyEnvironment({{"SM_NUM_GPUS", "1"}}, gpus).isOk());
  EXPECT_FALSE(checkAgainstArtifact(gpus, ArtifactFacts{2, "bf16", 8, 128}).isOk());
  EXPECT_TRUE(checkAgainstArtifact(gpus, ArtifactFacts{1, "bf16", 8, 128}).isOk());
}

// The LMI guides set TENSOR_PARALLEL_DEGREE without the OPTION_ prefix: it counts like
// OPTION_TENSOR_PARALLEL_DEGREE, which wins when both are set (with a warning if they differ).
TEST(ServeConfigTest, TensorParallelDegreeWithoutThePrefixIsHonoured) {
  ArtifactFacts facts{1, "fp32", 8, 128};
  ServeConfig plain;
  ASSERT_TRUE(applyEnvironment({{"TENSOR_PARALLEL_DEGREE", "2"}}, plain).isOk());
  EXPECT_EQ(plain.tensorParallelDegree, 2);
  Status s = checkAgainstArtifact(plain, facts);
  EXPECT_EQ(s.message(), "environment variable TENSOR_PARALLEL_DEGREE=2 contradicts the artifact, "
                         "compiled with --tp 1; recompile with kiln compile --tp 2 or drop the "
                         "setting");
  EXPECT_TRUE(plain.warnings.empty());

  ServeConfig max;
  ASSERT_TRUE(applyEnvironment({{"TENSOR_PARALLEL_DEGREE", "max"}}, max).isOk());
  EXPECT_EQ(max.tensorParallelDegree, 0);

  ServeConfig both;
  ASSERT_TRUE(applyEnvironment({{"OPTION_TENSOR_PARALLEL_DEGREE", "1"},
                                {"TENSOR_PARALLEL_DEGREE", "2"}, {"NUM_SHARD", "4"}},
                               both)
                  .isOk());
  EXPECT_EQ(both.tensorParallelDegree, 1);
  EXPECT_TRUE(checkAgainstArtifact(both, facts).isOk());
  ASSERT_EQ(both.warnings.size(), 1u);
  EXPECT_EQ(both.warnings[0], "environment variable TENSOR_PARALLEL_DEGREE=2 is overridden by "
                              "OPTION_TENSOR_PARALLEL_DEGREE=1");

  ServeConfig overShard;
  ASSERT_TRUE(
      applyEnvironment({{"TENSOR_PARALLEL_DEGREE", "1"}, {"NUM_SHARD", "4"}}, overShard).isOk());
  EXPECT_EQ(overShard.tensorParallelDegree, 1);

  ServeConfig bad;
  EXPECT_EQ(applyEnvironment({{"TENSOR_PARALLEL_DEGREE", "two"}}, bad).message(),
            "environment variable TENSOR_PARALLEL_DEGREE=two must be an integer in [1, 1024], "
            "got 'two'");
}

} // namespace
} // namespace kiln::rt::serve
