// config.json import: parseHfModelConfig (shape, scalars, rope_scaling / rope_parameters, special
// token ids, generation_config.json) and the RoPE tables the compiler then builds from it.
//
// Input: config.json [sep generation_config.json] (fuzz_util.h). A config that parses must give a
// shape the compiler can divide by, and tables of rotaryDim / 2 finite frequencies.
#include "compiler/import/hf_config.h"
#include "tests/fuzz/fuzz_util.h"

#include <cmath>
#include <string>

namespace {

using kiln::compiler::HfModelConfig;

void checkShape(const HfModelConfig &config) {
  KILN_FUZZ_CHECK(config.numHeads > 0 && config.numKvHeads > 0 && config.headDim > 0,
                  "a parsed config with a zero head count or head_dim");
  KILN_FUZZ_CHECK(config.numHeads % config.numKvHeads == 0,
                  "num_attention_heads is not a multiple of num_key_value_heads");
  KILN_FUZZ_CHECK(config.vocabSize > 0 && config.hiddenSize > 0 && config.numLayers > 0,
                  "a parsed config with a zero size");
}

void checkRope(const HfModelConfig &config) {
  kiln::compiler::RopeTables tables = kiln::compiler::ropeTables(config);
  const int64_t rotaryDim = config.rotaryDim > 0 ? config.rotaryDim : config.headDim;
  KILN_FUZZ_CHECK(tables.invFreq.size() == static_cast<size_t>(rotaryDim / 2),
                  "invFreq has " + std::to_string(tables.invFreq.size()) +
                      " entries for rotary dim " + std::to_string(rotaryDim));
  if (tables.mode == kiln::compiler::RopeMode::kLongShort)
    KILN_FUZZ_CHECK(tables.longInvFreq.size() == tables.invFreq.size(),
                    "longrope tables of different sizes");
  if (tables.mode == kiln::compiler::RopeMode::kDynamicNtk) {
    std::vector<float> longer =
        kiln::compiler::dynamicNtkInvFreq(tables, tables.originalMaxPositions + 1);
    KILN_FUZZ_CHECK(longer.size() == tables.invFreq.size(), "dynamic NTK row of another size");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::vector<std::string_view> files = kiln::fuzz::splitFiles(data, size);
  auto config = kiln::compiler::parseHfModelConfig(std::string(files[0]),
                                                   std::string(kiln::fuzz::fileOr(files, 1)));
  if (!config.isOk()) {
    KILN_FUZZ_CHECK(!config.status().message().empty(), "an error without a message");
    return 0;
  }
  checkShape(*config);
  checkRope(*config);
  return 0;
}
