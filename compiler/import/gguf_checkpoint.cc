#include "compiler/import/gguf_checkpoint.h"

#include "compiler/import/gguf_dequant.h"
#include "compiler/import/gguf_packed.h"

#include <cstring>

namespace kiln::compiler {
namespace {

// GGUF block tensor names (llama.cpp's gguf-py constants) -> HF names under model.layers.N.
struct BlockName {
  const char *gguf;
  const char *hf;
};
constexpr BlockName kBlockNames[] = {
    {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_qkv", "self_attn.qkv_proj"},
    {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"}, {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"},
};

// "blk.12.attn_q.weight" -> {12, "attn_q", "weight"}; false when not of that form.
bool splitBlockName(const std::string &name, std::string &layer, std::string &base,
                    std::string &suffix) {
  if (name.rfind("blk.", 0) != 0)
    return false;
  size_t layerEnd = name.find('.', 4);
  size_t suffixStart = name.rfind('.');
  if (layerEnd == std::string::npos || layerEnd == 4 || suffixStart <= layerEnd)
    return false;
  layer = name.substr(4, layerEnd - 4);
  for (char c : layer)
    if (c < '0' || c > '9')
      return false;
  base = name.substr(layerEnd + 1, suffixStart - layerEnd - 1);
  suffix = name.substr(suffixStart + 1);
  return suffix == "weight" || suffix == "bias";
}

// HF row r of a permuted tensor is GGUF row permutedRow(r): llama.cpp's converter wrote, per
// head, the rotate-half halves interleaved (row h*d + 2i + j holds HF row h*d + j*d/2 + i).
int64_t permutedRow(int64_t hfRow, int64_t headRows) {
  int64_t head = hfRow / headRows, within = hfRow % headRows, half = headRows / 2;
  int64_t j = within / half, i = within % half;
  return head * headRows + 2 * i + j;
}

void unpermuteRows(std::vector<float> &values, int64_t rows, int64_t heads) {
  int64_t cols = static_cast<int64_t>(values.size()) / rows;
  int64_t headRows = rows / heads;
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&out[r * cols], &values[permutedRow(r, headRows) * cols], cols * sizeof(float));
  values = std::move(out);
}

} // namespace

std::string GgufCheckpoint::hfName(const std::string &ggufName, const GgufArchitecture &arch) {
  if (ggufName == "token_embd.weight")
    return "model.embed_tokens.weight";
  if (ggufName == "output_norm.weight")
    return "model.norm.weight";
  if (ggufName == "output.weight")
    return "lm_head.weight";
  std::string layer, base, suffix;
  if (!splitBlockName(ggufName, layer, base, suffix))
    return "";
  // Phi-3 files keep the checkpoint's fused gate_up_proj as ffn_up (2 x intermediate rows).
  if (base == "ffn_up" && std::string(arch.name) == "phi3")
    return "model.layers." + layer + ".mlp.gate_up_proj." + suffix;
  for (const BlockName &entry : kBlockNames)
    if (base == entry.gguf)
      return "model.layers." + layer + "." + entry.hf + "." + suffix;
  return "";
}

Result<std::shared_ptr<const GgufCheckpoint>>
GgufCheckpoint::create(std::shared_ptr<const GgufFile> gguf, const GgufArchitecture &arch,
                       int64_t numHeads, int64_t numKvHeads) {
  auto checkpoint = std::shared_ptr<GgufCheckpoint>(new GgufCheckpoint());
  checkpoint->gguf_ = gguf;
  for (const GgufTensor &tensor : gguf->tensors()) {
    std::string name = hfName(tensor.name, arch);
    if (name.empty())
      continue;
    // Refused here, before anything is built, rather than when the weights are written.
    const GgmlTypeTraits *traits = ggmlTypeTraits(tensor.type);
    if (traits == nullptr || !traits->dequantizable)
      return unimplemented(gguf->path() + ": tensor '" + tensor.name + "' has " +
                           (traits ? "ggml type " : "") + ggmlTypeName(tensor.type) +
                           ", which kiln does not read; it reads " + dequantizableList());
    Entry entry{};
    entry.tensor = &tensor;
    entry.info.name = name;
    entry.info.shape = tensor.shape();
    entry.info.fileIndex = tensor.fileIndex;
    entry.info.offset = tensor.offset;
    entry.info.size = tensor.size;
    switch (static_cast<GgmlType>(tensor.type)) {
    case GgmlType::kF32:
      entry.info.dtype = TensorDType::kF32;
      break;
    case GgmlType::kF16:
      entry.info.dtype = TensorDType::kF16;
      break;
    case GgmlType::kBF16:
      entry.info.dtype = TensorDType::kBF16;
      break;
    default: // quantized: values exist as fp32, and some types as packed matrices
      entry.info.dtype = TensorDType::kF32;
      entry.info.rawReadable = false;
      if (entry.info.shape.size() == 2)
        entry.info.packed = ggmlPackedForm(tensor.type, entry.info.shape[1]);
    }
    if (arch.permutedQk) {
      bool isQ = name.find(".self_attn.q_proj.") != std::string::npos;
      bool isK = name.find(".self_attn.k_proj.") != std::string::npos;
      if (isQ || isK) {
        entry.permuteHeads = isQ ? numHeads : numKvHeads;
        int64_t rows = entry.info.shape.empty() ? 0 : entry.info.shape[0];
        if (entry.permuteHeads <= 0 || rows % (2 * entry.permuteHeads) != 0)
          return invalidArgument(gguf->path() + ": tensor '" + tensor.name + "' has " +
                                 std::to_string(rows) + " rows, not a whole number of " +
                                 std::to_string(entry.permuteHeads) + " heads of even size");
        entry.info.rawReadable = false;
      }
    }
    if (!checkpoint->entries_.emplace(name, std::move(entry)).second)
      return invalidArgument(gguf->path() + ": two tensors map to '" + name + "'");
  }
  return std::shared_ptr<const GgufCheckpoint>(std::move(checkpoint));
}

bool GgufCheckpoint::contains(const std::string &name) const {
  return entries_.count(name) > 0;
}

Result<const TensorInfo *> GgufCheckpoint::info(const std::string &name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return notFound(gguf_->path() + ": no GGUF tensor maps to '" + name + "'");
  return &it->second.info;
}

std::vector<std::string> GgufCheckpoint::names() const {
  std::vector<std::string> names;
  for (const auto &[name, entry] : entries_)
    names.push_back(name);
  return names;
}

Result<std::span<const uint8_t>> GgufCheckpoint::rawBytes(const std::string &name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return notFound(gguf_->path() + ": no GGUF tensor maps to '" + name + "'");
  if (!it->second.info.rawReadable)
    return invalidArgument("tensor '" + it->second.tensor->name + "' (" +
                           ggmlTypeName(it->second.tensor->type) +
                           ") has no raw HF-layout bytes; read it as fp32");
  return gguf_->tensorBytes(*it->second.tensor);
}

Result<QuantizedMatrix> GgufCheckpoint::readPacked(const std::string &name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return notFound(gguf_->path() + ": no GGUF tensor maps to '" + name + "'");
  const Entry &entry = it->second;
  if (!entry.info.packed)
    return Checkpoint::readPacked(name);
  const int64_t rows = entry.info.shape[0], cols = entry.info.shape[1];
  const int64_t headRows = entry.permuteHeads > 0 ? rows / entry.permuteHeads : 0;
  return unpackGgmlBlocks(
      entry.tensor->type, gguf_->tensorBytes(*entry.tensor), rows, cols,
      [headRows](int64_t r) { return headRows ? permutedRow(r, headRows) : r; });
}

Result<std::vector<float>> GgufCheckpoint::readF32(const std::string &name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return notFound(gguf_->path() + ": no GGUF tensor maps to '" + name + "'");
  const Entry &entry = it->second;
  std::vector<float> values(static_cast<size_t>(entry.tensor->numElements()));
  KILN_RETURN_IF_ERROR(dequantizeGgml(entry.tensor->type, gguf_->tensorBytes(*entry.tensor),
                                      entry.tensor->numElements(), values.data())
                           .withContext(gguf_->path() + ": tensor '" + entry.tensor->name + "'"));
  if (entry.permuteHeads > 0)
    unpermuteRows(values, entry.info.shape[0], entry.permuteHeads);
  return values;
}

} // namespace kiln::compiler
