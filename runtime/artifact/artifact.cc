#include "runtime/artifact/artifact.h"

#include "runtime/base/sha256.h"
#include "schema/version.h"

#include <nlohmann/json.hpp>

namespace kiln::rt {
namespace {

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty() || dir.back() == '/')
    return dir + name;
  return dir + "/" + name;
}

// The manifest lists files either as an array of {name, size, sha256} or as an object keyed by
// name; accept both so the loader does not depend on the writer's layout choice.
std::string manifestHashOf(const nlohmann::json &manifest, const std::string &name) {
  auto files = manifest.find("files");
  if (files == manifest.end())
    return {};
  auto hashOf = [](const nlohmann::json &entry) -> std::string {
    if (entry.is_string())
      return entry.get<std::string>();
    auto sha = entry.find("sha256");
    return entry.is_object() && sha != entry.end() && sha->is_string() ? sha->get<std::string>()
                                                                       : std::string();
  };
  if (files->is_object()) {
    auto entry = files->find(name);
    return entry == files->end() ? std::string() : hashOf(*entry);
  }
  if (files->is_array()) {
    for (const auto &entry : *files) {
      auto entryName = entry.is_object() ? entry.find("name") : entry.end();
      if (entry.is_object() && entryName != entry.end() && entryName->is_string() &&
          entryName->get<std::string>() == name)
        return hashOf(entry);
    }
  }
  return {};
}

Status checkPlanAgainstManifest(const MappedFile &planFile, const std::string &manifestText) {
  nlohmann::json manifest =
      nlohmann::json::parse(manifestText, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object())
    return dataLoss(std::string(kManifestFileName) + ": not a valid JSON object");
  std::string expected = manifestHashOf(manifest, kPlanFileName);
  if (expected.empty())
    return dataLoss(std::string(kManifestFileName) + ": no sha256 recorded for " + kPlanFileName);
  std::string actual = sha256Hex(planFile.bytes());
  if (actual != expected)
    return dataLoss(std::string(kPlanFileName) + ": sha256 " + actual + " does not match " +
                    kManifestFileName + " (" + expected + "): the file is corrupted");
  return okStatus();
}

Status checkSchemaVersion(const schema::Plan &plan) {
  if (plan.schema_version() >= kMinSchemaVersion && plan.schema_version() <= kSchemaVersion)
    return okStatus();
  std::string message = std::string(kPlanFileName) + ": artifact schema version " +
                        std::to_string(plan.schema_version()) + "; this kiln reads " +
                        std::to_string(kMinSchemaVersion) + " to " + std::to_string(kSchemaVersion);
  if (plan.schema_version() > kSchemaVersion) {
    const char *by = plan.compiler_version() ? plan.compiler_version()->c_str() : "?";
    return failedPrecondition(message + ": the artifact was compiled by kiln " + by +
                              "; upgrade kiln to >= " + by + " to load it");
  }
  return failedPrecondition(message + ": recompile with kiln >= " + kKilnVersion);
}

Status loadPlan(const std::string &dir, MappedFile &planFile, std::string &manifestText,
                const schema::Plan *&plan) {
  KILN_ASSIGN_OR_RETURN(planFile, MappedFile::open(joinPath(dir, kPlanFileName)));
  if (planFile.size() < 8 || !schema::PlanBufferHasIdentifier(planFile.data()))
    return dataLoss(std::string(kPlanFileName) + " in '" + dir +
                    "': missing file identifier \"KILN\": not a kiln plan (or truncated)");
  auto manifest = readFile(joinPath(dir, kManifestFileName));
  if (!manifest.isOk())
    return manifest.status().withContext(std::string(kManifestFileName) + " is required to check " +
                                         kPlanFileName);
  manifestText = std::move(manifest).value();
  KILN_RETURN_IF_ERROR(checkPlanAgainstManifest(planFile, manifestText));
  flatbuffers::Verifier verifier(planFile.data(), planFile.size());
  if (!schema::VerifyPlanBuffer(verifier))
    return dataLoss(std::string(kPlanFileName) + ": FlatBuffers verification failed (" +
                    std::to_string(planFile.size()) + " bytes): the file is corrupted");
  plan = schema::GetPlan(planFile.data());
  KILN_RETURN_IF_ERROR(checkSchemaVersion(*plan));
  return checkPlan(*plan, kPlanFileName);
}

Status checkWeightsFile(const schema::Rank &rank, const MappedFile &file, bool verifyHashes) {
  const std::string &name = rank.weights_file()->str();
  if (file.size() != rank.weights_file_size())
    return dataLoss(name + " is " + std::to_string(file.size()) + " bytes, the plan expects " +
                    std::to_string(rank.weights_file_size()) +
                    (file.size() < rank.weights_file_size() ? ": truncated file?"
                                                            : ": wrong or overwritten file?"));
  if (!verifyHashes || !rank.weights())
    return okStatus();
  for (const schema::WeightEntry *entry : *rank.weights()) {
    std::string actual = sha256Hex(file.data() + entry->offset(), entry->size());
    if (actual != entry->sha256()->str())
      return dataLoss(name + ": tensor '" + entry->name()->str() + "' (offset " +
                      std::to_string(entry->offset()) + ", " + std::to_string(entry->size()) +
                      " bytes) has sha256 " + actual + ", the plan records " +
                      entry->sha256()->str() + ": the weights file is corrupted");
  }
  return okStatus();
}

} // namespace

Result<std::unique_ptr<Artifact>> Artifact::load(const std::string &dir,
                                                 const LoadOptions &options) {
  std::unique_ptr<Artifact> artifact(new Artifact());
  artifact->directory_ = dir;
  KILN_RETURN_IF_ERROR(
      loadPlan(dir, artifact->planFile_, artifact->manifestJson_, artifact->plan_));
  int numRanks = artifact->numRanks();
  if (options.rank < -1 || options.rank >= numRanks)
    return invalidArgument("load option rank " + std::to_string(options.rank) +
                           " is out of range: the artifact has " + std::to_string(numRanks) +
                           " rank(s)");
  artifact->weights_.resize(numRanks);
  for (int r = 0; r < numRanks; ++r) {
    if (options.rank != -1 && options.rank != r)
      continue;
    const schema::Rank &rank = artifact->rank(r);
    KILN_ASSIGN_OR_RETURN(artifact->weights_[r],
                          MappedFile::open(joinPath(dir, rank.weights_file()->str())));
    KILN_RETURN_IF_ERROR(checkWeightsFile(rank, artifact->weights_[r], options.verifyWeights));
  }
  return artifact;
}

int Artifact::numRanks() const {
  return plan_->ranks() ? static_cast<int>(plan_->ranks()->size()) : 0;
}

const schema::Rank &Artifact::rank(int r) const {
  return *plan_->ranks()->Get(r);
}

bool Artifact::hasWeights(int r) const {
  return r >= 0 && r < static_cast<int>(weights_.size()) && !weights_[r].path().empty();
}

std::span<const uint8_t> Artifact::weightBytes(int r, int weightIndex) const {
  if (!hasWeights(r))
    return {};
  const auto *entries = rank(r).weights();
  if (!entries || weightIndex < 0 || weightIndex >= static_cast<int>(entries->size()))
    return {};
  const schema::WeightEntry *entry = entries->Get(weightIndex);
  return weights_[r].bytes().subspan(entry->offset(), entry->size());
}

std::span<const uint8_t> Artifact::weightsFile(int r) const {
  return hasWeights(r) ? weights_[r].bytes() : std::span<const uint8_t>();
}

std::string Artifact::path(const std::string &name) const {
  return joinPath(directory_, name);
}

} // namespace kiln::rt
