// Chained hashes of full KV blocks for the prefix cache. A block's hash covers its own token ids
// and its parent's hash, so equal hashes mean equal prefixes (up to 64-bit collisions), never just
// equal block contents at different positions.
#pragma once

#include <cstdint>
#include <span>

namespace kiln::rt {

using BlockHash = uint64_t;

// Parent hash of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x6b696c6e5f6b7631ull; // "kiln_kv1"

BlockHash hashBlock(BlockHash parent, std::span<const int32_t> tokenIds);

// The prefix-cache key of KV cache group `group`'s block with chained hash `hash`: the hash
// itself for group 0, so each group caches its own copy of a prefix (plan.fbs "KV cache groups").
BlockHash groupBlockHash(BlockHash hash, int32_t group);

} // namespace kiln::rt
