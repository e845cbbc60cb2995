// Versions recorded in every artifact. Bump kSchemaVersion on a breaking schema change; the
// runtime rejects other versions with "recompile with kiln >= X".
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr uint32_t kSchemaVersion = 1;
inline constexpr const char *kKilnVersion = "0.1.0";
// Artifact file names inside a model.kiln directory.
inline constexpr const char *kPlanFileName = "plan.kiln";
inline constexpr const char *kManifestFileName = "manifest.json";
inline constexpr uint64_t kWeightAlignment = 256;

} // namespace kiln
