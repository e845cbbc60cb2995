// Edited copies of the test models (tests/data/models) for e2e tests: a fixture copied under the
// test's temp directory, then changed there (the committed fixtures stay as the goldens' scripts
// wrote them).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <istream>
#include <map>
#include <string>

namespace kiln::e2e {

// A fresh copy of fixture `fixture` under the test's temp directory, as kiln-fixture-<name>.
std::filesystem::path fixtureCopy(const std::string &name, const std::string &fixture);

// A safetensors file's header table, read from the start of `in`; `headerBytes` its length.
nlohmann::json safetensorsHeader(std::istream &in, uint64_t &headerBytes);

// A copy of fixture `fixture` whose model.safetensors also holds `extra` F32 scalars (appended
// after the stored data, the header rewritten and padded to 8 bytes as safetensors requires).
std::string fixtureWithScalars(const std::string &name, const std::string &fixture,
                               const std::map<std::string, float> &extra);

} // namespace kiln::e2e
