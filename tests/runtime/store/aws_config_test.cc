#include "runtime/store/aws_config.h"
#include "runtime/store/s3_client.h"
#include "tests/runtime/store/store_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kiln::rt {
namespace {
using testing::TempDir;

// Clears every variable the chain reads and points HOME at an empty directory.
class AwsConfigTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char *name : kVars)
      ::unsetenv(name);
    ::setenv("HOME", home_.path().c_str(), 1);
  }
  void writeHomeFile(const std::string &relative, const std::string &text) {
    std::filesystem::create_directories(home_ / ".aws");
    ASSERT_TRUE(writeFileAtomic(home_ / relative, text).isOk());
  }
  static constexpr const char *kVars[] = {"AWS_ACCESS_KEY_ID",   "AWS_SECRET_ACCESS_KEY",
                                          "AWS_SESSION_TOKEN",   "AWS_PROFILE",
                                          "AWS_DEFAULT_PROFILE", "AWS_REGION",
                                          "AWS_DEFAULT_REGION",  "AWS_ENDPOINT_URL",
                                          "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE",
                                          "AWS_CONFIG_FILE"};
  TempDir home_;
};

TEST_F(AwsConfigTest, EnvironmentCredentialsAndDefaults) {
  ::setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
  ::setenv("AWS_SESSION_TOKEN", "token", 1);
  Result<AwsConfig> config = resolveAwsConfig();
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_EQ(config->accessKeyId, "AKIAENV");
  EXPECT_EQ(config->secretAccessKey, "secret-env");
  EXPECT_EQ(config->sessionToken, "token");
  EXPECT_EQ(config->region, "us-east-1");
  EXPECT_EQ(config->endpointUrl, "");
  EXPECT_EQ(config->credentialSource, "environment (AWS_ACCESS_KEY_ID)");
}

TEST_F(AwsConfigTest, ProfileFromSharedFilesWithRegionAndEndpoint) {
  writeHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIADEF\n"
                                    "aws_secret_access_key = s-def\n\n[work]\n"
                                    "aws_access_key_id=AKIAWORK\naws_secret_access_key=s-work\n");
  writeHomeFile(".aws/config", "[default]\nregion = eu-west-1\n[profile work]\n"
                               "region = ap-south-1\nendpoint_url = http://127.0.0.1:9000/\n");
  Result<AwsConfig> def = resolveAwsConfig();
  ASSERT_TRUE(def.isOk()) << def.status().toString();
  EXPECT_EQ(def->accessKeyId, "AKIADEF");
  EXPECT_EQ(def->region, "eu-west-1");
  ::setenv("AWS_PROFILE", "work", 1);
  Result<AwsConfig> work = resolveAwsConfig();
  ASSERT_TRUE(work.isOk());
  EXPECT_EQ(work->accessKeyId, "AKIAWORK");
  EXPECT_EQ(work->secretAccessKey, "s-work");
  EXPECT_EQ(work->region, "ap-south-1");
  EXPECT_EQ(work->endpointUrl, "http://127.0.0.1:9000"); // trailing '/' dropped
  EXPECT_EQ(work->credentialSource, home_ / ".aws/credentials [work]");
}

TEST_F(AwsConfigTest, PrecedenceEnvOverFileFlagsOverEnv) {
  writeHomeFile(".aws/credentials", "[default]\naws_access_key_id=AKIAFILE\n"
                                    "aws_secret_access_key=s-file\n[other]\n"
                                    "aws_access_key_id=AKIAOTHER\naws_secret_access_key=s-o\n");
  ::setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "s-env", 1);
  ::setenv("AWS_REGION", "us-west-2", 1);
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1234", 1);
  Result<AwsConfig> config = resolveAwsConfig();
  ASSERT_TRUE(config.isOk());
  EXPECT_EQ(config->accessKeyId, "AKIAENV"); // environment keys win over the default profile
  EXPECT_EQ(config->region, "us-west-2");
  EXPECT_EQ(config->endpointUrl, "http://127.0.0.1:1234");
  ::setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5678", 1);
  Result<AwsConfig> flags = resolveAwsConfig({"other", "sa-east-1", ""});
  ASSERT_TRUE(flags.isOk());
  EXPECT_EQ(flags->accessKeyId, "AKIAOTHER"); // an explicit --profile wins over the environment
  EXPECT_EQ(flags->region, "sa-east-1");
  EXPECT_EQ(flags->endpointUrl, "http://127.0.0.1:5678"); // the S3-specific variable first
}

TEST_F(AwsConfigTest, NoCredentialsNamesWhereItLooked) {
  Result<AwsConfig> config = resolveAwsConfig();
  ASSERT_FALSE(config.isOk());
  EXPECT_EQ(config.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(config.status().message(),
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add profile "
            "'default' to " +
                home_ / ".aws/credentials" + " (or choose one with AWS_PROFILE / --profile)");
  ::setenv("AWS_ACCESS_KEY_ID", "AKIA", 1); // a key without its secret is not credentials
  EXPECT_FALSE(resolveAwsConfig().isOk());
}

TEST_F(AwsConfigTest, BadEndpointIsNamed) {
  ::setenv("AWS_ACCESS_KEY_ID", "AKIA", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
  Result<AwsConfig> config = resolveAwsConfig({"", "", "127.0.0.1:9000"});
  ASSERT_FALSE(config.isOk());
  EXPECT_NE(config.status().message().find("'127.0.0.1:9000'"), std::string::npos);
  EXPECT_NE(config.status().message().find("http://"), std::string::npos);
}

TEST(AwsIni, ParsesSectionsCommentsAndProfilePrefix) {
  auto ini = parseAwsIni("# c\n[default]\n a = 1 \n; c\n[profile x y]\nb=2=3\nnot a pair\n");
  EXPECT_EQ(ini["default"]["a"], "1");
  EXPECT_EQ(ini["x y"]["b"], "2=3");
  EXPECT_EQ(ini.size(), 2u);
}

TEST(S3Url, Parses) {
  Result<S3Location> a = parseS3Url("s3://models/llama/v1/");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(a->bucket, "models");
  EXPECT_EQ(a->prefix, "llama/v1");
  EXPECT_EQ(a->key("plan.kiln"), "llama/v1/plan.kiln");
  EXPECT_EQ(a->url("plan.kiln"), "s3://models/llama/v1/plan.kiln");
  Result<S3Location> b = parseS3Url("s3://models");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b->key("plan.kiln"), "plan.kiln");
  for (const char *bad : {"http://x/y", "s3://", "s3:///p", "s3://Bad_Bucket/p", "s3://b/a//c"}) {
    Result<S3Location> r = parseS3Url(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

// `kiln serve s3://...` serves the artifact under this name, not the cache directory's hash.
TEST(S3Url, ArtifactName) {
  EXPECT_EQ(parseS3Url("s3://models/team/llama.kiln/")->artifactName(), "llama.kiln");
  EXPECT_EQ(parseS3Url("s3://models/team/llama.tar.gz")->artifactName(), "llama");
  EXPECT_EQ(parseS3Url("s3://models/model.tgz")->artifactName(), "model");
  EXPECT_EQ(parseS3Url("s3://models")->artifactName(), "models");
}

TEST(S3Url, UriEncode) {
  EXPECT_EQ(uriEncode("a b/c+d~e", false), "a%20b/c%2Bd~e");
  EXPECT_EQ(uriEncode("a/b", true), "a%2Fb");
}

} // namespace
} // namespace kiln::rt
