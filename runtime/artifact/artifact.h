// A compiled model artifact (a model.kiln directory) loaded for execution: plan.kiln verified once
// (identifier, manifest hash, FlatBuffers verifier, schema version, semantic checks) and then
// trusted; weights.rank<N>.bin memory-mapped and checked against the plan's weights index.
#pragma once

#include "runtime/base/file.h"
#include "runtime/base/status.h"
#include "runtime/ops/plan_types.h"
#include "schema/plan_generated.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::rt {

struct LoadOptions {
  // Hash every tensor against the weights index (reads every weight byte once at load).
  bool verifyWeights = true;
  // -1 maps the weights of every rank; otherwise only this rank's file is opened (a TP worker).
  int rank = -1;
};

class Artifact {
public:
  // Loads `dir`. Every error names the file (and tensor/op/buffer) and what is wrong with it.
  static Result<std::unique_ptr<Artifact>> load(const std::string &dir,
                                                const LoadOptions &options = {});

  const schema::Plan &plan() const { return *plan_; }
  int numRanks() const;
  const schema::Rank &rank(int r) const;
  // Whether rank r's weights file was mapped (see LoadOptions::rank).
  bool hasWeights(int r) const;
  // The bytes of rank r's weight `weightIndex` (an index into Rank.weights); empty when out of
  // range or not mapped.
  std::span<const uint8_t> weightBytes(int r, int weightIndex) const;
  // The whole mapped weights file of rank r (offsets in WeightEntry are relative to its start).
  std::span<const uint8_t> weightsFile(int r) const;

  const std::string &directory() const { return directory_; }
  // manifest.json as written by the compiler (raw JSON text).
  const std::string &manifestJson() const { return manifestJson_; }
  // `directory()/name`.
  std::string path(const std::string &name) const;

private:
  Artifact() = default;

  std::string directory_;
  std::string manifestJson_;
  MappedFile planFile_;
  const schema::Plan *plan_ = nullptr;
  std::vector<MappedFile> weights_; // per rank; empty MappedFile when not mapped
};

// Semantic checks of a verified plan (indices in range, op arities and widths per plan.fbs,
// arena bounds, weight entries inside the file and aligned, step inputs present). `file` names the
// plan file in messages. Exposed for tools (kiln inspect) and tests.
Status checkPlan(const schema::Plan &plan, const std::string &file);

} // namespace kiln::rt
