// Internal to kiln_cpu_kernels: attention's work items, shared by attention.cc (vector loops) and
// attention_amx.cc (tiles).
#pragma once

#include "kernels/cpu/kernels.h"

#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu {

// The query heads [head0, head0 + heads) of one kv head for `tokens` consecutive tokens of one
// sequence, from token0.
struct AttentionItem {
  int32_t seq, token0, tokens, head0, heads;
};

// Fills `items` (cleared first; its storage is reused from call to call): every sequence's tokens
// in runs of at most maxTokens, each run once per kv head, its group of query heads cut into runs
// of at most maxHeads.
void attentionItems(const AttentionArgs &args, int32_t maxTokens, int32_t maxHeads,
                    std::vector<AttentionItem> &items);

} // namespace kiln::kernels::cpu
