#include "tools/cudasim/kernel_jit.h"

#include "kernels/cuda/embedded_sources.h"
#include "runtime/base/file.h"
#include "runtime/base/sha256.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

namespace kiln::cudasim {

// The device headers (embedded by tools/cudasim/CMakeLists.txt), named by their source paths.
std::span<const kernels::cuda::EmbeddedSource> deviceSources();

namespace {

// Bumped when the generated translation unit changes shape, so old cache entries are not used.
constexpr const char *kSchemeVersion = "cudasim-jit-1";
constexpr const char *kDeviceHeader = "tools/cudasim/device/cudasim_device.h";

std::vector<std::string> split(const std::string &text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos)
      return parts;
    start = end + 1;
  }
}

std::string envOr(const char *name, const std::string &fallback) {
  const char *value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

std::string shellQuote(const std::string &text) {
  std::string quoted = "'";
  for (char c : text)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Every file a kernel's translation unit can include, by include name.
std::vector<std::pair<std::string, std::string>> includeTree() {
  std::vector<std::pair<std::string, std::string>> files;
  for (const compiler::KernelHeader &header : compiler::kernelSourceHeaders())
    files.emplace_back(header.name, header.text);
  for (const kernels::cuda::EmbeddedSource &source : deviceSources())
    files.emplace_back(std::string(source.name), std::string(source.text));
  return files;
}

std::string compileFlags() {
  return "-std=c++17 -O2 -fPIC -shared -fno-strict-aliasing -w";
}

// The translation unit for one kernel: codegen's entry point plus a by-pointer trampoline (a
// kernel takes its parameter struct by value, which a generic caller cannot pass).
Result<std::string> kernelSource(const compiler::KernelInstance &instance) {
  KILN_ASSIGN_OR_RETURN(std::string source, compiler::generateKernelSource({instance}));
  KILN_ASSIGN_OR_RETURN(std::string params, compiler::kernelParamsType(instance.op));
  const std::string type = "kiln::kernels::cuda::" + params;
  source += "\nextern \"C\" const kiln_cudasim::DeviceApi *kiln_cudasim_api = nullptr;\n";
  source += "extern \"C\" void kiln_cudasim_entry(const void *p) {\n  " + instance.symbol +
            "(*static_cast<const " + type + " *>(p));\n}\n";
  source += "extern \"C\" const unsigned long kiln_cudasim_params_bytes = sizeof(" + type + ");\n";
  return source;
}

// Holds an exclusive flock on `path` while alive: processes compiling the same kernel take turns.
class FileLock {
public:
  explicit FileLock(const std::string &path) : fd_(open(path.c_str(), O_CREAT | O_RDWR, 0644)) {
    if (fd_ >= 0)
      flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0)
      close(fd_); // releases the lock
  }
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;

private:
  int fd_;
};

} // namespace

Result<compiler::KernelInstance> parseKernelSymbol(const std::string &symbol) {
  const std::string prefix = "kiln_";
  if (symbol.rfind(prefix, 0) != 0)
    return notFound("kernel symbol '" + symbol + "' is not a kiln codegen symbol (kiln_<op>_...)");
  const std::string rest = symbol.substr(prefix.size());
  std::string op;
  for (const std::string &candidate : compiler::kernelOps())
    if (rest.rfind(candidate + "_", 0) == 0 && candidate.size() > op.size())
      op = candidate;
  if (op.empty())
    return notFound("kernel symbol '" + symbol + "' names no kernel op");
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> names, compiler::kernelConstantNames(op));
  std::sort(names.begin(), names.end()); // kernelSymbol writes the values in name order
  std::vector<std::string> values = split(rest.substr(op.size() + 1), '_');
  if (values.size() != names.size())
    return notFound("kernel symbol '" + symbol + "' has " + std::to_string(values.size()) +
                    " constants; op " + op + " takes " + std::to_string(names.size()));
  compiler::KernelInstance instance;
  instance.op = op;
  instance.symbol = symbol;
  for (size_t i = 0; i < names.size(); ++i)
    instance.constants[names[i]] = values[i];
  Status valid = compiler::validateKernelInstance(instance);
  if (!valid.isOk())
    return notFound("kernel symbol '" + symbol + "': " + valid.message());
  return instance;
}

JitOptions defaultJitOptions() {
  JitOptions options;
  options.compiler = envOr("KILN_CUDASIM_CXX", KILN_CUDASIM_DEFAULT_CXX);
  std::string tmp = envOr("TMPDIR", "/tmp");
  options.cacheDir =
      envOr("KILN_CUDASIM_CACHE", tmp + "/kiln-cudasim-" + std::to_string(getuid()));
  return options;
}

struct KernelJit::State {
  std::mutex mutex;
  JitOptions options = defaultJitOptions();
  std::string treeDir; // <cache>/<hash of headers, flags, compiler>
  std::map<std::string, std::unique_ptr<HostKernel>> kernels;

  Status prepareTree();
  Result<std::string> compile(const compiler::KernelInstance &instance);
  Result<std::unique_ptr<HostKernel>> load(const std::string &library,
                                           const compiler::KernelInstance &instance);
};

// Writes the include tree once per process under a directory named by the hash of its content
// and the compile command: a changed header or compiler never reuses a stale kernel.
Status KernelJit::State::prepareTree() {
  if (!treeDir.empty())
    return okStatus();
  std::string fingerprint = std::string(kSchemeVersion) + "\n" + options.compiler + "\n" +
                            compileFlags() + "\n";
  const auto files = includeTree();
  for (const auto &[name, text] : files)
    fingerprint += name + "\n" + std::to_string(text.size()) + "\n" + text;
  const std::string dir = options.cacheDir + "/" + sha256Hex(fingerprint.data(), fingerprint.size()).substr(0, 16);
  std::error_code error;
  std::filesystem::create_directories(dir + "/include", error);
  if (error)
    return unavailable("cudasim: cannot create the kernel cache " + dir + ": " + error.message());
  for (const auto &[name, text] : files) {
    const std::string path = dir + "/include/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
    if (!fileExists(path))
      KILN_RETURN_IF_ERROR(writeFileAtomic(path, text));
  }
  treeDir = dir;
  return okStatus();
}

// Compiles the kernel into <tree>/<symbol>.so unless another process already did.
Result<std::string> KernelJit::State::compile(const compiler::KernelInstance &instance) {
  KILN_RETURN_IF_ERROR(prepareTree());
  const std::string library = treeDir + "/" + instance.symbol + ".so";
  FileLock lock(library + ".lock");
  if (fileExists(library))
    return library;
  KILN_ASSIGN_OR_RETURN(std::string source, kernelSource(instance));
  const std::string sourcePath = treeDir + "/" + instance.symbol + ".cc";
  KILN_RETURN_IF_ERROR(writeFileAtomic(sourcePath, source));
  const std::string include = treeDir + "/include";
  const std::string partial = library + ".partial";
  const std::string command = shellQuote(options.compiler) + " " + compileFlags() + " -I" +
                              shellQuote(include) + " -I" +
                              shellQuote(include + "/tools/cudasim/device") + " -include " +
                              kDeviceHeader + " -o " + shellQuote(partial) + " " +
                              shellQuote(sourcePath) + " 2>&1";
  std::string output;
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe)
    return unavailable("cudasim: cannot run the host compiler: " + command);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe))
    output.append(buffer, n);
  const int rc = pclose(pipe);
  if (rc != 0)
    return internalError("cudasim: compiling kernel " + instance.symbol + " failed (" + command +
                         "):\n" + output.substr(0, 8000));
  if (std::rename(partial.c_str(), library.c_str()) != 0)
    return internalError("cudasim: cannot rename " + partial + " to " + library);
  return library;
}

Result<std::unique_ptr<HostKernel>>
KernelJit::State::load(const std::string &library, const compiler::KernelInstance &instance) {
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return internalError("cudasim: cannot load " + library + ": " + dlerror());
  auto *api = static_cast<const kiln_cudasim::DeviceApi **>(dlsym(handle, "kiln_cudasim_api"));
  auto entry = reinterpret_cast<KernelEntry>(dlsym(handle, "kiln_cudasim_entry"));
  auto *bytes = static_cast<const unsigned long *>(dlsym(handle, "kiln_cudasim_params_bytes"));
  if (!api || !entry || !bytes)
    return internalError("cudasim: " + library + " lacks the simulator's entry points");
  *api = &deviceApi();
  KILN_ASSIGN_OR_RETURN(compiler::LaunchShape shape, compiler::launchShapeOf(instance));
  auto kernel = std::make_unique<HostKernel>();
  kernel->symbol = instance.symbol;
  kernel->entry = entry;
  kernel->paramsBytes = *bytes;
  kernel->maxThreads = static_cast<unsigned>(shape.threads);
  return kernel; // the handle stays open for the life of the process
}

KernelJit::KernelJit() : state_(new State) {}

KernelJit &KernelJit::instance() {
  static KernelJit *jit = new KernelJit; // never destroyed: kernels may run during exit
  return *jit;
}

Result<const HostKernel *> KernelJit::kernel(const std::string &symbol) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->kernels.find(symbol);
  if (it != state_->kernels.end())
    return it->second.get();
  KILN_ASSIGN_OR_RETURN(compiler::KernelInstance instance, parseKernelSymbol(symbol));
  KILN_ASSIGN_OR_RETURN(std::string library, state_->compile(instance));
  KILN_ASSIGN_OR_RETURN(auto kernel, state_->load(library, instance));
  const HostKernel *result = kernel.get();
  state_->kernels.emplace(symbol, std::move(kernel));
  return result;
}

} // namespace kiln::cudasim
