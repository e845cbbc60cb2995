// `kiln serve ARTIFACT|/opt/ml/model [options]`: the HTTP server (runtime/serve) over a
// ServingModel. The port opens first so /ping answers 503 while the model loads, then 200.
// SIGTERM/SIGINT drain: stop accepting, finish the requests in flight, exit 0.
#include "runtime/base/file.h"
#include "runtime/serve/http_server.h"
#include "runtime/serve/serve_config.h"
#include "runtime/serve/serving_model_adapter.h"
#ifdef KILN_HAVE_STORE
#include "runtime/store/transfer.h"
#endif
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace kiln::tools {
namespace {

const CommandSpec kServeSpec = {
    "serve",
    "[ARTIFACT] [options]",
    "Serve a compiled artifact over HTTP: OpenAI (/v1/completions, /v1/chat/completions,\n"
    "/v1/models), TGI (/generate, /generate_stream), SageMaker (/ping, /invocations), /health and\n"
    "/metrics. With no ARTIFACT it serves /opt/ml/model on port 8080 the SageMaker way, reading\n"
    "serving.properties (option.*) and OPTION_* / HF_MODEL_ID / SM_NUM_GPUS environment variables.",
    {
        {"--host", "H", "address to listen on (default 0.0.0.0)"},
        {"--port", "P", "port (default 8000; 8080 the SageMaker way; 0 picks a free one)"},
        {"--api-key", "K", "require 'Authorization: Bearer K' (except /ping and /health)"},
        {"--device", "cpu|cuda|cuda:N", "device to run on (default cpu; cuda is cuda:0)"},
        {"--devices", "0,1,...",
         "CUDA GPU of each tensor-parallel rank (default 0..tp-1); a repeated GPU is shared"},
        {"--gpu-memory-utilization", "F",
         "on cuda, the KV cache fills each GPU up to this fraction, in (0, 1] (default 0.9)"},
        {"--max-batch", "N", "most sequences running at once (default: the compiled maximum)"},
        {"--max-model-len", "N", "longest sequence (default: the compiled max sequence length)"},
        {"--max-waiting", "N", "requests queued beyond the running batch before 503 (default 512)"},
        {"--kv-cache-mb", "N", "KV cache size in MiB (default 256 on cpu)"},
        {"--chat-template", "FILE", "Jinja chat template overriding the artifact's"},
        {"--served-model-name", "NAME", "the name clients pass as \"model\""},
        {"--tool-call-parser", "hermes|llama3_json|mistral|none",
         "format of the model's tool calls under tool_choice \"auto\" (default: the chat "
         "template's)"},
        {"--sagemaker", "",
         "SageMaker mode for ARTIFACT: serving.properties, OPTION_* env, port 8080"},
        {"--sagemaker-stream-format", "jsonl|sse", "/invocations streaming format (default jsonl)"},
        {"--max-body-bytes", "N", "largest request body; larger ones get 413 (default 4194304)"},
        {"--http-threads", "N", "most connections served at once (default 2048)"},
        {"--http-header-timeout", "S",
         "a request's line and headers must arrive within S seconds, else 408 (default 30)"},
        {"--http-body-timeout", "S",
         "a request's body must arrive within S seconds of its headers, else 408 (default 60)"},
        {"--max-header-bytes", "N",
         "largest request line plus headers; more get 431 (default 32768)"},
        {"--seed", "S", "seed for requests that give none (default: random)"},
        {"--no-verify-weights", "", "skip hashing every weight at load"},
    },
    0,
    1,
};

// serving.properties and the environment, when started the SageMaker way.
Status applySageMakerSources(rt::serve::ServeConfig &config) {
  std::string properties = config.modelDir + "/serving.properties";
  if (fileExists(properties)) {
    KILN_ASSIGN_OR_RETURN(std::string text, readFile(properties));
    KILN_ASSIGN_OR_RETURN(auto parsed, rt::serve::parseProperties(text, properties));
    KILN_RETURN_IF_ERROR(rt::serve::applyServingProperties(parsed, properties, config));
  }
  return rt::serve::applyEnvironment(rt::serve::processEnvironment(), config);
}

Status applyIntFlag(const Args &args, const char *flag, int64_t min, int64_t max,
                    const char *setting, rt::serve::ServeConfig &config, auto &field) {
  if (!args.has(flag))
    return okStatus();
  KILN_ASSIGN_OR_RETURN(int64_t v, args.getInt(flag, 0, min, max));
  field = static_cast<std::remove_reference_t<decltype(field)>>(v);
  config.sources[setting] = std::string(flag) + " " + std::to_string(v);
  return okStatus();
}

Status applyFlags(const Args &args, rt::serve::ServeConfig &config) {
  config.host = args.getOr("--host", config.host);
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--port", 0, 65535, "port", config, config.port));
  config.apiKey = args.getOr("--api-key", config.apiKey);
  // --devices alone means CUDA: the list names GPUs.
  config.device = args.getOr("--device", args.has("--devices") ? "cuda" : config.device);
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--max-batch", 1, 1 << 20, "max_batch", config,
                                    config.maxBatch));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--max-model-len", 1, 1 << 30, "max_model_len", config,
                                    config.maxModelLen));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--max-waiting", 0, 1 << 20, "max_waiting", config,
                                    config.maxWaiting));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--kv-cache-mb", 1, 1 << 24, "kv_cache_mb", config,
                                    config.kvCacheMb));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--max-body-bytes", 1024, int64_t(1) << 32,
                                    "max_body_bytes", config, config.maxBodyBytes));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--http-threads", 8, 65536, "http_threads", config,
                                    config.httpThreads));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--http-header-timeout", 1, 3600, "http_header_timeout",
                                    config, config.httpHeaderTimeoutSeconds));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--http-body-timeout", 1, 3600, "http_body_timeout",
                                    config, config.httpBodyTimeoutSeconds));
  KILN_RETURN_IF_ERROR(applyIntFlag(args, "--max-header-bytes", 1024, 1 << 20, "max_header_bytes",
                                    config, config.maxHeaderBytes));
  config.chatTemplatePath = args.getOr("--chat-template", config.chatTemplatePath);
  config.servedModelName = args.getOr("--served-model-name", config.servedModelName);
  if (auto parser = args.get("--tool-call-parser")) {
    config.toolCallParser = *parser;
    config.sources["tool_call_parser"] = "--tool-call-parser";
  }
  if (auto format = args.get("--sagemaker-stream-format")) {
    if (*format != "jsonl" && *format != "sse")
      return invalidArgument("--sagemaker-stream-format must be jsonl or sse, got '" + *format +
                             "'");
    config.sageMakerStreamFormat =
        *format == "sse" ? rt::serve::Framing::kSse : rt::serve::Framing::kJsonLines;
  }
  if (args.has("--seed")) {
    KILN_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0, 0, INT64_MAX));
    config.seed = static_cast<uint64_t>(seed);
  }
  return okStatus();
}

// Pulled once into a cache keyed by the manifest's hash; a second start reuses it. Served under
// the artifact's name in the URL (not the cache directory's hash) unless --served-model-name
// says otherwise.
Result<std::string> pullArtifact(const std::string &s3Url, rt::serve::ServeConfig &config) {
#ifdef KILN_HAVE_STORE
  if (config.servedModelName.empty()) {
    KILN_ASSIGN_OR_RETURN(rt::S3Location location, rt::parseS3Url(s3Url));
    config.servedModelName = location.artifactName();
  }
  config.pulledFrom = s3Url;
  rt::PullOptions pull;
  pull.log = [](const std::string &line) { std::cerr << "kiln serve: " << line << "\n"; };
  pull.client.log = pull.log;
  // About once a second while bytes move: a large model's pull is minutes of otherwise silence.
  pull.progress = [](const rt::TransferProgress &p) {
    int percent = p.bytesTotal ? int(100.0 * double(p.bytesDone) / double(p.bytesTotal)) : 100;
    std::cerr << "kiln serve: pull: " << (p.bytesDone >> 20) << " of " << (p.bytesTotal >> 20)
              << " MiB (" << percent << "%), " << p.filesDone << " of " << p.filesTotal
              << " files" << (p.finished ? ", done" : "") << "\n";
  };
  return rt::pullToCache(s3Url, pull);
#else
  return unimplemented("serving from S3 (" + s3Url + ") needs a kiln built with "
                       "libcurl and libarchive (the store layer)");
#endif
}

Result<rt::serve::ServeConfig> buildConfig(const Args &args) {
  rt::serve::ServeConfig config;
  config.sageMaker = args.positionals().empty() || args.has("--sagemaker");
  config.modelDir = args.positionals().empty() ? rt::serve::kSageMakerModelDir
                                               : args.positionals()[0];
  if (config.modelDir.rfind("s3://", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(config.modelDir, pullArtifact(config.modelDir, config));
  }
  if (config.sageMaker) {
    config.port = rt::serve::kSageMakerPort;
    KILN_RETURN_IF_ERROR(applySageMakerSources(config));
    // option.s3url / model_id / HF_MODEL_ID naming an S3 prefix: serving.properties stays in
    // the model directory, the artifact comes from the store.
    if (!config.s3Source.empty()) {
      KILN_ASSIGN_OR_RETURN(config.modelDir, pullArtifact(config.s3Source, config));
    }
  }
  KILN_RETURN_IF_ERROR(applyFlags(args, config));
  if (!std::filesystem::is_directory(config.modelDir))
    return notFound("the artifact directory " + config.modelDir + " does not exist");
  return config;
}

const char *dtypeName(schema::DType dtype) {
  switch (dtype) {
  case schema::DType::F16:
    return "fp16";
  case schema::DType::BF16:
    return "bf16";
  default:
    return "fp32";
  }
}

// --devices and --gpu-memory-utilization (the latter also option.gpu_memory_utilization /
// OPTION_GPU_MEMORY_UTILIZATION; the flag wins).
struct DeviceFlags {
  std::vector<int> devices;
  double gpuMemoryUtilization = 0;
};

Result<DeviceFlags> deviceFlags(const Args &args) {
  DeviceFlags flags;
  if (auto devices = args.get("--devices")) {
    KILN_ASSIGN_OR_RETURN(flags.devices, parseDeviceList(*devices, "--devices"));
  }
  KILN_ASSIGN_OR_RETURN(flags.gpuMemoryUtilization, args.getFraction("--gpu-memory-utilization"));
  return flags;
}

Result<rt::ServingOptions> servingOptions(const rt::serve::ServeConfig &config,
                                          const DeviceFlags &flags) {
  rt::ServingOptions options;
  options.device = config.device;
  options.devices = flags.devices;
  options.log = [](const std::string &line) { std::cerr << "kiln serve: " << line << "\n"; };
  options.gpuMemoryUtilization = flags.gpuMemoryUtilization;
  // A SageMaker container's settings may carry the GPU fraction onto a cpu instance: ignore it
  // there (the flag itself stays an error on cpu).
  if (flags.gpuMemoryUtilization == 0 && config.gpuMemoryUtilization > 0) {
    if (config.device == "cpu")
      options.log(config.sources.at("gpu_memory_utilization") + " has no effect on cpu");
    else
      options.gpuMemoryUtilization = config.gpuMemoryUtilization;
  }
  options.kvCacheBytes = static_cast<size_t>(config.kvCacheMb) << 20;
  options.maxBatch = config.maxBatch;
  options.maxSeqLen = config.maxModelLen;
  options.seed = config.seed;
  if (!config.chatTemplatePath.empty()) {
    Result<std::string> source = readFile(config.chatTemplatePath);
    if (!source.isOk())
      return source.status().withContext("--chat-template " + config.chatTemplatePath);
    options.chatTemplate = std::move(*source);
  }
  return options;
}

// --tool-call-parser (or option.tool_call_parser), else the format the chat template writes.
Result<rt::serve::ToolCallFormat> toolCallFormat(const rt::serve::ServeConfig &config,
                                                 const rt::ServingModel &model) {
  if (!config.toolCallParser.empty()) {
    Result<rt::serve::ToolCallFormat> named = rt::serve::toolCallFormatNamed(config.toolCallParser);
    if (!named.isOk())
      return named.status().withContext(config.sources.at("tool_call_parser"));
    return named;
  }
  const rt::ChatTemplate *chat = model.chatTemplate();
  return chat ? rt::serve::toolCallFormatOfTemplate(chat->source())
              : rt::serve::ToolCallFormat::kNone;
}

Result<std::unique_ptr<rt::serve::ServingModelAdapter>>
loadModel(const rt::serve::ServeConfig &config, const DeviceFlags &flags, bool verifyWeights) {
  KILN_ASSIGN_OR_RETURN(rt::ServingOptions options, servingOptions(config, flags));
  options.verifyWeights = verifyWeights;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::ServingModel> model,
                        rt::ServingModel::open(config.modelDir, options));
  const schema::Plan &plan = model->artifact().plan();
  rt::serve::ArtifactFacts facts;
  facts.tensorParallelDegree = static_cast<int32_t>(plan.tp());
  facts.dtype = dtypeName(plan.activation_dtype());
  facts.maxBatch = static_cast<int32_t>(plan.limits()->max_batch());
  facts.maxSeqLen = static_cast<int32_t>(plan.limits()->max_seq_len());
  facts.embeds = plan.output() == schema::PlanOutput::HiddenStates;
  KILN_RETURN_IF_ERROR(rt::serve::checkAgainstArtifact(config, facts));
  KILN_ASSIGN_OR_RETURN(rt::serve::ToolCallFormat toolCalls, toolCallFormat(config, *model));
  return std::make_unique<rt::serve::ServingModelAdapter>(std::move(model), config.servedModelName,
                                                          toolCalls);
}

rt::serve::HttpServerConfig httpConfig(const rt::serve::ServeConfig &config) {
  rt::serve::HttpServerConfig http;
  http.host = config.host;
  http.port = config.port;
  http.apiKey = config.apiKey;
  http.maxBodyBytes = config.maxBodyBytes;
  http.maxWaiting = config.maxWaiting;
  http.maxConcurrentRequests = config.maxConcurrentRequests;
  http.httpThreads = config.httpThreads;
  http.headerTimeout = std::chrono::seconds(config.httpHeaderTimeoutSeconds);
  http.bodyTimeout = std::chrono::seconds(config.httpBodyTimeoutSeconds);
  http.maxHeaderBytes = config.maxHeaderBytes;
  http.sageMakerStreamFormat = config.sageMakerStreamFormat;
  http.invocationOutput = config.task == "text-embedding"
                              ? rt::serve::InvocationOutput::kPooled
                              : rt::serve::InvocationOutput::kHiddenStates;
  http.log = [](const std::string &line) { std::cerr << "kiln serve: " << line << "\n"; };
  return http;
}

// Blocks SIGTERM/SIGINT in every thread (call before any thread starts) and turns them into a
// drain on a thread of their own, where locks and condition variables are safe to use.
std::thread startSignalThread(rt::serve::HttpServer &server, sigset_t &signals) {
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return std::thread([&server, &signals] {
    int signal = 0;
    if (sigwait(&signals, &signal) == 0 && signal != 0 && !server.draining()) {
      std::cerr << "kiln serve: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
                << ": draining (no new requests; finishing those in flight)\n";
      server.drain();
    }
  });
}

// Wakes the signal thread when the server ended for another reason.
void stopSignalThread(std::thread &thread) {
  if (thread.joinable()) {
    pthread_kill(thread.native_handle(), SIGTERM);
    thread.join();
  }
}

int serve(const Args &args) {
  Result<rt::serve::ServeConfig> config = buildConfig(args);
  if (!config.isOk())
    return reportError("serve", config.status());
  Result<DeviceFlags> flags = deviceFlags(args);
  if (!flags.isOk())
    return reportError("serve", flags.status());
  for (const std::string &warning : config->warnings)
    std::cerr << "kiln serve: warning: " << warning << "\n";
  rt::serve::HttpServer server(httpConfig(*config));
  sigset_t signals;
  std::thread signalThread = startSignalThread(server, signals);
  Result<int> port = server.bind();
  if (!port.isOk()) {
    stopSignalThread(signalThread);
    return reportError("serve", port.status());
  }
  Status served;
  std::thread httpThread([&] { served = server.serve(); });
  auto model = loadModel(*config, *flags, !args.has("--no-verify-weights"));
  if (!model.isOk() && model.status().code() == StatusCode::kDataLoss &&
      !config->pulledFrom.empty()) {
    // A cached pull that fails its checksums (a disk error, an edit) would fail every start while
    // S3 still holds the good artifact: drop the cache entry and pull it again, once.
    std::cerr << "kiln serve: the cached copy of " << config->pulledFrom << " failed its check ("
              << model.status().message() << "); pulling it again\n";
    std::error_code ignored;
    std::filesystem::remove_all(config->modelDir, ignored);
    Result<std::string> pulled = pullArtifact(config->pulledFrom, *config);
    if (pulled.isOk()) {
      config->modelDir = *pulled;
      model = loadModel(*config, *flags, !args.has("--no-verify-weights"));
    } else {
      model = pulled.status();
    }
  }
  if (!model.isOk()) {
    server.drain();
    httpThread.join();
    stopSignalThread(signalThread);
    return reportError("serve", model.status().withContext("loading " + config->modelDir));
  }
  server.setModel(model->get());
  if (!(*model)->generates())
    std::cerr
        << "kiln serve: an embedding model: embeddings on /v1/embeddings, /embed and /invocations ("
        << ((*model)->embeddings()->info().pooling == rt::PoolingMode::kNone
                ? "hidden states only: the model has no pooling"
                : "pooling " + rt::poolingModeName((*model)->embeddings()->info().pooling))
        << ")\n";
  else if (!(*model)->hasChatTemplate())
    std::cerr << "kiln serve: warning: the artifact has no chat template: /v1/chat/completions "
                 "and chat bodies sent to /invocations answer 400; start kiln serve with "
                 "--chat-template FILE to serve chat\n";
  if ((*model)->generates() && (*model)->embeddings())
    std::cerr << "kiln serve: embeddings too, on /v1/embeddings and /embed: each text's last "
                 "final hidden state, normalized, computed in the engine's steps\n";
  if (rt::serve::ToolCallFormat tools = (*model)->toolCallFormat();
      tools != rt::serve::ToolCallFormat::kNone)
    std::cerr << "kiln serve: tool_choice \"auto\" reads " << rt::serve::toolCallFormatName(tools)
              << " tool calls ("
              << (config->toolCallParser.empty() ? "the chat template's format"
                                                 : config->sources.at("tool_call_parser"))
              << ")\n";
  std::cerr << "kiln serve: serving '" << (*model)->name() << "' on http://" << config->host << ":"
            << *port << "\n"
            << std::flush;
  httpThread.join();
  stopSignalThread(signalThread);
  (*model)->servingModel().shutdown();
  if (!served.isOk())
    return reportError("serve", served);
  std::cerr << "kiln serve: drained, exiting\n";
  return 0;
}

} // namespace

int runServe(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kServeSpec, argv);
  if (!args.isOk())
    return reportError("serve", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kServeSpec);
    return 0;
  }
  return serve(*args);
}

} // namespace kiln::tools
