// Where S3 requests go and who signs them, resolved the way the AWS CLI does: environment
// variables first, then the shared credentials/config files for the selected profile.
#pragma once

#include "runtime/base/status.h"

#include <map>
#include <string>

namespace kiln::rt {

struct AwsConfig {
  std::string accessKeyId;
  std::string secretAccessKey;
  std::string sessionToken; // empty unless temporary credentials
  std::string region = "us-east-1";
  // Empty: https://BUCKET.s3.REGION.amazonaws.com (virtual-hosted). Otherwise an S3-compatible
  // endpoint ("http://127.0.0.1:9000") addressed path-style.
  std::string endpointUrl;
  std::string profile;          // the profile that was read ("default" unless AWS_PROFILE)
  std::string credentialSource; // "environment" | "<file> [profile]": named in auth errors
};

// Overrides that win over the environment (command-line flags).
struct AwsConfigOverrides {
  std::string profile;
  std::string region;
  std::string endpointUrl;
};

// Environment variables read (the AWS CLI's names): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_PROFILE (AWS_DEFAULT_PROFILE), AWS_REGION (AWS_DEFAULT_REGION),
// AWS_ENDPOINT_URL_S3 (AWS_ENDPOINT_URL), AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials),
// AWS_CONFIG_FILE (~/.aws/config). Fails naming every place it looked when no credentials exist.
Result<AwsConfig> resolveAwsConfig(const AwsConfigOverrides &overrides = {});

// One INI file as {section: {key: value}}; "[profile x]" in config files is stored as "x".
// Missing file: empty map. Exposed for tests.
std::map<std::string, std::map<std::string, std::string>> parseAwsIni(const std::string &text);

} // namespace kiln::rt
