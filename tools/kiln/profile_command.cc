// `kiln profile ARTIFACT`: one synthetic engine step timed op by op (runtime/service/
// step_profiler.h): per op group the time, its share of the step, the bytes and flops it must
// move and do at least, and those rates as fractions of the device's ceilings (--roofline, the
// JSON of tools/bench/roofline). Says which ops keep a benchmark from the hardware limit.
#include "runtime/base/file.h"
#include "runtime/service/serving_model.h"
#include "runtime/service/step_profiler.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <cstdio>
#include <iostream>

namespace kiln::tools {
namespace {

const CommandSpec kProfileSpec = {
    "profile",
    "ARTIFACT [--device cpu|cuda|cuda:N] [--batch N] [--context N | --prefill N] [--json]",
    "Times one engine step op by op: a decode step of --batch sequences at --context positions\n"
    "(the KV cache filled by real prefill steps first), or with --prefill N a prefill step of N\n"
    "tokens per sequence. Prints per op group the median time, its share of the step, GB/s and\n"
    "TFLOP/s from the bytes and flops each op must move and do at least, and with --roofline\n"
    "their fractions of the measured HBM bandwidth and bf16 peak; then the slowest ops and the\n"
    "whole step op by op and, for decode on a GPU, as its CUDA graph. Tensor-parallel artifacts\n"
    "are not profiled (compile with --tp 1).",
    {
        {"--device", "cpu|cuda|cuda:N", "device to run on (default cpu)"},
        {"--batch", "N", "sequences in the step (default 1)"},
        {"--context", "N", "decode: cache positions per sequence after the step (default 128)"},
        {"--prefill", "N", "profile a prefill step of N tokens per sequence instead"},
        {"--repeats", "R", "timed runs; times are their medians (default 10)"},
        {"--roofline", "FILE", "tools/bench/roofline JSON: report fractions of its ceilings"},
        {"--top", "K", "list the K slowest ops (default 10)"},
        {"--kv-cache-mb", "N", "KV cache size in MiB (default 256 on cpu)"},
        {"--gpu-memory-utilization", "F",
         "fraction of GPU memory to use, KV cache included (default 0.9 on cuda)"},
        {"--seed", "S", "seed of the random token ids (default 0)"},
        {"--json", "", "print one JSON object instead of the table"},
        {"--json-out", "FILE", "also write the JSON object to FILE (the table still prints)"},
        {"--no-verify-weights", "", "skip hashing every weight at load (large models)"},
    },
    1,
    1,
};

struct ProfileConfig {
  std::string artifact;
  rt::ServingOptions serving;
  rt::ProfileRequest request;
  std::string roofline;
  std::string jsonOut;
  size_t top = 10;
  bool json = false;
};

Result<ProfileConfig> configFrom(const Args &args) {
  ProfileConfig c;
  c.artifact = args.positionals()[0];
  c.serving.device = args.getOr("--device", "cpu");
  KILN_ASSIGN_OR_RETURN(c.serving.gpuMemoryUtilization,
                        args.getFraction("--gpu-memory-utilization"));
  KILN_ASSIGN_OR_RETURN(int64_t kvMiB, args.getInt("--kv-cache-mb", 0, 1, 1 << 30));
  c.serving.kvCacheBytes = static_cast<size_t>(kvMiB) << 20;
  c.serving.verifyWeights = !args.has("--no-verify-weights");
  if (args.has("--context") && args.has("--prefill"))
    return invalidArgument("--context and --prefill choose different steps: give one of them");
  KILN_ASSIGN_OR_RETURN(int64_t batch, args.getInt("--batch", 1, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t context, args.getInt("--context", 128, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t prefill, args.getInt("--prefill", 0, 1, INT32_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t repeats, args.getInt("--repeats", 10, 1, 1000));
  KILN_ASSIGN_OR_RETURN(int64_t top, args.getInt("--top", 10, 0, 100000));
  KILN_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0, 0, INT64_MAX));
  c.request.batch = static_cast<int32_t>(batch);
  c.request.context = static_cast<int32_t>(context);
  c.request.prefill = static_cast<int32_t>(prefill);
  c.request.repeats = static_cast<int>(repeats);
  c.request.seed = static_cast<uint64_t>(seed);
  c.request.progress = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  c.roofline = args.getOr("--roofline", "");
  c.jsonOut = args.getOr("--json-out", "");
  c.top = static_cast<size_t>(top);
  c.json = args.has("--json");
  return c;
}

Result<std::string> runProfile(const ProfileConfig &c) {
  rt::Ceilings ceilings;
  if (!c.roofline.empty()) {
    KILN_ASSIGN_OR_RETURN(ceilings, rt::readRooflineJson(c.roofline));
  }
  KILN_ASSIGN_OR_RETURN(rt::DeviceName name, rt::parseDeviceName(c.serving.device));
  KILN_ASSIGN_OR_RETURN(rt::ExecutorOptions options,
                        rt::kvCacheExecutorOptions(c.serving, name.kind));
  rt::LoadOptions load;
  load.verifyWeights = c.serving.verifyWeights;
  std::fprintf(stderr, "kiln profile: loading %s\n", c.artifact.c_str());
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::Artifact> artifact,
                        rt::Artifact::load(c.artifact, load));
  if (artifact->plan().tp() != 1)
    return unimplemented("kiln profile runs one rank; " + c.artifact + " was compiled with --tp " +
                         std::to_string(artifact->plan().tp()) + " (profile a --tp 1 compile)");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::Device> device, rt::createDevice(c.serving.device));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::Executor> executor,
                        rt::Executor::create(*artifact, *device, options));
  KILN_ASSIGN_OR_RETURN(rt::ProfileReport report,
                        rt::profileStep(*executor, *artifact->plan().kv_cache(), c.request));
  nlohmann::ordered_json json = rt::profileJson(report, ceilings);
  json["artifact"] = c.artifact;
  json["device"] = c.serving.device;
  if (!c.jsonOut.empty())
    KILN_RETURN_IF_ERROR(writeFileAtomic(c.jsonOut, json.dump() + "\n").withContext("--json-out"));
  return c.json ? json.dump() + "\n" : rt::profileTable(report, ceilings, c.top);
}

} // namespace

int runProfile(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kProfileSpec, argv);
  if (!args.isOk())
    return reportError("profile", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kProfileSpec);
    return 0;
  }
  Result<ProfileConfig> config = configFrom(*args);
  if (!config.isOk())
    return reportError("profile", config.status());
  Result<std::string> out = runProfile(*config);
  if (!out.isOk())
    return reportError("profile", out.status());
  std::cout << *out;
  return 0;
}

} // namespace kiln::tools
