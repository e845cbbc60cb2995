// Artifact::load on a hostile model.kiln directory: plan.kiln (FlatBuffers verifier, schema
// version, plan_check's semantic checks), manifest.json (the plan's recorded sha256) and the
// weights index against weights.rank<N>.bin.
//
// Input: plan.kiln [sep manifest.json [sep weights file]] (fuzz_util.h). Without a manifest the
// target writes one recording the plan's true sha256, so mutated plans reach the verifier and
// plan_check instead of all stopping at the hash; without a weights file it writes one of the
// size the plan expects (zeros, at most 1 MiB). A loaded artifact must hand out only bytes inside
// its mapped weights files.
#include "runtime/artifact/artifact.h"
#include "runtime/base/sha256.h"
#include "schema/version.h"
#include "tests/fuzz/fuzz_util.h"

#include <string>

namespace {

using kiln::fuzz::ScratchDir;

constexpr uint64_t kMaxSynthesizedWeights = uint64_t(1) << 20;

std::string manifestFor(std::string_view plan) {
  return std::string(R"({"format":"kiln-artifact","files":[{"name":")") + kiln::kPlanFileName +
         R"(","sha256":")" + kiln::sha256Hex(plan.data(), plan.size()) + R"("}]})";
}

// The weights files a plan that passed the verifier names, filled with zeros (sparse).
void synthesizeWeights(const ScratchDir &dir, std::string_view planBytes) {
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t *>(planBytes.data()),
                                 planBytes.size());
  if (planBytes.size() < 8 || !kiln::schema::VerifyPlanBuffer(verifier))
    return;
  const kiln::schema::Plan *plan = kiln::schema::GetPlan(planBytes.data());
  if (!plan->ranks())
    return;
  for (const kiln::schema::Rank *rank : *plan->ranks()) {
    if (!rank->weights_file() || rank->weights_file_size() > kMaxSynthesizedWeights)
      continue;
    std::string name = rank->weights_file()->str();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      continue;
    dir.write(name, std::string(size_t(rank->weights_file_size()), '\0'));
  }
}

void checkLoaded(const kiln::rt::Artifact &artifact) {
  for (int r = 0; r < artifact.numRanks(); ++r) {
    std::span<const uint8_t> file = artifact.weightsFile(r);
    const auto *entries = artifact.rank(r).weights();
    const int count = entries ? static_cast<int>(entries->size()) : 0;
    for (int w = -1; w <= count; ++w) {
      std::span<const uint8_t> bytes = artifact.weightBytes(r, w);
      if (w < 0 || w == count) {
        KILN_FUZZ_CHECK(bytes.empty(), "weight index out of range gave bytes");
        continue;
      }
      KILN_FUZZ_CHECK(bytes.size() == entries->Get(w)->size(), "weight size differs from index");
      KILN_FUZZ_CHECK(bytes.empty() || (bytes.data() >= file.data() &&
                                        bytes.data() + bytes.size() <= file.data() + file.size()),
                      "weight bytes outside the mapped weights file");
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ScratchDir dir;
  const std::vector<std::string_view> files = kiln::fuzz::splitFiles(data, size);
  const std::string_view plan = files[0];
  dir.reset();
  dir.write(kiln::kPlanFileName, plan);
  dir.write(kiln::kManifestFileName, files.size() > 1 ? std::string(files[1]) : manifestFor(plan));
  if (files.size() > 2)
    dir.write("weights.rank0.bin", files[2]);
  else
    synthesizeWeights(dir, plan);
  // Without hashing first: only a plan that loads that way gets as far as the hashes.
  for (bool verifyWeights : {false, true}) {
    kiln::rt::LoadOptions options;
    options.verifyWeights = verifyWeights;
    auto artifact = kiln::rt::Artifact::load(dir.path(), options);
    if (!artifact.isOk()) {
      KILN_FUZZ_CHECK(!artifact.status().message().empty(), "an error without a message");
      return 0;
    }
    checkLoaded(**artifact);
  }
  return 0;
}
