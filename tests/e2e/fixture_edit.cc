#include "tests/e2e/fixture_edit.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace kiln::e2e {

namespace fs = std::filesystem;
namespace {
const std::string kData = std::string(KILN_TEST_DATA_DIR);
} // namespace

fs::path fixtureCopy(const std::string &name, const std::string &fixture) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln-fixture-" + name);
  fs::remove_all(dir);
  fs::copy(kData + "/models/" + fixture, dir);
  return dir;
}

nlohmann::json safetensorsHeader(std::istream &in, uint64_t &headerBytes) {
  in.read(reinterpret_cast<char *>(&headerBytes), 8);
  std::string header(headerBytes, '\0');
  in.read(header.data(), std::streamsize(headerBytes));
  return nlohmann::json::parse(header);
}

std::string fixtureWithScalars(const std::string &name, const std::string &fixture,
                               const std::map<std::string, float> &extra) {
  const fs::path dir = fixtureCopy(name, fixture);
  std::ifstream in(dir / "model.safetensors", std::ios::binary);
  uint64_t headerBytes = 0;
  nlohmann::json table = safetensorsHeader(in, headerBytes);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  for (const auto &[tensor, value] : extra) {
    table[tensor] = {{"dtype", "F32"},
                     {"shape", nlohmann::json::array()},
                     {"data_offsets", {data.size(), data.size() + 4}}};
    data.append(reinterpret_cast<const char *>(&value), 4);
  }
  std::string text = table.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t textBytes = text.size();
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(&textBytes), 8);
  out << text << data;
  return dir.string();
}

} // namespace kiln::e2e
