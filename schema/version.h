// Versions recorded in every artifact. Bump kSchemaVersion when a plan written now could mislead an
// older runtime (a new field whose non-default value changes what an op computes); raise
// kMinSchemaVersion on a breaking change. The runtime reads versions in [kMinSchemaVersion,
// kSchemaVersion] and rejects others with "recompile with kiln >= X" or "upgrade kiln".
//   1: the first plans.
//   2: Attention.sliding_window; RopeKvWrite's rope modes, attention scaling and q/k norm
//      (version-1 plans read the same with every new field at its default).
//   3: CompiledLimits.max_logits_per_step: Logits-rows buffers are sized for it, which an older
//      runtime would misread as a shape error (version-1/2 plans read it as 0:
//      max_tokens_per_step).
//   4: the GEMV kernel's launch contract (kernels/cuda/params.h GemvParams.outsPerWarp, 128
//      threads, common.cuh waitForPriorGrids): the runtime runs a version-1..3 plan's Linears on
//      cuBLASLt only and never launches its GEMV kernels (kGemvSchemaVersion).
//   5: quantized weights (DType Q8 / Q4 / Q4M with WeightEntry.group_size): an older runtime
//      would refuse their dtype only as an unknown one.
//   6: DType Q4Z (4-bit with integer zero points: GPTQ / AWQ checkpoints kept packed), F8E4M3
//      (an fp8 KV cache) and Q8F (fp8 weights), likewise.
//   7: Gemma 2: op kinds GeluTanhMul and Softcap, Attention.logit_softcap, Embedding.scale (an
//      older runtime would drop the scale and the cap and compute wrong logits).
//   8: mixture-of-experts: op kind MoeExperts.
//   9: KV cache groups (KvCacheSpec.groups, Buffer.kv_group): an older runtime would give every
//      layer the first group's block table. Encoders: op kinds LayerNorm and Gelu, step input
//      LastPositions and ShiftedTokenIds, Plan.output HiddenStates, ModelInfo.pooling /
//      normalize_embeddings / decoder_start_token_id.
//  10: Qwen2-MoE's shared experts: op kind SigmoidGatedAdd.
//  11: DType Q8F32 (fp8 weights with fp32 scales: fp8 checkpoints kept packed); an older runtime
//      would refuse the dtype only as an unknown one.
//  12: KvCacheSpec.k_scales / v_scales (calibrated fp8 KV-cache scales): an older runtime would
//      read the scaled cache as unscaled and compute wrong attention.
//  13: step input TokenTypeIds and ModelInfo.type_vocab_size (an encoder's text pairs): an older
//      runtime would refuse the step input kind only as an unknown one.
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr uint32_t kSchemaVersion = 13;
inline constexpr uint32_t kMinSchemaVersion = 1;
// The first plan version whose GEMV kernels runtime/hal/cuda/cuda_device.cc may launch.
inline constexpr uint32_t kGemvSchemaVersion = 4;
inline constexpr const char *kKilnVersion = "0.1.0";
// Artifact file names inside a model.kiln directory.
inline constexpr const char *kPlanFileName = "plan.kiln";
inline constexpr const char *kManifestFileName = "manifest.json";
inline constexpr uint64_t kWeightAlignment = 256;

} // namespace kiln
