// BERT (BertModel): an encoder (compiler/models/encoder.h) whose tensors sit under "bert." when
// the checkpoint was saved from a model with a head (BertForMaskedLM, ...). Its pooler is not
// read: feature extraction returns the last hidden state, pooling follows sentence-transformers.
#include "compiler/models/encoder.h"

namespace kiln::compiler {
namespace {

Status parseBert(const ConfigFields &fields, HfModelConfig &config) {
  return readEncoderConfig(fields, config);
}

mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildBert(mlir::MLIRContext &context, const HfModelConfig &config, const BuildOptions &options) {
  return buildEncoder(context, config, options,
                      headPrefixLayout(options, "bert.", "embeddings.word_embeddings.weight"));
}

} // namespace

const ModelFamily &bertFamily() {
  static const ModelFamily family{"bert", {"bert"}, {"BertModel"}, &parseBert, &buildBert};
  return family;
}

} // namespace kiln::compiler
