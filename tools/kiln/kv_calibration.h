// `kiln compile --kv-dtype fp8 --kv-calibration FILE`: fp8 KV-cache scales kiln calibrates itself
// for a checkpoint that stores none (runtime/exec/kv_calibration.h says how they are measured).
#pragma once

#include "compiler/driver/compile.h"
#include "runtime/text/tokenizer.h"

#include <string>
#include <vector>

namespace kiln::tools {

// FILE's calibration prompts: JSON Lines, each a string (a text, encoded with the model's
// special-token rules) or an array of token ids; blank lines are skipped. `tokenizer` may be null
// when every line is ids. Errors name the line.
Result<std::vector<std::vector<int32_t>>> readCalibrationPrompts(const std::string &path,
                                                                 const rt::Tokenizer *tokenizer);

// Compiles options.modelDir twice: first for the cpu with a cache of the activations' dtype into a
// scratch directory beside options.outDir (removed afterwards), whose run of the prompts of
// `promptsPath` gives each layer's scales; then as `options` say, those scales in the plan.
Status compileWithKvCalibration(compiler::CompileOptions options, const std::string &promptsPath);

} // namespace kiln::tools
