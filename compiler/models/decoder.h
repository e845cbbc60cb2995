// The shared building blocks of decoder-only families: the kiln graph of one engine step built
// from a config (HfModelConfig: shapes and the family features its parseConfig set) and a
// checkpoint layout (where the family's tensors are). Llama-like families (Llama, Mistral, Qwen2,
// Qwen3, Phi-3) are this decoder with their own layout and features; families that differ in a
// block (another norm, activation or MLP) build from the same blocks (DecoderGraph).
//
// The graph is UNFUSED: q/k/v feed rope_kv_write as three operands and gate/up stay separate
// linears + silu + mul, even where the checkpoint stores them fused (the parts read row slices of
// the fused tensor), so tensor-parallel sharding and the fusion passes see one form.
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/models/model_family.h"

#include "mlir/IR/Builders.h"

#include <string>
#include <vector>

namespace kiln::compiler {

// Checkpoint tensor names of a decoder (Hugging Face layout by default).
struct DecoderLayout {
  std::string embedTokens = "model.embed_tokens.weight";
  std::string layerPrefix = "model.layers."; // + layer index
  std::string finalNorm = "model.norm.weight";
  std::string lmHead = "lm_head.weight";
  bool fusedQkv = false;    // self_attn.qkv_proj holds the [q | k | v] rows (Phi-3)
  bool fusedGateUp = false; // mlp.gate_up_proj holds the [gate | up] rows (Phi-3)
  // Mixture-of-experts layers: the block ("block_sparse_moe" in Mixtral, "mlp" in Qwen3-MoE),
  // its router tensor, and each expert's tensors ("{e}" is the expert's index).
  std::string moeBlock = "mlp";
  std::string moeRouter = "gate.weight";
  std::string expertGate = "experts.{e}.gate_proj.weight";
  std::string expertUp = "experts.{e}.up_proj.weight";
  std::string expertDown = "experts.{e}.down_proj.weight";
};

// The blocks, for families whose graph is not exactly buildDecoder's.
class DecoderGraph {
public:
  DecoderGraph(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options,
               DecoderLayout layout);

  // The whole step: embedding, layers of attention + gated MLP with pre-norms and residuals,
  // final norm, lm_head on the rows whose logits are wanted.
  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> build();

  mlir::Value linear(const std::string &name, const std::string &source, mlir::Value x, int64_t out,
                     const std::string &biasSource);
  mlir::Value rmsNorm(const std::string &name, const std::string &source, mlir::Value x);
  mlir::Value attentionBlock(int64_t layer, mlir::Value normed);
  mlir::Value gatedMlp(int64_t layer, mlir::Value normed);
  // The gated MLP of `rows` whose tensors are `block`.{gate,up,down}_proj of the layer (the
  // dense "mlp", Qwen2-MoE's "mlp.shared_expert"); `name` prefixes its ops.
  mlir::Value gatedMlp(int64_t layer, mlir::Value normed, const std::string &block,
                       const std::string &name, int64_t rows);
  // The router linear and the experts (kiln.moe_experts) of a mixture-of-experts layer, plus
  // the sigmoid-gated shared expert where the config has one (Qwen2-MoE).
  mlir::Value moeMlp(int64_t layer, mlir::Value normed);
  mlir::Value preNormLayer(int64_t layer, mlir::Value hidden);
  mlir::Value sandwichLayer(int64_t layer, mlir::Value hidden);

protected:
  mlir::LogicalResult checkConfig();
  int64_t rotaryDim() const;
  std::string normSource(const std::string &tensor) const;
  float embeddingScale() const;
  mlir::Location loc(const std::string &name) { return namedLoc(&context_, name); }
  mlir::RankedTensorType activation(int64_t width);
  mlir::Value weight(const std::string &name, const std::string &source,
                     llvm::ArrayRef<int64_t> shape, mlir::Type dtype);
  mlir::Value weight(const std::string &name, const std::vector<std::string> &sources,
                     llvm::ArrayRef<int64_t> shape, mlir::Type dtype);
  bool moeLayer(int64_t layer) const;
  mlir::Value stepInput(StepInputKind kind, int64_t kvGroup = 0);
  void defineStepInputs();
  // Sets kvGroupOfLayer_; returns the number of KV cache groups.
  int64_t assignKvGroups();
  mlir::Value ropeFrequencies(const RopeTables &rope, const std::string &name);
  bool localRope(int64_t layer) const;
  // Checkpoint tensor `part` (q_proj, up_proj, ...) of layer `layer`'s `block` (self_attn, mlp):
  // its own tensor, or rows [begin, begin + rows) of the fused one.
  std::string partSource(int64_t layer, const std::string &block, const std::string &part,
                         const std::string &fused, int64_t begin, int64_t rows,
                         const std::string &suffix) const;
  std::string layerName(int64_t layer) const;

  mlir::MLIRContext &context_;
  const HfModelConfig &config_;
  const BuildOptions &options_;
  DecoderLayout layout_;
  mlir::OpBuilder b_;
  mlir::Value tokenIds_, positions_, queryStartLoc_, contextLens_, logitsIndices_, sequenceLengths_,
      invFreq_, localInvFreq_;
  // Per KV cache group (assignKvGroups), and each layer's group.
  std::vector<mlir::Value> slotMappings_, blockTables_;
  std::vector<int64_t> kvGroupOfLayer_;
  RopeTables rope_, localRope_;
};

// buildDecoder(context, config, options, layout) = DecoderGraph(...).build(), where an embedding
// model (HfModelConfig::embeds) saved as a bare <Family>Model names its tensors without the
// "model." prefix of `layout`.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildDecoder(mlir::MLIRContext &context,
                                                                const HfModelConfig &config,
                                                                const BuildOptions &options,
                                                                const DecoderLayout &layout = {});

} // namespace kiln::compiler
