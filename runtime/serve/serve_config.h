// Server settings from three places, in increasing precedence: SageMaker's serving.properties
// (option.* keys as DJL/LMI names them), the environment (OPTION_*, HF_MODEL_ID, SM_NUM_GPUS and
// TGI's MAX_* / NUM_SHARD), and `kiln serve` flags. Each setting remembers where it came from, so
// a value that contradicts the compiled artifact is rejected naming the key that set it.
#pragma once

#include "runtime/base/status.h"
#include "runtime/serve/sse.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt::serve {

inline constexpr const char *kSageMakerModelDir = "/opt/ml/model";
inline constexpr int kSageMakerPort = 8080;
inline constexpr int kDefaultPort = 8000;
inline constexpr size_t kDefaultMaxBodyBytes = 4u << 20;
inline constexpr int64_t kDefaultMaxWaiting = 1024;
inline constexpr int kDefaultHttpHeaderTimeoutSeconds = 30;
inline constexpr int kDefaultHttpBodyTimeoutSeconds = 60;
inline constexpr size_t kDefaultMaxHeaderBytes = 32u << 10;

struct ServeConfig {
  std::string modelDir;            // the artifact directory
  // An s3://bucket/prefix artifact named by option.s3url / option.model_id / HF_MODEL_ID: the
  // serve command pulls it into the local cache and serves that directory (modelDir then).
  std::string s3Source;
  std::string pulledFrom;          // the s3:// URL modelDir was pulled from; "" for a local one
  bool sageMaker = false;          // started with no artifact argument
  std::string host = "0.0.0.0";
  int port = kDefaultPort;
  std::string apiKey;              // empty: no authentication
  std::string device = "cpu";
  int32_t maxBatch = 0;            // 0: the compiled maximum
  int32_t maxModelLen = 0;         // 0: the compiled maximum
  int64_t maxWaiting = kDefaultMaxWaiting; // requests queued beyond the running batch
  int64_t maxConcurrentRequests = 0; // TGI's MAX_CONCURRENT_REQUESTS; 0: max batch + max waiting
  int64_t kvCacheMb = 0;           // 0: the device default
  double gpuMemoryUtilization = 0; // option.gpu_memory_utilization; 0: unset (the flag or default)
  std::string chatTemplatePath;
  std::string toolCallParser; // --tool-call-parser / option.tool_call_parser; "": the template's
  // option.task (DJL's names): "" (what the artifact does), "text-generation", or for an encoder
  // "feature-extraction" (/invocations returns hidden states) or "text-embedding" (pooled).
  std::string task;
  std::string servedModelName;
  Framing sageMakerStreamFormat = Framing::kJsonLines;
  size_t maxBodyBytes = kDefaultMaxBodyBytes;
  int httpThreads = 0;             // 0: enough for every admitted request plus headroom
  // Whole-request deadlines (408) and the header cap (431): runtime/serve/connection_server.h.
  int httpHeaderTimeoutSeconds = kDefaultHttpHeaderTimeoutSeconds;
  int httpBodyTimeoutSeconds = kDefaultHttpBodyTimeoutSeconds;
  size_t maxHeaderBytes = kDefaultMaxHeaderBytes;
  int32_t tensorParallelDegree = 0; // 0: whatever the artifact was compiled with
  int32_t visibleGpus = 0;          // SM_NUM_GPUS; 0: not said
  std::string dtype;               // "": the artifact's
  std::optional<uint64_t> seed;
  // Setting name ("max_batch") -> where it was set ("option.max_rolling_batch_size in
  // /opt/ml/model/serving.properties"), for error messages.
  std::map<std::string, std::string> sources;
  std::vector<std::string> warnings; // keys accepted but without effect in kiln
};

// Java-properties style: "key=value" or "key: value", '#'/'!' comments, surrounding blanks
// trimmed. Fails on a line with no separator, naming the line.
Result<std::map<std::string, std::string>> parseProperties(const std::string &text,
                                                            const std::string &fileName);

// Applies serving.properties keys. `fileName` appears in error messages.
Status applyServingProperties(const std::map<std::string, std::string> &properties,
                              const std::string &fileName, ServeConfig &config);
// Applies environment variables (OPTION_FOO_BAR as option.foo_bar, HF_MODEL_ID, SM_NUM_GPUS,
// NUM_SHARD, TENSOR_PARALLEL_DEGREE, MAX_CONCURRENT_REQUESTS, MAX_TOTAL_TOKENS,
// SAGEMAKER_BIND_TO_PORT). Tensor parallel degree: OPTION_TENSOR_PARALLEL_DEGREE wins over
// TENSOR_PARALLEL_DEGREE, which wins over NUM_SHARD.
Status applyEnvironment(const std::map<std::string, std::string> &env, ServeConfig &config);
// The process environment as a map.
std::map<std::string, std::string> processEnvironment();

// What the compiled artifact fixes.
struct ArtifactFacts {
  int32_t tensorParallelDegree = 1;
  std::string dtype; // "fp32", "fp16", "bf16"
  int32_t maxBatch = 0;
  int32_t maxSeqLen = 0;
  bool embeds = false; // the artifact embeds (plan.fbs PlanOutput HiddenStates)
};

// Rejects settings that contradict the artifact (tp, dtype, a max batch or model length above the
// compiled maximum), naming the key that set them and what to recompile with.
Status checkAgainstArtifact(const ServeConfig &config, const ArtifactFacts &facts);

} // namespace kiln::rt::serve
