#include "runtime/store/aws_config.h"

#include "runtime/base/file.h"

#include <cstdlib>

namespace kiln::rt {
namespace {

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

std::string env(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

std::string firstEnv(std::initializer_list<const char *> names) {
  for (const char *name : names)
    if (std::string value = env(name); !value.empty())
      return value;
  return "";
}

std::string trim(const std::string &s) {
  size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos)
    return "";
  size_t end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

std::string homeFile(const char *envName, const char *relative) {
  if (std::string path = env(envName); !path.empty())
    return path;
  std::string home = env("HOME");
  return home.empty() ? "" : home + "/" + relative;
}

IniFile readIni(const std::string &path) {
  if (path.empty())
    return {};
  Result<std::string> text = readFile(path);
  return text.isOk() ? parseAwsIni(*text) : IniFile{};
}

std::string lookup(const IniFile &ini, const std::string &section, const std::string &key) {
  auto s = ini.find(section);
  if (s == ini.end())
    return "";
  auto k = s->second.find(key);
  return k == s->second.end() ? "" : k->second;
}

} // namespace

IniFile parseAwsIni(const std::string &text) {
  IniFile ini;
  std::string section;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    std::string line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';')
      continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      if (section.rfind("profile ", 0) == 0)
        section = trim(section.substr(8));
      continue;
    }
    size_t eq = line.find('=');
    if (eq != std::string::npos && !section.empty())
      ini[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return ini;
}

Result<AwsConfig> resolveAwsConfig(const AwsConfigOverrides &overrides) {
  AwsConfig config;
  config.profile = overrides.profile;
  if (config.profile.empty())
    config.profile = firstEnv({"AWS_PROFILE", "AWS_DEFAULT_PROFILE"});
  bool profileChosen = !config.profile.empty();
  if (!profileChosen)
    config.profile = "default";
  std::string credentialsPath = homeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  std::string configPath = homeFile("AWS_CONFIG_FILE", ".aws/config");
  IniFile credentials = readIni(credentialsPath);
  IniFile configFile = readIni(configPath);

  // An explicitly chosen profile wins over ambient keys, as in the AWS CLI's --profile.
  std::string envKey = env("AWS_ACCESS_KEY_ID"), envSecret = env("AWS_SECRET_ACCESS_KEY");
  if (!overrides.profile.empty() || envKey.empty() || envSecret.empty()) {
    for (const auto &[ini, path] :
         {std::pair{&credentials, credentialsPath}, std::pair{&configFile, configPath}}) {
      std::string key = lookup(*ini, config.profile, "aws_access_key_id");
      std::string secret = lookup(*ini, config.profile, "aws_secret_access_key");
      if (!key.empty() && !secret.empty()) {
        config.accessKeyId = key;
        config.secretAccessKey = secret;
        config.sessionToken = lookup(*ini, config.profile, "aws_session_token");
        config.credentialSource = path + " [" + config.profile + "]";
        break;
      }
    }
  }
  if (config.accessKeyId.empty() && !envKey.empty() && !envSecret.empty()) {
    config.accessKeyId = envKey;
    config.secretAccessKey = envSecret;
    config.sessionToken = env("AWS_SESSION_TOKEN");
    config.credentialSource = "environment (AWS_ACCESS_KEY_ID)";
  }
  if (config.accessKeyId.empty())
    return failedPrecondition(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add profile '" +
        config.profile + "' to " +
        (credentialsPath.empty() ? "~/.aws/credentials" : credentialsPath) +
        (profileChosen ? "" : " (or choose one with AWS_PROFILE / --profile)"));

  config.region = overrides.region;
  if (config.region.empty())
    config.region = firstEnv({"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (config.region.empty())
    config.region = lookup(configFile, config.profile, "region");
  if (config.region.empty())
    config.region = "us-east-1";
  config.endpointUrl = overrides.endpointUrl;
  if (config.endpointUrl.empty())
    config.endpointUrl = firstEnv({"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  if (config.endpointUrl.empty())
    config.endpointUrl = lookup(configFile, config.profile, "endpoint_url");
  while (!config.endpointUrl.empty() && config.endpointUrl.back() == '/')
    config.endpointUrl.pop_back();
  if (!config.endpointUrl.empty() && config.endpointUrl.rfind("http://", 0) != 0 &&
      config.endpointUrl.rfind("https://", 0) != 0)
    return invalidArgument("endpoint URL '" + config.endpointUrl +
                           "' (AWS_ENDPOINT_URL / --endpoint-url) must start with http:// or "
                           "https://");
  return config;
}

} // namespace kiln::rt
