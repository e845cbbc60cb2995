// The simulated driver's modules. An image is checked as a GPU checks it (a CUBIN for the
// device's SM, or PTX it can JIT), its kernel names are read from it, and cuModuleGetFunction
// hands out the host build of the named kernel (kernel_jit.h): the simulator never executes
// the image itself.
//
// Where a CUBIN says its SM (measured on CUDA 13.0 cubins from nvcc -cubin and NVRTC, read
// with readelf): e_machine is EM_CUDA (190); e_ident[EI_OSABI] is 0x41 and
// e_ident[EI_ABIVERSION] is 8. With ABI version 8 the SM is bits 8..15 of e_flags (sm_80:
// 0x06005004, sm_90: 0x06005a04, sm_100: 0x06006402, sm_120: 0x06007802); older toolkits wrote
// ABI version 7 with the SM in bits 0..7 (sm_90: 0x005a055a). sm_90 and sm_90a cubins have the
// same e_flags: the arch-specific "a" is attribute 0x09 = 1 of the .nv.compat section (records
// of format byte, attribute byte, then a 2-byte value, or for format 4 a 2-byte size and that
// many bytes). sm_100f cubins are byte-identical to sm_100 ones.
#include "tools/cudasim/sim_driver_state.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

using namespace kiln;
using namespace kiln::cudasim;
using namespace kiln::cudasim::driver;

namespace {

constexpr uint16_t kMachineCuda = 190;
constexpr size_t kMaxImageBytes = size_t(1) << 30; // bounds a header's offsets: no size is given
constexpr int kDriverPtxMajor = 9; // the newest PTX ISA this driver (13.0) JIT-compiles
constexpr int kDriverPtxMinor = 0;

template <typename T> T readAt(const uint8_t *image, size_t offset) {
  T value;
  std::memcpy(&value, image + offset, sizeof(T));
  return value;
}

struct Section {
  uint32_t nameOffset = 0;
  std::string name;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
};

CUresult invalidImage(std::string &detail, const std::string &why) {
  detail = "cuModuleLoadDataEx: " + why;
  return CUDA_ERROR_INVALID_IMAGE;
}

bool readSections(const uint8_t *image, std::vector<Section> &sections, std::string &why) {
  const uint64_t shoff = readAt<uint64_t>(image, 40);
  const uint16_t shentsize = readAt<uint16_t>(image, 58);
  const uint16_t shnum = readAt<uint16_t>(image, 60);
  const uint16_t shstrndx = readAt<uint16_t>(image, 62);
  if (shentsize != 64 || shoff > kMaxImageBytes || shnum == 0 || shstrndx >= shnum) {
    why = "the CUBIN's section header table is malformed";
    return false;
  }
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint8_t *h = image + shoff + size_t(i) * 64;
    Section s;
    s.nameOffset = readAt<uint32_t>(h, 0);
    s.type = readAt<uint32_t>(h, 4);
    s.offset = readAt<uint64_t>(h, 24);
    s.size = readAt<uint64_t>(h, 32);
    s.link = readAt<uint32_t>(h, 40);
    if (s.offset > kMaxImageBytes || s.size > kMaxImageBytes) {
      why = "the CUBIN's section " + std::to_string(i) + " lies beyond any sane image size";
      return false;
    }
    sections.push_back(s);
  }
  const Section &names = sections[shstrndx];
  for (Section &s : sections) {
    if (s.nameOffset >= names.size)
      continue;
    const char *text = reinterpret_cast<const char *>(image + names.offset + s.nameOffset);
    s.name.assign(text, strnlen(text, names.size - s.nameOffset));
  }
  return true;
}

// Attribute 0x09 of .nv.compat: 1 for an arch-specific (sm_XXa) build.
bool archSpecific(const uint8_t *image, const Section &compat) {
  const uint8_t *p = image + compat.offset;
  size_t at = 0;
  while (at + 4 <= compat.size) {
    const uint8_t format = p[at], attribute = p[at + 1];
    if (format == 0)
      break;
    if (attribute == 0x09 && format != 4)
      return p[at + 2] != 0;
    at += format == 4 ? 4 + readAt<uint16_t>(p, at + 2) : 4;
  }
  return false;
}

void readKernels(const uint8_t *image, const std::vector<Section> &sections, ImageInfo &info) {
  for (const Section &symtab : sections) {
    if (symtab.type != 2 /* SHT_SYMTAB */ || symtab.link >= sections.size())
      continue;
    const Section &strings = sections[symtab.link];
    for (uint64_t at = 0; at + 24 <= symtab.size; at += 24) {
      const uint8_t *sym = image + symtab.offset + at;
      const uint32_t name = readAt<uint32_t>(sym, 0);
      const uint8_t symbolInfo = sym[4];
      // Global functions: the kernels (their entry flag is in st_other, not needed here).
      if ((symbolInfo & 0xf) != 2 || (symbolInfo >> 4) != 1 || name >= strings.size)
        continue;
      const char *text = reinterpret_cast<const char *>(image + strings.offset + name);
      info.kernels.insert(std::string(text, strnlen(text, strings.size - name)));
    }
  }
}

CUresult parseCubin(const uint8_t *image, ImageInfo &info, std::string &detail) {
  if (image[4] != 2 || image[5] != 1)
    return invalidImage(detail, "the ELF image is not 64-bit little-endian, so not a CUBIN");
  const uint16_t machine = readAt<uint16_t>(image, 18);
  if (machine != kMachineCuda)
    return invalidImage(detail, "the ELF image is for machine " + std::to_string(machine) +
                                    ", not EM_CUDA (190): not a CUBIN");
  const uint32_t flags = readAt<uint32_t>(image, 48);
  const int abiVersion = image[8];
  info.ptx = false;
  info.sm = static_cast<int>(abiVersion >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
  std::vector<Section> sections;
  std::string why;
  if (!readSections(image, sections, why))
    return invalidImage(detail, why);
  for (const Section &s : sections)
    if (s.name == ".nv.compat" && archSpecific(image, s))
      info.suffix = 'a';
  readKernels(image, sections, info);
  if (info.sm < 30)
    return invalidImage(detail, "the CUBIN's e_flags (" + hexAddress(flags) + ") name no SM");
  return CUDA_SUCCESS;
}

// "sm_90a" -> (90, 'a'); false when it is not an SM target.
bool parseTarget(const std::string &target, int &sm, char &suffix) {
  if (target.rfind("sm_", 0) != 0)
    return false;
  size_t i = 3;
  sm = 0;
  while (i < target.size() && std::isdigit(static_cast<unsigned char>(target[i])))
    sm = sm * 10 + (target[i++] - '0');
  suffix = i < target.size() ? target[i++] : 0;
  return sm > 0 && i == target.size() && (suffix == 0 || suffix == 'a' || suffix == 'f');
}

// The word after `directive` (".target", ".version"), or empty.
std::string directiveValue(const std::string &text, const std::string &directive) {
  for (size_t at = text.find(directive); at != std::string::npos;
       at = text.find(directive, at + 1)) {
    const size_t end = at + directive.size();
    if (end >= text.size() || !std::isspace(static_cast<unsigned char>(text[end])))
      continue;
    size_t begin = text.find_first_not_of(" \t", end);
    size_t stop = text.find_first_of(" \t\r\n,", begin);
    return text.substr(begin, stop == std::string::npos ? std::string::npos : stop - begin);
  }
  return "";
}

CUresult parsePtx(const std::string &text, ImageInfo &info, std::string &detail) {
  info.ptx = true;
  const std::string version = directiveValue(text, ".version");
  const std::string target = directiveValue(text, ".target");
  if (version.empty() || target.empty() ||
      std::sscanf(version.c_str(), "%d.%d", &info.ptxMajor, &info.ptxMinor) != 2 ||
      !parseTarget(target, info.sm, info.suffix)) {
    detail = "cuModuleLoadDataEx: the PTX lacks a valid .version or .target sm_XX directive "
             "(.version '" +
             version + "', .target '" + target + "')";
    return CUDA_ERROR_INVALID_PTX;
  }
  if (info.ptxMajor > kDriverPtxMajor ||
      (info.ptxMajor == kDriverPtxMajor && info.ptxMinor > kDriverPtxMinor)) {
    detail = "cuModuleLoadDataEx: PTX ISA " + version +
             " is newer than this driver (13.0) "
             "compiles (" +
             std::to_string(kDriverPtxMajor) + "." + std::to_string(kDriverPtxMinor) + ")";
    return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  for (size_t at = text.find(".entry"); at != std::string::npos; at = text.find(".entry", at + 1)) {
    size_t begin = text.find_first_not_of(" \t\r\n", at + 6);
    size_t end = text.find_first_of(" \t\r\n(", begin);
    if (begin != std::string::npos && end != std::string::npos && begin > at + 6)
      info.kernels.insert(text.substr(begin, end - begin));
  }
  return CUDA_SUCCESS;
}

// JIT options kiln passes: the error log buffer and its size (in: capacity, out: bytes written).
void writeErrorLog(unsigned count, CUjit_option *options, void **values, const std::string &log) {
  char *buffer = nullptr;
  size_t capacity = 0;
  int sizeIndex = -1;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
      buffer = static_cast<char *>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      capacity = reinterpret_cast<uintptr_t>(values[i]);
      sizeIndex = static_cast<int>(i);
    }
  }
  if (!buffer || capacity == 0)
    return;
  const size_t n = std::min(log.size(), capacity - 1);
  std::memcpy(buffer, log.data(), n);
  buffer[n] = '\0';
  values[sizeIndex] = reinterpret_cast<void *>(static_cast<uintptr_t>(n + 1));
}

} // namespace

namespace kiln::cudasim::driver {

std::string ImageInfo::describe() const {
  const std::string target = "sm_" + std::to_string(sm) + (suffix ? std::string(1, suffix) : "");
  return ptx ? "PTX .target " + target : target + " CUBIN";
}

CUresult parseImage(const void *data, ImageInfo &info, std::string &detail) {
  const auto *image = static_cast<const uint8_t *>(data);
  if (std::memcmp(image,
                  "\x7f"
                  "ELF",
                  4) == 0)
    return parseCubin(image, info, detail);
  if (readAt<uint32_t>(image, 0) == 0xBA55ED50u) {
    detail = "cuModuleLoadDataEx: fatbinary images are not simulated (kiln loads a CUBIN or PTX)";
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // PTX is NUL-terminated text; anything else is garbage.
  size_t length = 0;
  for (; length < kMaxImageBytes && image[length] != 0; ++length) {
    const uint8_t c = image[length];
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return invalidImage(detail, "neither a CUBIN (ELF) nor PTX text: byte " + std::to_string(c) +
                                      " at offset " + std::to_string(length));
  }
  if (length == 0)
    return invalidImage(detail, "the image is empty");
  return parsePtx(std::string(reinterpret_cast<const char *>(image), length), info, detail);
}

// A CUBIN runs on its own SM, or a later minor of the same major unless it is arch-specific;
// PTX JIT-compiles for its target or any later SM, except arch-specific PTX (its SM only) and
// family PTX (the same major).
CUresult checkImageForDevice(const ImageInfo &info, const Device &device, std::string &detail) {
  const int sm = device.sm();
  bool runs = info.sm == sm;
  if (!info.ptx)
    runs = runs || (info.suffix != 'a' && info.sm / 10 == sm / 10 && info.sm < sm);
  else if (info.suffix == 0)
    runs = runs || info.sm < sm;
  else if (info.suffix == 'f')
    runs = runs || (info.sm / 10 == sm / 10 && info.sm < sm);
  if (runs)
    return CUDA_SUCCESS;
  detail = "cuModuleLoadDataEx: a " + info.describe() + " image cannot run on device " +
           std::to_string(device.ordinal) + " (sm_" + std::to_string(sm) + ", compute capability " +
           std::to_string(device.major) + "." + std::to_string(device.minor) + ", KILN_CUDASIM_SM)";
  return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

} // namespace kiln::cudasim::driver

extern "C" {

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
  const char *api = "cuModuleLoadDataEx";
  Driver &d = state();
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  if (!module || !image || (numOptions > 0 && (!options || !optionValues)))
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null module, image or options");
  auto loaded = std::make_unique<Module>();
  loaded->context = ctx;
  std::string detail;
  CUresult rc = parseImage(image, loaded->image, detail);
  if (rc == CUDA_SUCCESS)
    rc = checkImageForDevice(loaded->image, *ctx->device, detail);
  if (rc != CUDA_SUCCESS) {
    writeErrorLog(numOptions, options, optionValues, detail);
    return fail(rc, detail);
  }
  *module = reinterpret_cast<CUmodule>(loaded.get());
  d.modules[loaded.get()] = std::move(loaded);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  Driver &d = state();
  Graveyard graveyard;
  std::lock_guard<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext("cuModuleUnload", &ctx, /*allowSticky=*/true))
    return rc;
  auto it = d.modules.find(reinterpret_cast<Module *>(module));
  if (it == d.modules.end())
    return fail(CUDA_ERROR_INVALID_HANDLE,
                "cuModuleUnload: " + hexAddress(reinterpret_cast<uintptr_t>(module)) +
                    " is not a loaded module");
  for (auto &[name, function] : it->second->functions) {
    auto f = d.functions.find(function);
    graveyard.functions.push_back(std::move(f->second));
    d.functions.erase(f);
  }
  graveyard.modules.push_back(std::move(it->second));
  d.modules.erase(it);
  return ctx->sticky;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  const char *api = "cuModuleGetFunction";
  Driver &d = state();
  std::unique_lock<std::mutex> lock(d.mutex);
  Context *ctx = nullptr;
  if (CUresult rc = enterContext(api, &ctx))
    return rc;
  if (!function || !name)
    return fail(CUDA_ERROR_INVALID_VALUE, std::string(api) + ": null function or name");
  auto it = d.modules.find(reinterpret_cast<Module *>(module));
  if (it == d.modules.end())
    return fail(CUDA_ERROR_INVALID_HANDLE, std::string(api) + "(" + name + "): " +
                                               hexAddress(reinterpret_cast<uintptr_t>(module)) +
                                               " is not a loaded module");
  Module *loaded = it->first;
  if (auto known = loaded->functions.find(name); known != loaded->functions.end()) {
    *function = reinterpret_cast<CUfunction>(known->second);
    return CUDA_SUCCESS;
  }
  if (!loaded->image.kernels.count(name)) {
    std::string list;
    for (const std::string &kernel : loaded->image.kernels)
      list += (list.empty() ? "" : ", ") + kernel;
    return fail(CUDA_ERROR_NOT_FOUND, std::string(api) + ": the " + loaded->image.describe() +
                                          " module has no kernel '" + name +
                                          "' (it has: " + (list.empty() ? "none" : list) + ")");
  }
  // The host build may take seconds to compile: other threads keep using the driver meanwhile.
  lock.unlock();
  Result<const HostKernel *> kernel = KernelJit::instance().kernel(name);
  lock.lock();
  if (!kernel.isOk())
    return fail(CUDA_ERROR_NOT_FOUND,
                std::string(api) + "(" + name +
                    "): no host build of the kernel: " + kernel.status().message());
  if (!d.modules.count(loaded))
    return fail(CUDA_ERROR_INVALID_HANDLE,
                std::string(api) + "(" + name + "): the module was unloaded meanwhile");
  auto made = std::make_unique<Function>();
  made->module = loaded;
  made->kernel = kernel.value();
  Function *handle = made.get();
  if (auto raced = loaded->functions.find(name); raced != loaded->functions.end())
    handle = raced->second; // another thread got it first
  else {
    loaded->functions[name] = handle;
    d.functions[handle] = std::move(made);
  }
  *function = reinterpret_cast<CUfunction>(handle);
  return CUDA_SUCCESS;
}

} // extern "C"
