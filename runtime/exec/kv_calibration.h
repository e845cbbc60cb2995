// kiln's own fp8 KV-cache scales, for checkpoints that bring none (`kiln compile --kv-dtype fp8
// --kv-calibration FILE`, tools/kiln/kv_calibration.h): an artifact compiled with a cache of its
// activations' dtype runs the calibration prompts on the cpu, and layer l's scales are the largest
// |k| (after rotary) and |v| its cache then holds, times kKvScaleHeadroom / 448 (fp8 E4M3's
// largest value): llm-compressor's kv_cache_scheme calibration, with headroom for the tokens a
// sequence generates past the prompts (tools/goldens/make_kv_dtype_goldens.py does the same in
// transformers).
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

inline constexpr float kKvScaleHeadroom = 1.25f;

struct KvCalibration {
  std::vector<float> kAbsMax, vAbsMax; // per layer: the largest |k| and |v| seen
  std::vector<float> kScales, vScales; // per layer: absMax * kKvScaleHeadroom / 448, in fp32
  int64_t tokens = 0;                  // prompt tokens run
};

// Runs each prompt (token ids) through the artifact at `artifactDir` on the cpu, one prompt at a
// time in steps of at most its max_tokens_per_step, and measures its KV cache. The artifact must
// generate (an embedding model's cache is not calibrated here) and hold its cache in fp32, bf16 or
// fp16; a prompt must be non-empty, within the vocabulary and at most max_seq_len tokens (errors
// name the prompt and the limit). A layer whose k or v is 0 everywhere gets scale 1.
Result<KvCalibration> calibrateKvCache(const std::string &artifactDir,
                                       const std::vector<std::vector<int32_t>> &prompts);

} // namespace kiln::rt
