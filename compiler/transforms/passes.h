// The kiln pass pipeline: fusions (one pass per file) and the static activation memory plan.
// Every pass runs under the pass manager's verifier, so shapes are re-checked after each one.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <cstdint>
#include <memory>

namespace kiln::compiler {

// Rank `rank`'s share of a `tp`-way tensor-parallel step (column-parallel q/k/v and gate/up,
// row-parallel o/down + all_reduce, vocab-parallel lm_head + all_gather). Runs on the UNFUSED
// graph, before the fusion passes; a no-op for tp 1. Errors name num_attention_heads,
// num_key_value_heads or intermediate_size and --tp when a count is not divisible.
std::unique_ptr<mlir::Pass> createShardTensorParallelPass(int64_t rank, int64_t tp);
// Registers kiln-shard-tensor-parallel (options rank, tp) with MLIR's registry.
void registerShardTensorParallelPass();
// q/k/v linears feeding one rope_kv_write -> one linear over [Wq; Wk; Wv] (and biases).
std::unique_ptr<mlir::Pass> createFuseQkvPass();
// mul(silu(x Wg^T), x Wu^T) -> silu_mul(x [Wg; Wu]^T); gelu_tanh likewise -> gelu_tanh_mul.
std::unique_ptr<mlir::Pass> createFuseGateUpPass();
// rms_norm(add(residual, x)) -> add_rms_norm(x, residual) with the residual updated in place.
std::unique_ptr<mlir::Pass> createFuseAddRmsNormPass();
// Liveness over @step's activations at the compiled maxima -> 256-byte aligned arena offsets.
// maxLogitsPerStep: rows of the values downstream of gather_rows (the logits); 0: maxTokensPerStep.
std::unique_ptr<mlir::Pass> createPlanMemoryPass(int64_t maxTokensPerStep,
                                                 int64_t maxLogitsPerStep = 0);

// Registers the passes above with MLIR's registry (for pipelines given as text / tools).
void registerKilnPasses();

// What plan-memory leaves on the IR: on every op with activation results, one offset per result
// (-1 for a non-activation result); on @step, the arena size and the alignment used.
inline constexpr const char *kArenaOffsetsAttr = "kiln.arena_offsets";
inline constexpr const char *kArenaBytesAttr = "kiln.arena_bytes";
inline constexpr const char *kPlannedRowsAttr = "kiln.planned_rows";
inline constexpr const char *kPlannedLogitsRowsAttr = "kiln.planned_logits_rows";
inline constexpr int64_t kArenaAlignment = 256;

} // namespace kiln::compiler
