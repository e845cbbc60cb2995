// `kiln inspect --device cpu` through the binary: alone it prints the cpu kernels' instruction-set
// level, the levels this CPU has, what Linears with integer weights multiply and the thread count,
// each following what the environment asks (KILN_CPU_ISA, KILN_CPU_ACTIVATIONS, OMP_NUM_THREADS);
// with an artifact the same object is the output's "device"; other devices, a level the CPU lacks
// and an unknown mode are refused naming the flag or the variable.
#include "kernels/cpu/cpu_isa.h"
#include "tests/tools/kiln/kiln_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kiln::tools {
namespace {

namespace kc = kernels::cpu;

nlohmann::json inspectJson(const std::string &command) {
  CommandResult r = runCommand(command, false);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

std::vector<std::string> levelsOfThisCpu() {
  std::vector<std::string> names;
  for (kc::CpuIsa isa : kc::availableCpuIsas())
    names.emplace_back(kc::cpuIsaName(isa));
  return names;
}

TEST(InspectDevice, CpuAlonePrintsTheLevelsAndThreads) {
  nlohmann::json j = inspectJson("OMP_NUM_THREADS=3 " + kKiln + " inspect --device cpu");
  EXPECT_EQ(j["kind"], "cpu");
  EXPECT_EQ(j["cpu_isa"], kc::cpuIsaName(kc::detectedCpuIsa()));
  EXPECT_EQ(j["cpu_isas_available"].get<std::vector<std::string>>(), levelsOfThisCpu());
  EXPECT_EQ(j["threads"], 3);
  EXPECT_EQ(j["cpu_activations"], "fp32");
}

TEST(InspectDevice, FollowsKilnCpuActivations) {
  nlohmann::json j = inspectJson("KILN_CPU_ACTIVATIONS=int8 " + kKiln + " inspect --device cpu");
  EXPECT_EQ(j["cpu_activations"], "int8");
  CommandResult r =
      runCommand("KILN_CPU_ACTIVATIONS=int4 " + kKiln + " inspect --device cpu", true);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.output.find("KILN_CPU_ACTIVATIONS='int4' is not a mode: use fp32 or int8"),
            std::string::npos)
      << r.output;
}

TEST(InspectDevice, FollowsKilnCpuIsa) {
  nlohmann::json j = inspectJson("KILN_CPU_ISA=sse2 " + kKiln + " inspect --device cpu");
  const std::string detected = kc::cpuIsaName(kc::detectedCpuIsa());
  EXPECT_EQ(j["cpu_isa"], detected == "sse2" ? "sse2" : "sse2 (cpu: " + detected + ")");
}

TEST(InspectDevice, WithAnArtifactTheDeviceIsPartOfTheOutput) {
  nlohmann::json j = inspectJson("OMP_NUM_THREADS=2 " + kKiln + " inspect " + fixtureArtifact() +
                                 " --device cpu");
  ASSERT_TRUE(j.contains("device")) << j.dump();
  EXPECT_EQ(j["device"]["threads"], 2);
  EXPECT_TRUE(j.contains("ranks"));
}

TEST(InspectDevice, RefusesOtherDevicesAndMissingArguments) {
  CommandResult cuda = runCommand(kKiln + " inspect --device cuda", true);
  EXPECT_NE(cuda.exitCode, 0);
  EXPECT_NE(cuda.output.find("--device"), std::string::npos) << cuda.output;
  CommandResult nothing = runCommand(kKiln + " inspect", true);
  EXPECT_NE(nothing.exitCode, 0);
  EXPECT_NE(nothing.output.find("ARTIFACT"), std::string::npos) << nothing.output;
}

TEST(InspectDevice, RefusesAnUnknownLevel) {
  CommandResult r = runCommand("KILN_CPU_ISA=avx9000 " + kKiln + " inspect --device cpu", true);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.output.find("KILN_CPU_ISA"), std::string::npos) << r.output;
}

} // namespace
} // namespace kiln::tools
