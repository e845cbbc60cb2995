#include "runtime/text/vocab.h"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace kiln::rt {
namespace {

size_t hashString(std::string_view s) {
  return std::hash<std::string_view>{}(s);
}

size_t tableSizeFor(size_t n) {
  size_t size = 16;
  while (size < n * 2)
    size <<= 1;
  return size;
}

} // namespace

Result<Vocab> Vocab::create(std::vector<std::pair<std::string, int64_t>> entries,
                            Duplicates duplicates, const std::string &where) {
  Vocab v;
  int64_t maxId = -1;
  size_t bytes = 0;
  for (const auto &[token, id] : entries) {
    if (id < 0 || id >= kTokenIdLimit)
      return invalidArgument(where + "['" + token + "'] has id " + std::to_string(id) +
                             " outside [0, 2^24)");
    maxId = std::max(maxId, id);
    bytes += token.size();
  }
  v.offsets_.assign(static_cast<size_t>(maxId + 1), {0, -1});
  v.arena_.reserve(bytes);
  v.tableMask_ = tableSizeFor(entries.size()) - 1;
  v.table_.assign(v.tableMask_ + 1, 0);
  for (auto &[token, id64] : entries) {
    auto id = static_cast<int32_t>(id64);
    int32_t existing = v.find(token);
    if (existing >= 0 && duplicates == Duplicates::kForgetEarlierId)
      v.offsets_[existing].second = -1;
    v.offsets_[id] = {static_cast<uint32_t>(v.arena_.size()), static_cast<int32_t>(token.size())};
    v.arena_.append(token);
    v.insert(token, id, existing);
  }
  for (const auto &o : v.offsets_)
    v.count_ += o.second >= 0 ? 1 : 0;
  return v;
}

// Points the index entry of `token` at `id`, reusing the slot of `replaced` (its earlier id, or
// -1 when the token is new).
void Vocab::insert(std::string_view token, int32_t id, int32_t replaced) {
  size_t h = hashString(token);
  size_t slot = h & tableMask_;
  while (table_[slot] != 0 && static_cast<int32_t>(table_[slot] & 0xFFFFFFFF) - 1 != replaced)
    slot = (slot + 1) & tableMask_;
  table_[slot] = (static_cast<uint64_t>(h >> 32) << 32) | static_cast<uint32_t>(id + 1);
}

int32_t Vocab::find(std::string_view token) const {
  if (table_.empty())
    return -1;
  size_t h = hashString(token);
  size_t slot = h & tableMask_;
  const auto tag = static_cast<uint32_t>(h >> 32);
  while (true) {
    uint64_t entry = table_[slot];
    if (entry == 0)
      return -1;
    if (static_cast<uint32_t>(entry >> 32) == tag) {
      auto id = static_cast<int32_t>(entry & 0xFFFFFFFF) - 1;
      const auto &o = offsets_[id];
      if (o.second == static_cast<int32_t>(token.size()) &&
          std::string_view(arena_).substr(o.first, o.second) == token)
        return id;
    }
    slot = (slot + 1) & tableMask_;
  }
}

std::string_view Vocab::token(int32_t id) const {
  if (!hasId(id))
    return {};
  return std::string_view(arena_).substr(offsets_[id].first, offsets_[id].second);
}

std::array<int32_t, 256> Vocab::byteTokenIds() const {
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    ids[b] = find(name);
  }
  return ids;
}

} // namespace kiln::rt
