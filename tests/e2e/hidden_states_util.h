// A generation plan's final hidden states (runtime/exec/step.h SequenceStep::wantsHidden) against
// transformers' (tools/goldens/make_hidden_state_goldens.py: the model's last_hidden_state, what
// the lm_head reads), on any device.
#pragma once

#include "compiler/driver/compile.h"

#include <string>

namespace kiln::e2e {

// Compiles the golden's fixture with `options`, runs every case as one prefill asking for every
// row's logits and hidden states, and all cases batched asking for the last row's: each row within
// the golden's tolerance, and the batched rows equal to the rows each case gave alone.
void checkGoldenHiddenStates(const std::string &fixture, const std::string &device,
                             compiler::CompileOptions options = {});

} // namespace kiln::e2e
