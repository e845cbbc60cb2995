// Model families: what `kiln compile` accepts. A family registers the config.json `model_type`s
// and `architectures` it handles, reads its own config keys into the common HfModelConfig
// (parseConfig) and builds the UNFUSED kiln graph of one engine step (func.func @step() -> logits)
// from the shared blocks (compiler/models/decoder.h). Fusion and memory planning are passes
// (compiler/transforms); a family says what the model computes, not how it is scheduled.
// One family, one file (compiler/models/<family>.cc), one line in model_family.cc's registry.
#pragma once

#include "compiler/dialect/kiln_dialect.h"
#include "compiler/import/config_fields.h"
#include "compiler/import/hf_config.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kiln::compiler {

struct BuildOptions {
  // Stored element type of linear and embedding weights (f32, f16 or bf16). Norm weights,
  // biases and constants are always f32: the kernels read them as fp32.
  mlir::Type weightType;
  // Whether the checkpoint holds a tensor of this name, for families whose checkpoints name
  // their tensors in more than one way (Gemma 3's text tower); null: not known.
  std::function<bool(const std::string &)> hasTensor;
};

// Builders report errors as diagnostics on the context (naming the config field) and fail.
using ModelBuildFn = mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> (*)(
    mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options);

struct ModelFamily {
  const char *name;                       // "qwen2"
  std::vector<std::string> modelTypes;    // config.json "model_type" values
  std::vector<std::string> architectures; // config.json "architectures"[0] values
  // Reads the family's own keys of config.json (`fields`) into `config`, whose common fields
  // (shapes, rope, special tokens) are already read; refuses what the family cannot compile,
  // naming the field.
  Status (*parseConfig)(const ConfigFields &fields, HfModelConfig &config);
  ModelBuildFn build;
  // Scaling type names this family's configs use for others (compiler/import/rope_scaling.h).
  RopeTypeAliases ropeTypeAliases = {};
  // Rewrites config.json text into the form the common reader (hf_config.h) and parseConfig
  // read, before either does: a multimodal wrapper's text_config, the config class's defaults for
  // absent keys (Gemma 3's configs leave most out). Null: read as written. Errors name the field.
  Result<std::string> (*normalizeConfig)(const std::string &configJson,
                                         const std::string &source) = nullptr;
};

// Every family, in registry order.
std::span<const ModelFamily *const> modelFamilies();
// The family of a config.json: by `model_type`, and `architectures`[0], when given, must be one
// the family builds; an error naming the field and listing what is supported otherwise.
Result<const ModelFamily *> findModelFamily(const ConfigFields &fields);
// findModelFamily, then the family's own keys read into `config` (its common fields read).
Result<const ModelFamily *> resolveModelFamily(const ConfigFields &fields, HfModelConfig &config);
// config.json text as `family` reads it (its normalizeConfig, or the text itself).
Result<std::string> familyConfigJson(const ModelFamily &family, const std::string &configJson,
                                     const std::string &source);
// "llama, mistral, ..." for messages and --help.
std::string supportedModelTypes();

// Loads the dialects every builder and pass uses (kiln, func).
void loadKilnDialects(mlir::MLIRContext &context);

// The families (one file each).
const ModelFamily &llamaFamily();
const ModelFamily &mistralFamily();
const ModelFamily &qwen2Family();
const ModelFamily &qwen3Family();
const ModelFamily &phi3Family();
const ModelFamily &gemma2Family();
const ModelFamily &gemma3Family();
const ModelFamily &mixtralFamily();
const ModelFamily &qwen3MoeFamily();
const ModelFamily &qwen2MoeFamily();
const ModelFamily &bertFamily();
const ModelFamily &xlmRobertaFamily();
const ModelFamily &bartFamily();

} // namespace kiln::compiler
