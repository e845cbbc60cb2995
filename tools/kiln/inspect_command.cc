// `kiln inspect ARTIFACT`: the artifact (model, maxima, KV spec, per-rank program, buffers and
// weights index, kernel modules) as JSON. `--summary` prints the headline numbers only; `--device
// cpu` adds the cpu kernels' instruction-set level and threads (alone without an ARTIFACT).
#include "runtime/artifact/artifact.h"
#include "runtime/artifact/kv_layout.h"
#include "runtime/hal/cpu_device.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>

namespace kiln::tools {
namespace {

using nlohmann::json;

const CommandSpec kInspectSpec = {
    "inspect",
    "[ARTIFACT] [--summary] [--no-verify-weights] [--device cpu]",
    "Print a kiln artifact as JSON: model, compiled maxima, KV cache spec, per-rank step program,\n"
    "buffers, weights index and kernel modules. --device cpu adds (or, without ARTIFACT, prints\n"
    "alone) what the cpu kernels run with: instruction-set level, the levels this CPU has\n"
    "(KILN_CPU_ISA may name any of them) and threads.",
    {
        {"--device", "cpu", "also print the cpu kernels' instruction-set level and threads"},
        {"--summary", "",
         "only the model, maxima, KV spec and per-rank totals, weight shapes and "
         "bytes"},
        {"--no-verify-weights", "", "skip the weights sha256 check (faster on large models)"},
    },
    0,
    1,
};

template <typename T> json vectorOf(const flatbuffers::Vector<T> *values) {
  json out = json::array();
  if (values)
    for (T v : *values)
      out.push_back(v);
  return out;
}

std::string str(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

json modelJson(const schema::ModelInfo &m) {
  return {{"family", str(m.family())},
          {"architecture", str(m.architecture())},
          {"vocab_size", m.vocab_size()},
          {"hidden_size", m.hidden_size()},
          {"intermediate_size", m.intermediate_size()},
          {"num_layers", m.num_layers()},
          {"num_heads", m.num_heads()},
          {"num_kv_heads", m.num_kv_heads()},
          {"head_dim", m.head_dim()},
          {"rms_norm_eps", m.rms_norm_eps()},
          {"rope_theta", m.rope_theta()},
          {"rope_scaling", str(m.rope_scaling())},
          {"tie_word_embeddings", m.tie_word_embeddings()},
          {"max_position_embeddings", m.max_position_embeddings()},
          {"bos_token_id", m.bos_token_id()},
          {"eos_token_ids", vectorOf(m.eos_token_ids())},
          {"pad_token_id", m.pad_token_id()},
          {"has_chat_template", m.chat_template() && m.chat_template()->size() > 0},
          {"source_dtype", rt::dtypeName(m.source_dtype())}};
}

// The KV cache's groups and each layer's budget (plan.fbs "KV cache groups"): the blocks one
// sequence of max_seq_len tokens holds per layer while it decodes (a sliding-window layer keeps
// only the blocks of its last window) and their bytes, K and V, on one rank.
json kvCacheJson(const schema::Plan &plan) {
  const schema::KvCacheSpec &kv = *plan.kv_cache();
  json out = {{"num_layers", kv.num_layers()},
              {"num_kv_heads", kv.num_kv_heads()},
              {"head_dim", kv.head_dim()},
              {"block_size", kv.block_size()},
              {"dtype", rt::dtypeName(kv.dtype())}};
  Result<rt::KvLayout> layout = rt::kvLayoutOf(kv);
  if (!layout.isOk())
    return out;
  const uint64_t layerBlockBytes =
      2ull * kv.num_kv_heads() * kv.block_size() * kv.head_dim() * rt::dtypeSize(kv.dtype());
  const auto maxSeqLen = static_cast<int32_t>(plan.limits()->max_seq_len());
  const auto blockSize = static_cast<int32_t>(kv.block_size());
  const int32_t allBlocks = (maxSeqLen + blockSize - 1) / blockSize;
  json groups = json::array(), layers = json::array();
  uint64_t sequenceBytes = 0;
  std::vector<int32_t> blocksOfGroup;
  for (size_t g = 0; g < layout->groupWindows.size(); ++g) {
    const int32_t window = layout->groupWindows[g];
    // Decoding at position p reads blocks floor((p - W + 1) / bs) .. floor(p / bs).
    const int32_t held = window > 0 ? std::min(allBlocks, (window - 1) / blockSize + 2) : allBlocks;
    blocksOfGroup.push_back(held);
    groups.push_back({{"sliding_window", window}, {"kv_blocks_per_sequence", held}});
  }
  for (uint32_t l = 0; l < kv.num_layers(); ++l) {
    const uint32_t g = layout->groupOfLayer[l];
    const uint64_t bytes = uint64_t(blocksOfGroup[g]) * layerBlockBytes;
    sequenceBytes += bytes;
    groups[g]["layers"].push_back(l);
    layers.push_back({{"layer", l},
                      {"group", g},
                      {"sliding_window", layout->groupWindows[g]},
                      {"kv_blocks_per_sequence", blocksOfGroup[g]},
                      {"kv_bytes_per_sequence", bytes}});
    if (kv.k_scales() && l < kv.k_scales()->size()) // an fp8 cache's calibrated scales
      layers.back()["k_scale"] = kv.k_scales()->Get(l);
    if (kv.v_scales() && l < kv.v_scales()->size())
      layers.back()["v_scale"] = kv.v_scales()->Get(l);
  }
  out["block_bytes"] = uint64_t(layout->numSlots) * layerBlockBytes;
  out["groups"] = std::move(groups);
  out["layers"] = std::move(layers);
  out["kv_bytes_per_sequence"] = sequenceBytes;
  out["kv_bytes_per_sequence_without_windows"] =
      uint64_t(allBlocks) * layerBlockBytes * kv.num_layers();
  return out;
}

json headerJson(const schema::Plan &plan) {
  const schema::CompiledLimits &l = *plan.limits();
  json targets = json::array();
  if (plan.targets())
    for (const auto *t : *plan.targets())
      targets.push_back(t->str());
  return {{"schema_version", plan.schema_version()},
          {"compiler_version", str(plan.compiler_version())},
          {"cuda_version", str(plan.cuda_version())},
          {"tp", plan.tp()},
          {"targets", targets},
          {"activation_dtype", rt::dtypeName(plan.activation_dtype())},
          {"model", modelJson(*plan.model())},
          {"limits",
           {{"max_batch", l.max_batch()},
            {"max_seq_len", l.max_seq_len()},
            {"max_tokens_per_step", l.max_tokens_per_step()},
            {"max_blocks_per_seq", l.max_blocks_per_seq()}}},
          {"kv_cache", kvCacheJson(plan)}};
}

json weightsJson(const schema::Rank &rank, uint64_t &totalBytes) {
  json weights = json::array();
  totalBytes = 0;
  for (const schema::WeightEntry *w : *rank.weights()) {
    totalBytes += w->size();
    json entry = {{"name", str(w->name())},
                  {"dtype", rt::dtypeName(w->dtype())},
                  {"format", rt::weightFormatName(w->dtype(), w->group_size())},
                  {"shape", vectorOf(w->shape())},
                  {"offset", w->offset()},
                  {"bytes", w->size()},
                  {"sha256", str(w->sha256())}};
    if (rt::isQuantDType(w->dtype()))
      entry["group_size"] = w->group_size();
    weights.push_back(std::move(entry));
  }
  return weights;
}

// How many weights, and bytes, of each format: {"F32": {...}, "Q4M g32": {...}}.
json weightFormatsJson(const json &weights) {
  json formats = json::object();
  for (const json &w : weights) {
    json &f = formats[w["format"].get<std::string>()];
    if (f.is_null())
      f = {{"weights", 0}, {"bytes", uint64_t{0}}};
    f["weights"] = f["weights"].get<int>() + 1;
    f["bytes"] = f["bytes"].get<uint64_t>() + w["bytes"].get<uint64_t>();
  }
  return formats;
}

json programJson(const schema::Rank &rank) {
  json ops = json::array();
  for (const schema::Op *op : *rank.program()) {
    ops.push_back({{"name", str(op->name())},
                   {"kind", rt::opKindName(op->params_type())},
                   {"inputs", vectorOf(op->inputs())},
                   {"outputs", vectorOf(op->outputs())},
                   {"kernel", str(op->kernel())}});
  }
  return ops;
}

json buffersJson(const schema::Rank &rank) {
  static const char *kKinds[] = {"weight", "activation", "step_input"};
  json buffers = json::array();
  for (const schema::Buffer *b : *rank.buffers()) {
    json entry = {{"name", str(b->name())},
                  {"kind", kKinds[static_cast<int>(b->kind()) % 3]},
                  {"dtype", rt::dtypeName(b->dtype())},
                  {"shape", vectorOf(b->shape())},
                  {"bytes", b->size_bytes()}};
    if (b->kind() == schema::BufferKind::Activation)
      entry["arena_offset"] = b->arena_offset();
    if (b->kind() == schema::BufferKind::Weight)
      entry["weight"] = b->weight();
    if (rt::isQuantDType(b->dtype()))
      entry["group_size"] = b->group_size();
    buffers.push_back(entry);
  }
  return buffers;
}

uint64_t elementsOf(const schema::Buffer &b) {
  uint64_t n = 1;
  for (uint64_t d : *b.shape())
    n *= d;
  return n;
}

// A mixture-of-experts plan: its experts and the parameters a token reads (the rank's share):
// every weight but the experts', plus top_k / num_experts of each MoE layer's expert weights.
// Null for a dense plan.
json mixtureOfExpertsJson(const schema::Rank &rank) {
  uint64_t all = 0, experts = 0, active = 0, layers = 0, count = 0, perToken = 0;
  for (const schema::Buffer *b : *rank.buffers())
    if (b->kind() == schema::BufferKind::Weight)
      all += elementsOf(*b);
  for (const schema::Op *op : *rank.program()) {
    const schema::MoeExpertsParams *p = op->params_as_MoeExpertsParams();
    if (!p)
      continue;
    uint64_t layer = 0;
    for (uint32_t i : {2u, 3u})
      layer += elementsOf(*rank.buffers()->Get(op->inputs()->Get(i)));
    experts += layer;
    active += layer / p->num_experts() * p->top_k();
    ++layers;
    count = p->num_experts();
    perToken = p->top_k();
  }
  if (layers == 0)
    return nullptr;
  return {{"moe_layers", layers},          {"experts", count},
          {"experts_per_token", perToken}, {"parameters", all},
          {"expert_parameters", experts},  {"active_parameters_per_token", all - experts + active}};
}

json rankJson(const schema::Rank &rank, bool summary) {
  uint64_t weightBytes = 0;
  json weights = weightsJson(rank, weightBytes);
  json out = {{"rank", rank.rank()},
              {"weights_file", str(rank.weights_file())},
              {"weights_file_size", rank.weights_file_size()},
              {"num_weights", rank.weights()->size()},
              {"weight_bytes", weightBytes},
              {"weight_formats", weightFormatsJson(weights)},
              {"num_ops", rank.program()->size()},
              {"arena_bytes", rank.arena_bytes()}};
  if (json moe = mixtureOfExpertsJson(rank); !moe.is_null())
    out["mixture_of_experts"] = std::move(moe);
  if (!summary) {
    out["program"] = programJson(rank);
    out["buffers"] = buffersJson(rank);
    out["weights"] = std::move(weights);
  } else {
    // Each rank's shapes and bytes, so a tensor-parallel split can be read off at a glance.
    json shards = json::array();
    for (const json &w : weights)
      shards.push_back({{"name", w["name"]},
                        {"format", w["format"]},
                        {"shape", w["shape"]},
                        {"bytes", w["bytes"]}});
    out["weights"] = std::move(shards);
  }
  return out;
}

json kernelModulesJson(const schema::Plan &plan) {
  json modules = json::array();
  if (plan.kernel_modules())
    for (const schema::KernelModule *m : *plan.kernel_modules())
      modules.push_back({{"target", str(m->target())},
                         {"format", m->format() == schema::KernelFormat::Ptx ? "ptx" : "cubin"},
                         {"bytes", m->image() ? m->image()->size() : 0},
                         {"kernels", m->kernels() ? m->kernels()->size() : 0}});
  return modules;
}

// JSON indented two spaces, except that arrays of scalars, and small objects (at most 4 members)
// holding only scalars and such arrays, print on one line: one weight per line in --summary
// rather than seven.
void printReadable(std::ostream &out, const json &value, int indent) {
  auto flat = [](const json &v) {
    if (!v.is_structured())
      return true;
    if (v.is_object() && v.size() > 4)
      return false;
    for (const json &item : v)
      if (item.is_object() ||
          (item.is_array() && !std::all_of(item.begin(), item.end(),
                                           [](const json &x) { return !x.is_structured(); })))
        return false;
    return true;
  };
  if (flat(value)) {
    out << value.dump();
    return;
  }
  std::string pad(indent + 2, ' ');
  bool object = value.is_object();
  out << (object ? "{" : "[");
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    out << (first ? "\n" : ",\n") << pad;
    first = false;
    if (object)
      out << json(it.key()).dump() << ": ";
    printReadable(out, *it, indent + 2);
  }
  out << "\n" << std::string(indent, ' ') << (object ? "}" : "]");
}

// What the cpu kernels run with in this process (runtime/hal/cpu_device.h).
json cpuDeviceJson() {
  return {{"kind", "cpu"},
          {"cpu_isa", rt::cpuKernelIsa()},
          {"cpu_isas_available", rt::cpuKernelIsasAvailable()},
          {"cpu_activations", rt::cpuKernelActivations()},
          {"threads", rt::cpuKernelThreads()}};
}

} // namespace

int runInspect(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kInspectSpec, argv);
  if (!args.isOk())
    return reportError("inspect", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kInspectSpec);
    return 0;
  }
  std::optional<json> device;
  if (std::optional<std::string> name = args->get("--device")) {
    if (*name != "cpu")
      return reportError(
          "inspect", invalidArgument("--device: '" + *name + "' is not supported here (only cpu)"));
    if (Status isa = rt::checkCpuKernelIsa(); !isa.isOk())
      return reportError("inspect", isa);
    device = cpuDeviceJson();
  }
  if (args->positionals().empty()) {
    if (!device)
      return reportError("inspect", invalidArgument("give an ARTIFACT, or --device cpu"));
    std::cout << device->dump(1) << "\n";
    return 0;
  }
  rt::LoadOptions options;
  options.verifyWeights = !args->has("--no-verify-weights");
  auto artifact = rt::Artifact::load(args->positionals()[0], options);
  if (!artifact.isOk())
    return reportError("inspect", artifact.status());
  const schema::Plan &plan = (*artifact)->plan();
  bool summary = args->has("--summary");
  json out = headerJson(plan);
  out["ranks"] = json::array();
  for (int r = 0; r < (*artifact)->numRanks(); ++r)
    out["ranks"].push_back(rankJson((*artifact)->rank(r), summary));
  out["kernel_modules"] = kernelModulesJson(plan);
  if (device)
    out["device"] = *device;
  if (summary)
    printReadable(std::cout, out, 0);
  else
    std::cout << out.dump(1);
  std::cout << "\n";
  return 0;
}

} // namespace kiln::tools
