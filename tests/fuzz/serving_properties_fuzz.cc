// SageMaker's serving.properties (runtime/serve/serve_config.h): parseProperties, then the keys
// applied as serving.properties and as environment variables, then checked against an artifact.
//
// Invariants: written back as key=value lines, the parsed properties parse to the same map; an
// accepted configuration holds only values inside the ranges serve_config.cc documents.
#include "runtime/serve/serve_config.h"
#include "tests/fuzz/fuzz_util.h"

#include <string>

namespace {

using namespace kiln::rt::serve;

std::string writeBack(const std::map<std::string, std::string> &properties) {
  std::string text;
  for (const auto &[key, value] : properties)
    text += key + "=" + value + "\n";
  return text;
}

void checkRanges(const ServeConfig &config) {
  KILN_FUZZ_CHECK(config.maxBatch >= 0 && config.maxBatch <= (1 << 20), "max batch out of range");
  KILN_FUZZ_CHECK(config.maxModelLen >= 0 && config.maxModelLen <= (1 << 30),
                  "max model length out of range");
  KILN_FUZZ_CHECK(config.tensorParallelDegree >= 0 && config.tensorParallelDegree <= 1024,
                  "tensor parallel degree out of range");
  KILN_FUZZ_CHECK(config.port >= 1 && config.port <= 65535, "port out of range");
  KILN_FUZZ_CHECK(config.gpuMemoryUtilization >= 0 && config.gpuMemoryUtilization <= 1,
                  "gpu_memory_utilization out of range");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  auto properties = parseProperties(text, "serving.properties");
  if (!properties.isOk())
    return 0;
  auto again = parseProperties(writeBack(*properties), "serving.properties");
  KILN_FUZZ_CHECK(again.isOk() && *again == *properties,
                  "properties written back as key=value parse differently");

  ServeConfig fromFile;
  if (applyServingProperties(*properties, "serving.properties", fromFile).isOk()) {
    checkRanges(fromFile);
    (void)checkAgainstArtifact(fromFile, ArtifactFacts{1, "fp32", 16, 256});
  }
  ServeConfig fromEnvironment;
  if (applyEnvironment(*properties, fromEnvironment).isOk()) {
    checkRanges(fromEnvironment);
    (void)checkAgainstArtifact(fromEnvironment, ArtifactFacts{2, "bf16", 8, 4096});
  }
  return 0;
}
