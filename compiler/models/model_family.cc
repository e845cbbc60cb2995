// The registry of model families (compiler/models/model_family.h).
#include "compiler/models/model_family.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace kiln::compiler {

std::span<const ModelFamily *const> modelFamilies() {
  static const ModelFamily *const families[] = {
      &llamaFamily(),  &mistralFamily(),    &qwen2Family(),   &qwen3Family(),    &phi3Family(),
      &gemma2Family(), &gemma3Family(),     &mixtralFamily(), &qwen3MoeFamily(), &qwen2MoeFamily(),
      &bertFamily(),   &xlmRobertaFamily(), &bartFamily(),
  };
  return families;
}

namespace {

std::string join(const std::vector<std::string> &names) {
  std::string joined;
  for (const std::string &name : names)
    joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

bool contains(const std::vector<std::string> &names, const std::string &name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const ModelFamily *findFamily(const std::string &modelType) {
  for (const ModelFamily *family : modelFamilies())
    if (contains(family->modelTypes, modelType))
      return family;
  return nullptr;
}

} // namespace

std::string supportedModelTypes() {
  std::vector<std::string> types;
  for (const ModelFamily *family : modelFamilies())
    types.insert(types.end(), family->modelTypes.begin(), family->modelTypes.end());
  return join(types);
}

// model_type picks the family (as transformers' AutoConfig does); architectures[0], when given,
// must be a class of that family that kiln builds: a Qwen2ForSequenceClassification checkpoint
// has no lm_head and must not compile as Qwen2ForCausalLM.
Result<const ModelFamily *> findModelFamily(const ConfigFields &fields) {
  std::string modelType, architecture;
  KILN_RETURN_IF_ERROR(fields.readString("model_type", modelType, /*required=*/true));
  KILN_RETURN_IF_ERROR(fields.readFirstString("architectures", architecture));
  const ModelFamily *family = findFamily(modelType);
  if (!family)
    return unimplemented(fields.source() + ": field 'model_type' is '" + modelType +
                         "'; kiln compiles model_type: " + supportedModelTypes());
  if (!architecture.empty() && !contains(family->architectures, architecture))
    return unimplemented(fields.source() + ": field 'architectures' names '" + architecture +
                         "'; for model_type '" + modelType + "' kiln compiles " +
                         join(family->architectures));
  return family;
}

Result<std::string> familyConfigJson(const ModelFamily &family, const std::string &configJson,
                                     const std::string &source) {
  if (!family.normalizeConfig)
    return configJson;
  return family.normalizeConfig(configJson, source);
}

Result<const ModelFamily *> resolveModelFamily(const ConfigFields &fields, HfModelConfig &config) {
  KILN_ASSIGN_OR_RETURN(const ModelFamily *family, findModelFamily(fields));
  KILN_RETURN_IF_ERROR(family->parseConfig(fields, config));
  return family;
}

void loadKilnDialects(mlir::MLIRContext &context) {
  context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
}

} // namespace kiln::compiler
