// BART (BartModel) feature extraction: the encoder-decoder's decoder output, as BartModel's
// last_hidden_state with the decoder fed the input shifted right after decoder_start_token_id
// (compiler/models/encoder.h builds both stacks in one step). Post-norm layers (mBART's
// pre-norm and final layer norm are refused), learned positions from row 2, layernorm_embedding,
// embeddings times sqrt(d_model) with scale_embedding.
#include "compiler/models/encoder.h"

#include <nlohmann/json.hpp>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

// BartConfig names its shapes d_model, encoder_layers, ...: the common reader's names added.
Result<std::string> normalizeBart(const std::string &text, const std::string &source) {
  Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object())
    return invalidArgument(source + ": not a JSON object");
  for (const auto &[common, bart] : {std::pair{"hidden_size", "d_model"},
                                     {"num_hidden_layers", "encoder_layers"},
                                     {"num_attention_heads", "encoder_attention_heads"},
                                     {"intermediate_size", "encoder_ffn_dim"}})
    if (config.contains(bart))
      config[common] = config[bart];
  return config.dump();
}

Status requireEqual(const ConfigFields &fields, const char *key, int64_t expected,
                    const char *what) {
  int64_t value = expected;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt(key, value));
  if (value != expected)
    return fields.error(key, "is " + std::to_string(value) + "; kiln compiles BART whose decoder " +
                                 what + " the encoder's (" + std::to_string(expected) + ")");
  return okStatus();
}

Status parseBart(const ConfigFields &fields, HfModelConfig &config) {
  std::string act = "gelu";
  KILN_RETURN_IF_ERROR(fields.readString("activation_function", act));
  if (act != "gelu")
    return unimplemented(fields.source() + ": field 'activation_function' is '" + act +
                         "'; kiln compiles BART with activation_function: gelu");
  for (const char *key : {"normalize_before", "add_final_layer_norm"}) {
    bool on = false;
    KILN_RETURN_IF_ERROR(fields.readBool(key, on));
    if (on)
      return unimplemented(fields.source() + ": field '" + key +
                           "' is true (mBART's pre-norm layers); kiln compiles BART's post-norm "
                           "layers only");
  }
  KILN_RETURN_IF_ERROR(
      requireEqual(fields, "decoder_attention_heads", config.numHeads, "heads equal"));
  KILN_RETURN_IF_ERROR(
      requireEqual(fields, "decoder_ffn_dim", config.intermediateSize, "ffn width equals"));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("decoder_layers", config.decoderLayers, true));
  std::vector<int32_t> start;
  KILN_RETURN_IF_ERROR(fields.readTokenIds("decoder_start_token_id", start));
  if (start.empty() || start.front() < 0 || start.front() >= config.vocabSize)
    return fields.error("decoder_start_token_id", "must be a token id of the vocabulary");
  config.decoderStartTokenId = start.front();
  KILN_RETURN_IF_ERROR(fields.readBool("scale_embedding", config.scaleEmbeddingsExactly));
  config.embeds = true;
  config.layerNormEps = 1e-5; // torch.nn.LayerNorm's default, as BART's layers use it
  config.positionOffset = 2;  // BartLearnedPositionalEmbedding's offset, in 2 rows more
  config.positionRows = config.maxPositionEmbeddings + 2;
  config.typeVocabSize = 0;
  return okStatus();
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildBart(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildEncoder(context, config, options,
                      headPrefixLayout(options, "model.", "shared.weight"));
}

} // namespace

const ModelFamily &bartFamily() {
  static const ModelFamily family{"bart",     {"bart"}, {"BartModel"}, &parseBart,
                                  &buildBart, {},       &normalizeBart};
  return family;
}

} // namespace kiln::compiler
