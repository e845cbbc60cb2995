// Versions recorded in every artifact. Bump kSchemaVersion when a plan written now could mislead an
// older runtime (a new field whose non-default value changes what an op computes); raise
// kMinSchemaVersion on a breaking change. The runtime reads versions in [kMinSchemaVersion,
// kSchemaVersion] and rejects others with "recompile with kiln >= X" or "upgrade kiln".
//   1: the first plans.
//   2: Attention.sliding_window; RopeKvWrite's rope modes, attention scaling and q/k norm
//      (version-1 plans read the same with every new field at its default).
//   3: CompiledLimits.max_logits_per_step: Logits-rows buffers are sized for it, which an older
//      runtime would misread as a shape error (version-1/2 plans read it as 0: max_tokens_per_step).
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr uint32_t kSchemaVersion = 3;
inline constexpr uint32_t kMinSchemaVersion = 1;
inline constexpr const char *kKilnVersion = "0.1.0";
// Artifact file names inside a model.kiln directory.
inline constexpr const char *kPlanFileName = "plan.kiln";
inline constexpr const char *kManifestFileName = "manifest.json";
inline constexpr uint64_t kWeightAlignment = 256;

} // namespace kiln
