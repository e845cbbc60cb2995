// Writes a model.kiln artifact directory: plan.kiln, weights.rank<N>.bin, manifest.json and extra
// files (tokenizer.json, ...). Used by the compiler's emitter and by runtime tests.
//
// The directory appears atomically: everything is written into `<outDir>.tmp-<pid>` and renamed
// into place only after every file is complete, so a failed compile never leaves a half-written
// artifact (and an existing artifact at outDir is kept).
#pragma once

#include "runtime/base/status.h"
#include "schema/plan_generated.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::rt {

// One tensor of one rank, in the order of Rank.weights. Bytes are produced on demand, one tensor
// at a time, so writing a large model needs memory for one tensor only.
struct WeightSource {
  std::string name;
  schema::DType dtype = schema::DType::F32;
  std::vector<uint64_t> shape;
  std::function<Status(std::vector<uint8_t> &bytes)> produce; // fills the raw bytes
  uint64_t groupSize = 0;                                     // Q8 / Q4 / Q4M: columns per scale
};

struct ArtifactContents {
  // Complete except for what the writer fills from the sources: rank.weights
  // (name/dtype/shape/offset/size/sha256), rank.weights_file and rank.weights_file_size.
  // schema_version and compiler_version default to this build's when left 0 / empty.
  schema::PlanT plan;
  std::vector<std::vector<WeightSource>> rankWeights; // one list per rank
  std::vector<std::string> extraFiles; // copied into the artifact by base name (tokenizer.json...)
};

using ProgressFn = std::function<void(const std::string &message)>;

// Progress lines look like "weights.rank0.bin: 12/30 tensors, 1.2 MiB".
Status writeArtifact(ArtifactContents &contents, const std::string &outDir,
                     ProgressFn progress = {});

} // namespace kiln::rt
