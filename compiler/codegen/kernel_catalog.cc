#include "compiler/codegen/kernel_catalog.h"

#include "kernels/cuda/embedded_sources.h"
#include "kernels/cuda/params.h"
#include "runtime/ops/op_table.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <set>

namespace kiln::compiler {
namespace {

using rt::KernelGrid;
using rt::KernelTemplate;

// Every template: the op table entries' (in table order), then the auxiliary ones.
const std::vector<KernelTemplate> &opSpecs() {
  static const std::vector<KernelTemplate> specs = [] {
    std::vector<KernelTemplate> all;
    for (const rt::OpEntry *entry : rt::opTable())
      all.insert(all.end(), entry->cuda.templates.begin(), entry->cuda.templates.end());
    const auto &aux = rt::auxiliaryKernelTemplates();
    all.insert(all.end(), aux.begin(), aux.end());
    return all;
  }();
  return specs;
}

const KernelTemplate *findSpec(const std::string &op) {
  for (const KernelTemplate &spec : opSpecs())
    if (op == spec.op)
      return &spec;
  return nullptr;
}

bool isDtypeConstant(const std::string &name) {
  return name == "dtype" || name == "weight_dtype" || name == "y_dtype" || name == "kv_dtype";
}

// Quantized experts' weight_dtype (MoE gate_up / down kernels): "q<format>g<group>", format the
// kernels' 1..6 (params.h kQuantFormat*), group a positive multiple of 32; the type
// kernels/cuda/tile_product.cuh reads them through.
bool takesQuantWeights(const std::string &op) {
  return op == "moe_gate_up" || op == "moe_down";
}
std::optional<std::string> quantWeightsType(const std::string &dtype) {
  int format = 0, group = 0;
  char tail = 0;
  if (std::sscanf(dtype.c_str(), "q%dg%d%c", &format, &group, &tail) != 2 || format < 1 ||
      format > 6 || group <= 0 || group % 32 != 0 || group > (1 << 20) ||
      dtype != "q" + std::to_string(format) + "g" + std::to_string(group))
    return std::nullopt;
  return "kiln::kernels::cuda::QuantWeights<" + std::to_string(format) + ", " +
         std::to_string(group) + ">";
}

// The C++ type of a dtype constant of `op`'s; "f8" (fp8 E4M3) only for a KV cache ("kv_dtype"),
// quantized experts only for the MoE products' weight_dtype.
std::optional<std::string> cudaType(const std::string &dtype, const std::string &name,
                                    const std::string &op) {
  if (dtype == "f32")
    return "float";
  if (dtype == "f16")
    return "__half";
  if (dtype == "bf16")
    return "__nv_bfloat16";
  if (dtype == "f8" && name == "kv_dtype")
    return "kiln::kernels::cuda::Fp8E4M3";
  if (name == "weight_dtype" && takesQuantWeights(op))
    return quantWeightsType(dtype);
  return std::nullopt;
}

int dtypeBytes(const std::string &dtype) {
  return dtype == "f32" ? 4 : dtype == "f8" ? 1 : 2;
}

// Elements per thread of the row-chunk kernels (elementwise.cuh rowVectorWidth).
int rowVectorWidth(const std::string &dtype, int64_t width) {
  const int wide = 16 / dtypeBytes(dtype);
  return width % wide == 0 ? wide : 1;
}

bool isIdentifier(const std::string &s) {
  if (s.empty() || s.size() > 200 || (s[0] >= '0' && s[0] <= '9'))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string label(const KernelInstance &instance) {
  return "kernel '" + instance.symbol + "' (" + instance.op + ")";
}

int64_t intConstant(const KernelInstance &instance, const char *name) {
  int64_t value = 0;
  const std::string &text = instance.constants.at(name);
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// Limits of one integer constant: a template argument must fit the kernels' int arithmetic.
constexpr int64_t kMaxConstant = 1 << 20;

Status checkConstantValue(const KernelInstance &instance, const std::string &name,
                          const std::string &text) {
  if (isDtypeConstant(name)) {
    if (!cudaType(text, name, instance.op))
      return invalidArgument(label(instance) + ": constant '" + name + "' is '" + text +
                             "'; expected f32, f16 or bf16" +
                             (name == "kv_dtype" ? std::string(" or f8")
                              : name == "weight_dtype" && takesQuantWeights(instance.op)
                                  ? std::string(" or q<format 1..6>g<group, a multiple of 32>")
                                  : std::string()));
    return okStatus();
  }
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxConstant)
    return invalidArgument(label(instance) + ": constant '" + name + "' is '" + text +
                           "'; expected an integer in [1, " + std::to_string(kMaxConstant) + "]");
  if (name == "threads" && (value % 32 != 0 || value > 1024))
    return invalidArgument(label(instance) + ": constant 'threads' is " + text +
                           "; expected a multiple of 32, at most 1024");
  return okStatus();
}

// Relations the templates static_assert, checked here for a clearer message than NVRTC's.
Status checkConstantRelations(const KernelInstance &instance) {
  const auto &c = instance.constants;
  if (c.count("num_kv_heads") &&
      intConstant(instance, "num_heads") % intConstant(instance, "num_kv_heads") != 0)
    return invalidArgument(label(instance) + ": num_heads " + c.at("num_heads") +
                           " is not a multiple of num_kv_heads " + c.at("num_kv_heads"));
  if (c.count("rotary_dim")) {
    int64_t rotary = intConstant(instance, "rotary_dim");
    if (rotary % 2 != 0 || rotary > intConstant(instance, "head_dim"))
      return invalidArgument(label(instance) + ": rotary_dim " + c.at("rotary_dim") +
                             " must be even and at most head_dim " + c.at("head_dim"));
  }
  for (const char *dtype : {"dtype", "kv_dtype"})
    if (instance.op.rfind("attention_", 0) == 0 && c.count(dtype) &&
        intConstant(instance, "head_dim") * dtypeBytes(c.at(dtype)) % 16 != 0)
      return invalidArgument(label(instance) + ": head_dim " + c.at("head_dim") + " of " +
                             c.at(dtype) + " is not a whole number of 16-byte vectors");
  return okStatus();
}

} // namespace

const std::vector<std::string> &kernelOps() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> names;
    for (const KernelTemplate &spec : opSpecs())
      names.emplace_back(spec.op);
    return names;
  }();
  return ops;
}

namespace {
Status unknownOp(const std::string &op) {
  std::string known;
  for (const std::string &name : kernelOps())
    known += (known.empty() ? "" : ", ") + name;
  return invalidArgument("unknown kernel op '" + op + "'; kernel templates exist for " + known);
}
} // namespace

Result<std::vector<std::string>> kernelConstantNames(const std::string &op) {
  const KernelTemplate *spec = findSpec(op);
  if (!spec)
    return unknownOp(op);
  return std::vector<std::string>(spec->constants.begin(), spec->constants.end());
}

Result<std::string> kernelParamsType(const std::string &op) {
  const KernelTemplate *spec = findSpec(op);
  if (!spec)
    return unknownOp(op);
  return std::string(spec->paramsType);
}

Status validateKernelInstance(const KernelInstance &instance) {
  const KernelTemplate *spec = findSpec(instance.op);
  if (!spec) {
    std::string known;
    for (const std::string &op : kernelOps())
      known += (known.empty() ? "" : ", ") + op;
    return invalidArgument("kernel '" + instance.symbol + "': unknown op '" + instance.op +
                           "'; kernel templates exist for " + known);
  }
  if (!isIdentifier(instance.symbol))
    return invalidArgument("kernel symbol '" + instance.symbol + "' (" + instance.op +
                           ") is not a C identifier of at most 200 characters");
  for (const char *name : spec->constants) {
    auto it = instance.constants.find(name);
    if (it == instance.constants.end())
      return invalidArgument(label(instance) + ": missing constant '" + name + "'");
    KILN_RETURN_IF_ERROR(checkConstantValue(instance, name, it->second));
  }
  for (const auto &[name, value] : instance.constants)
    if (std::find_if(spec->constants.begin(), spec->constants.end(),
                     [&](const char *n) { return name == n; }) == spec->constants.end())
      return invalidArgument(label(instance) + ": unknown constant '" + name + "'");
  return checkConstantRelations(instance);
}

Result<LaunchShape> launchShapeOf(const KernelInstance &instance) {
  KILN_RETURN_IF_ERROR(validateKernelInstance(instance));
  const KernelTemplate &spec = *findSpec(instance.op);
  LaunchShape shape;
  if (spec.grid == KernelGrid::kAttention) {
    shape.gridRows = GridRows::kAttention;
    shape.threads = kernels::cuda::kAttentionThreads;
    return shape;
  }
  if (spec.grid == KernelGrid::kGemv) {
    shape.gridRows = GridRows::kGemv;
    shape.threads = kernels::cuda::kGemvThreads;
    return shape;
  }
  shape.threads = static_cast<int32_t>(intConstant(instance, "threads"));
  if (spec.grid == KernelGrid::kRowCta) {
    if (spec.fixedGridY > 0)
      shape.gridY = spec.fixedGridY;
    return shape;
  }
  const int64_t width = intConstant(instance, spec.widthConstant);
  int vec = rowVectorWidth(instance.constants.at("dtype"), width);
  if (spec.grid == KernelGrid::kRowChunksMixed)
    vec = std::min(vec, rowVectorWidth(instance.constants.at("weight_dtype"), width));
  const int64_t chunk = static_cast<int64_t>(shape.threads) * vec;
  shape.gridY = static_cast<int32_t>((width + chunk - 1) / chunk);
  return shape;
}

Result<std::string> generateKernelSource(const std::vector<KernelInstance> &instances) {
  std::set<std::string> headers;
  std::set<std::string> symbols;
  std::string body;
  for (const KernelInstance &instance : instances) {
    KILN_RETURN_IF_ERROR(validateKernelInstance(instance));
    if (!symbols.insert(instance.symbol).second)
      return invalidArgument("kernel symbol '" + instance.symbol + "' is defined twice");
    const KernelTemplate &spec = *findSpec(instance.op);
    KILN_ASSIGN_OR_RETURN(LaunchShape shape, launchShapeOf(instance));
    headers.insert(spec.header);
    std::string args;
    for (const char *name : spec.constants) {
      const std::string &value = instance.constants.at(name);
      args += (args.empty() ? "" : ", ") +
              (isDtypeConstant(name) ? *cudaType(value, name, instance.op) : value);
    }
    std::string call = std::string("kiln::kernels::cuda::") + spec.callee + "<" + args + ">";
    if (spec.callee[0] >= 'A' && spec.callee[0] <= 'Z') // a struct template: its run()
      call += "::run";
    body += "\n// " + instance.op + "\nextern \"C\" __global__ void __launch_bounds__(" +
            std::to_string(shape.threads) + ") " + instance.symbol +
            "(const kiln::kernels::cuda::" + spec.paramsType +
            " p) {\n  kiln::kernels::cuda::allowDependentGrids();\n  " + call + "(p);\n}\n";
  }
  std::string source = "// Generated by kiln codegen: one entry point per kernel instance.\n";
  for (const std::string &header : headers)
    source += "#include \"kiln/" + header + "\"\n";
  return source + body;
}

std::vector<KernelHeader> kernelSourceHeaders() {
  std::vector<KernelHeader> headers;
  for (const kernels::cuda::EmbeddedSource &source : kernels::cuda::embeddedSources())
    headers.push_back({"kiln/" + std::string(source.name), std::string(source.text)});
  return headers;
}

} // namespace kiln::compiler
