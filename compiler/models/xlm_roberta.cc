// XLM-RoBERTa (XLMRobertaModel): BERT's encoder (compiler/models/encoder.h) whose learned
// positions start after the padding index (position p reads row p + pad_token_id + 1, as
// transformers' create_position_ids_from_input_ids for a sequence without padding), one token
// type, and tensors under "roberta." when saved from a model with a head.
#include "compiler/models/encoder.h"

namespace kiln::compiler {
namespace {

Status parseXlmRoberta(const ConfigFields &fields, HfModelConfig &config) {
  KILN_RETURN_IF_ERROR(readEncoderConfig(fields, config));
  if (config.padTokenId < 0)
    return fields.error("pad_token_id", "is required: XLM-R's positions start after it");
  config.positionOffset = config.padTokenId + 1;
  config.positionRows = config.maxPositionEmbeddings;
  return okStatus();
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildXlmRoberta(mlir::MLIRContext &context,
                                                                   const HfModelConfig &config,
                                                                   const BuildOptions &options) {
  return buildEncoder(context, config, options,
                      headPrefixLayout(options, "roberta.", "embeddings.word_embeddings.weight"));
}

} // namespace

const ModelFamily &xlmRobertaFamily() {
  static const ModelFamily family{
      "xlm-roberta", {"xlm-roberta"}, {"XLMRobertaModel"}, &parseXlmRoberta, &buildXlmRoberta};
  return family;
}

} // namespace kiln::compiler
