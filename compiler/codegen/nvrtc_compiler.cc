#include "compiler/codegen/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

namespace kiln::compiler {
namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using ProgramPtr = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::vector<std::string> defaultIncludePaths() {
  std::string root;
  if (const char *home = std::getenv("CUDA_HOME"); home && *home)
    root = std::string(home) + "/include";
  else
    root = KILN_CUDA_INCLUDE_DIR;
  std::vector<std::string> paths = {root};
  // CUDA 13 moved cuda/std (needed by the fp16/bf16 headers' cuda::std includes) under cccl/.
  if (std::filesystem::exists(root + "/cccl"))
    paths.push_back(root + "/cccl");
  return paths;
}

std::vector<int> supportedArchs() {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    return {};
  std::vector<int> archs(static_cast<size_t>(count));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS)
    return {};
  return archs;
}

std::string supportedArchList() {
  std::string list;
  for (int arch : supportedArchs())
    list += (list.empty() ? "sm_" : ", sm_") + std::to_string(arch);
  return list;
}

std::string programLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1)
    return "";
  std::string log(size, '\0');
  nvrtcGetProgramLog(program, log.data());
  log.resize(size - 1);
  return log;
}

} // namespace

Result<CompiledSource> compileCudaSource(const std::string &source, const std::string &arch,
                                         const CodegenOptions &options) {
  std::vector<KernelHeader> headers = kernelSourceHeaders();
  std::vector<const char *> headerTexts, headerNames;
  for (const KernelHeader &header : headers) {
    headerTexts.push_back(header.text.c_str());
    headerNames.push_back(header.name.c_str());
  }
  nvrtcProgram raw = nullptr;
  nvrtcResult rc =
      nvrtcCreateProgram(&raw, source.c_str(), "kiln_kernels.cu", static_cast<int>(headers.size()),
                         headerTexts.data(), headerNames.data());
  if (rc != NVRTC_SUCCESS)
    return internalError(std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(rc));
  ProgramPtr program(raw);
  std::vector<std::string> flags = {"-arch=" + arch, "-std=c++17", "-default-device"};
  for (const std::string &path :
       options.includePaths.empty() ? defaultIncludePaths() : options.includePaths)
    flags.push_back("--include-path=" + path);
  if (options.lineInfo)
    flags.push_back("-lineinfo");
  std::vector<const char *> flagPtrs;
  for (const std::string &flag : flags)
    flagPtrs.push_back(flag.c_str());
  rc = nvrtcCompileProgram(raw, static_cast<int>(flagPtrs.size()), flagPtrs.data());
  if (rc != NVRTC_SUCCESS)
    return internalError("NVRTC failed to compile the kernels for " + arch + " (" +
                         nvrtcGetErrorString(rc) + "); log:\n" + programLog(raw));
  CompiledSource compiled;
  size_t size = 0;
  if (arch.rfind("sm_", 0) == 0) {
    if (nvrtcGetCUBINSize(raw, &size) != NVRTC_SUCCESS || size == 0)
      return internalError("NVRTC produced no CUBIN for " + arch);
    compiled.cubin.resize(size);
    nvrtcGetCUBIN(raw, reinterpret_cast<char *>(compiled.cubin.data()));
  }
  if (nvrtcGetPTXSize(raw, &size) != NVRTC_SUCCESS || size <= 1)
    return internalError("NVRTC produced no PTX for " + arch);
  compiled.ptx.resize(size);
  nvrtcGetPTX(raw, reinterpret_cast<char *>(compiled.ptx.data()));
  return compiled;
}

namespace {

Result<std::vector<SmTarget>> smTargets(const std::vector<std::string> &targets) {
  std::vector<SmTarget> parsed;
  for (const std::string &target : targets) {
    if (target == "cpu")
      continue;
    KILN_ASSIGN_OR_RETURN(SmTarget sm, parseSmTarget(target));
    for (const SmTarget &seen : parsed)
      if (seen.name() == sm.name())
        return invalidArgument("target '" + target + "' is listed twice");
    parsed.push_back(sm);
  }
  return parsed;
}

} // namespace

Result<SmTarget> parseSmTarget(const std::string &target) {
  auto unsupported = [&] {
    return invalidArgument("unsupported GPU target '" + target + "': NVRTC " +
                           nvrtcVersionString() + " compiles for " + supportedArchList() +
                           " (an 'a' suffix from sm_90, 'f' from sm_100), or use 'cpu'");
  };
  if (target.rfind("sm_", 0) != 0)
    return unsupported();
  SmTarget sm;
  const char *begin = target.data() + 3;
  const char *end = target.data() + target.size();
  auto [rest, error] = std::from_chars(begin, end, sm.number);
  if (error != std::errc() || rest == begin)
    return unsupported();
  sm.suffix.assign(rest, end);
  bool suffixOk = sm.suffix.empty() || (sm.suffix == "a" && sm.number >= 90) ||
                  (sm.suffix == "f" && sm.number >= 100);
  std::vector<int> archs = supportedArchs();
  if (!suffixOk || std::find(archs.begin(), archs.end(), sm.number) == archs.end())
    return unsupported();
  return sm;
}

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

Result<std::vector<KernelModuleImage>>
compileKernelModules(const std::vector<KernelInstance> &instances,
                     const std::vector<std::string> &targets, const CodegenOptions &options) {
  KILN_ASSIGN_OR_RETURN(std::vector<SmTarget> sms, smTargets(targets));
  if (sms.empty())
    return std::vector<KernelModuleImage>();
  if (instances.empty())
    return invalidArgument("no kernel instances to compile for " + sms.front().name());
  KILN_ASSIGN_OR_RETURN(std::string source, generateKernelSource(instances));
  std::vector<std::string> symbols;
  for (const KernelInstance &instance : instances)
    symbols.push_back(instance.symbol);

  const SmTarget lowest =
      *std::min_element(sms.begin(), sms.end(), [](const SmTarget &a, const SmTarget &b) {
        return a.number != b.number ? a.number < b.number : a.suffix.size() < b.suffix.size();
      });
  // Plain sm_XX PTX is compute_XX PTX; arch-specific (a/f) PTX only runs on that SM, so then
  // PTX needs a compile of its own.
  std::vector<std::string> archs;
  for (const SmTarget &sm : sms)
    archs.push_back(sm.name());
  const std::string ptxTarget = "compute_" + std::to_string(lowest.number);
  if (!lowest.suffix.empty())
    archs.push_back(ptxTarget);
  // One NVRTC program per arch, compiled concurrently (NVRTC is thread-safe across programs).
  std::vector<std::optional<Result<CompiledSource>>> results(archs.size());
  {
    std::vector<std::jthread> workers;
    for (size_t i = 0; i < archs.size(); ++i)
      workers.emplace_back([&, i] { results[i] = compileCudaSource(source, archs[i], options); });
  }
  const std::string ptxSource = lowest.suffix.empty() ? lowest.name() : ptxTarget;
  std::vector<KernelModuleImage> modules;
  std::vector<uint8_t> ptx;
  for (size_t i = 0; i < archs.size(); ++i) {
    if (!results[i]->isOk())
      return results[i]->status();
    CompiledSource &compiled = results[i]->value();
    if (i < sms.size())
      modules.push_back({archs[i], KernelImageFormat::kCubin, std::move(compiled.cubin), symbols});
    if (archs[i] == ptxSource)
      ptx = std::move(compiled.ptx);
  }
  modules.push_back({ptxTarget, KernelImageFormat::kPtx, std::move(ptx), symbols});
  return modules;
}

} // namespace kiln::compiler
