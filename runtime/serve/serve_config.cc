#include "runtime/serve/serve_config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>

extern char **environ;

namespace kiln::rt::serve {
namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Result<int64_t> parseInt(const std::string &value, const std::string &where, int64_t min,
                         int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < min || v > max)
    return invalidArgument(where + " must be an integer in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "], got '" + value + "'");
  return v;
}

// Where `model_id` / `s3url` points: a local artifact directory, or an s3:// prefix that kiln
// serve pulls into its cache before loading (a Hugging Face hub id is not a compiled artifact).
Status applyModelId(const std::string &value, const std::string &where, ServeConfig &config) {
  if (value.rfind("s3://", 0) == 0) {
    if (value.size() <= 5 || value[5] == '/')
      return invalidArgument(where + " is '" + value + "': expected s3://bucket/prefix");
    config.s3Source = value;
    config.sources["model_dir"] = where;
    return okStatus();
  }
  // The error_code overload: the throwing one raises filesystem_error for a name the kernel
  // refuses (too long, ...), which would end the server at start (tests/fuzz found it).
  std::error_code ec;
  if (std::filesystem::is_directory(value, ec)) {
    config.modelDir = value;
    config.sources["model_dir"] = where;
    return okStatus();
  }
  return invalidArgument(where + " is '" + value +
                         "', which is not a local artifact directory; kiln serves compiled "
                         "artifacts: run kiln compile on the model and serve the output directory");
}

// One option.* key (lower case, without the "option." prefix). Unknown keys are warnings.
Status applyOption(const std::string &key, const std::string &value, const std::string &where,
                   ServeConfig &config) {
  auto setInt = [&](const char *setting, int64_t min, int64_t max, auto &field) -> Status {
    KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, min, max));
    field = static_cast<std::remove_reference_t<decltype(field)>>(v);
    config.sources[setting] = where;
    return okStatus();
  };
  if (key == "model_id" || key == "s3url")
    return applyModelId(value, where, config);
  if (key == "max_rolling_batch_size" || key == "max_num_seqs")
    return setInt("max_batch", 1, 1 << 20, config.maxBatch);
  if (key == "max_model_len")
    return setInt("max_model_len", 1, 1 << 30, config.maxModelLen);
  if (key == "tensor_parallel_degree") {
    if (value == "max")
      return okStatus(); // every visible device: the artifact's tp decides
    return setInt("tensor_parallel_degree", 1, 1024, config.tensorParallelDegree);
  }
  if (key == "dtype") {
    if (value != "auto") {
      config.dtype = lower(value);
      config.sources["dtype"] = where;
    }
    return okStatus();
  }
  if (key == "output_formatter") {
    if (value == "jsonlines")
      config.sageMakerStreamFormat = Framing::kJsonLines;
    else if (value == "sse")
      config.sageMakerStreamFormat = Framing::kSse;
    else
      return invalidArgument(where + " is '" + value + "'; kiln supports jsonlines and sse");
    return okStatus();
  }
  if (key == "served_model_name") {
    config.servedModelName = value;
    return okStatus();
  }
  if (key == "chat_template") {
    config.chatTemplatePath = value;
    return okStatus();
  }
  if (key == "task") {
    const std::string task = lower(value) == "text_embedding" ? "text-embedding" : lower(value);
    if (task != "text-generation" && task != "feature-extraction" && task != "text-embedding")
      return invalidArgument(where + " is '" + value +
                             "'; kiln serves text-generation, feature-extraction and "
                             "text-embedding");
    config.task = task;
    config.sources["task"] = where;
    return okStatus();
  }
  if (key == "tool_call_parser") {
    config.toolCallParser = value;
    config.sources["tool_call_parser"] = where;
    return okStatus();
  }
  if (key == "gpu_memory_utilization") {
    char *end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(v > 0 && v <= 1))
      return invalidArgument(where + " must be a number in (0, 1], got '" + value + "'");
    config.gpuMemoryUtilization = v;
    config.sources["gpu_memory_utilization"] = where;
    return okStatus();
  }
  if (key == "seed") {
    KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, 0, INT64_MAX));
    config.seed = static_cast<uint64_t>(v);
    return okStatus();
  }
  config.warnings.push_back(where + " has no effect in kiln and is ignored");
  return okStatus();
}

// TENSOR_PARALLEL_DEGREE, as the LMI guides set it, means OPTION_TENSOR_PARALLEL_DEGREE; when
// both are set the OPTION_ one wins (a warning says so if they differ).
Status applyTensorParallelDegree(const std::map<std::string, std::string> &env,
                                 const std::string &value, const std::string &where,
                                 ServeConfig &config) {
  auto option = env.find("OPTION_TENSOR_PARALLEL_DEGREE");
  if (option == env.end())
    return applyOption("tensor_parallel_degree", value, where, config);
  if (option->second != value)
    config.warnings.push_back(where + " is overridden by OPTION_TENSOR_PARALLEL_DEGREE=" +
                              option->second);
  return okStatus();
}

} // namespace

Result<std::map<std::string, std::string>> parseProperties(const std::string &text,
                                                            const std::string &fileName) {
  std::map<std::string, std::string> out;
  size_t pos = 0, lineNo = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    std::string line = trim(text.substr(pos, end - pos));
    ++lineNo;
    pos = end + 1;
    if (line.empty() || line[0] == '#' || line[0] == '!')
      continue;
    size_t sep = line.find_first_of("=:");
    if (sep == std::string::npos || sep == 0)
      return invalidArgument(fileName + ":" + std::to_string(lineNo) + ": expected key=value, got '" +
                             line + "'");
    out[trim(line.substr(0, sep))] = trim(line.substr(sep + 1));
  }
  return out;
}

Status applyServingProperties(const std::map<std::string, std::string> &properties,
                              const std::string &fileName, ServeConfig &config) {
  for (const auto &[key, value] : properties) {
    std::string where = key + "=" + value + " in " + fileName;
    if (key.rfind("option.", 0) == 0) {
      KILN_RETURN_IF_ERROR(applyOption(lower(key.substr(7)), value, where, config));
    } else if (key != "engine" && key != "entryPoint") {
      config.warnings.push_back(where + " has no effect in kiln and is ignored");
    }
  }
  return okStatus();
}

Status applyEnvironment(const std::map<std::string, std::string> &env, ServeConfig &config) {
  for (const auto &[name, value] : env) {
    std::string where = "environment variable " + name + "=" + value;
    if (name.rfind("OPTION_", 0) == 0) {
      KILN_RETURN_IF_ERROR(applyOption(lower(name.substr(7)), value, where, config));
    } else if (name == "HF_MODEL_ID") {
      KILN_RETURN_IF_ERROR(applyModelId(value, where, config));
    } else if (name == "SM_NUM_GPUS") {
      KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, 0, 1024));
      config.visibleGpus = static_cast<int32_t>(v);
      config.sources["visible_gpus"] = where;
    } else if (name == "NUM_SHARD") {
      KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, 1, 1024));
      config.tensorParallelDegree = static_cast<int32_t>(v);
      config.sources["tensor_parallel_degree"] = where;
    } else if (name == "MAX_CONCURRENT_REQUESTS") {
      KILN_ASSIGN_OR_RETURN(config.maxConcurrentRequests, parseInt(value, where, 1, 1 << 20));
    } else if (name == "MAX_TOTAL_TOKENS") {
      KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, 1, 1 << 30));
      config.maxModelLen = static_cast<int32_t>(v);
      config.sources["max_model_len"] = where;
    } else if (name == "TENSOR_PARALLEL_DEGREE") {
      KILN_RETURN_IF_ERROR(applyTensorParallelDegree(env, value, where, config));
    } else if (name == "SAGEMAKER_BIND_TO_PORT") {
      KILN_ASSIGN_OR_RETURN(int64_t v, parseInt(value, where, 1, 65535));
      config.port = static_cast<int>(v);
    }
  }
  return okStatus();
}

std::map<std::string, std::string> processEnvironment() {
  std::map<std::string, std::string> env;
  for (char **e = environ; e && *e; ++e) {
    std::string entry = *e;
    size_t eq = entry.find('=');
    if (eq != std::string::npos)
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

Status checkAgainstArtifact(const ServeConfig &config, const ArtifactFacts &facts) {
  auto source = [&](const char *setting, const std::string &fallback) {
    auto it = config.sources.find(setting);
    return it == config.sources.end() ? fallback : it->second;
  };
  if (!config.task.empty() && (config.task == "text-generation") == facts.embeds)
    return invalidArgument(source("task", "task") + " is '" + config.task + "' but the artifact " +
                           (facts.embeds
                                ? "is an embedding model: it serves feature-extraction and "
                                  "text-embedding"
                                : "generates text: it serves text-generation"));
  if (config.tensorParallelDegree && config.tensorParallelDegree != facts.tensorParallelDegree)
    return invalidArgument(
        source("tensor_parallel_degree", "tensor parallel degree " +
                                             std::to_string(config.tensorParallelDegree)) +
        " contradicts the artifact, compiled with --tp " +
        std::to_string(facts.tensorParallelDegree) + "; recompile with kiln compile --tp " +
        std::to_string(config.tensorParallelDegree) + " or drop the setting");
  if (config.device != "cpu" && config.visibleGpus > 0 &&
      config.visibleGpus < facts.tensorParallelDegree)
    return invalidArgument(source("visible_gpus", "SM_NUM_GPUS") + ": the artifact was compiled "
                           "with --tp " + std::to_string(facts.tensorParallelDegree) +
                           " and needs that many GPUs; this machine has " +
                           std::to_string(config.visibleGpus));
  if (!config.dtype.empty() && config.dtype != facts.dtype)
    return invalidArgument(source("dtype", "dtype " + config.dtype) +
                           " contradicts the artifact, compiled with --dtype " + facts.dtype +
                           "; recompile with kiln compile --dtype " + config.dtype);
  if (config.maxBatch > facts.maxBatch)
    return invalidArgument(source("max_batch", "--max-batch " + std::to_string(config.maxBatch)) +
                           " is above the artifact's compiled max batch " +
                           std::to_string(facts.maxBatch) +
                           "; recompile with kiln compile --max-batch " +
                           std::to_string(config.maxBatch));
  if (config.maxModelLen > facts.maxSeqLen)
    return invalidArgument(
        source("max_model_len", "max model length " + std::to_string(config.maxModelLen)) +
        " is above the artifact's compiled max sequence length " +
        std::to_string(facts.maxSeqLen) + "; recompile with kiln compile --max-seq-len " +
        std::to_string(config.maxModelLen));
  return okStatus();
}

} // namespace kiln::rt::serve
