// RoPE of a Hugging Face config: parsing `rope_theta`, `partial_rotary_factor` and the scaling
// (`rope_scaling`, or transformers 5's `rope_parameters`), and the tables the RopeKvWrite kernels
// read (kernels/cpu/kernels.h RopeKvWriteArgs). Plain C++ (no MLIR).
//
// Every number is computed with transformers' float32 arithmetic step by step (as transformers'
// modeling_rope_utils and the models' rotary embeddings compute it), so kiln's angles match the
// reference to the last bit or two; tests/compiler/import/rope_inv_freq_test.cc checks them
// against tests/data/golden/rope_inv_freq.json (tools/goldens/make_rope_golden.py).
#pragma once

#include "compiler/import/config_fields.h"
#include "kernels/cpu/kernels.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::compiler {

// The scaling types kiln compiles, as named in config.json ("default" is no scaling).
inline constexpr const char *kSupportedRopeTypes =
    "default, linear, dynamic, yarn, longrope, llama3";

// A config's rope scaling, absent (std::nullopt) for plain RoPE. Fields a type does not use keep
// their defaults.
struct RopeScaling {
  std::string type;            // linear, dynamic, yarn, longrope or llama3
  double factor = 1.0;         // every type; longrope derives it when absent (see below)
  double lowFreqFactor = 1.0;  // llama3
  double highFreqFactor = 4.0; // llama3
  // llama3, yarn, longrope: the pretraining context. Read from the scaling object, else
  // max_position_embeddings; for longrope a top-level `original_max_position_embeddings` (Phi-3
  // writes it there) takes precedence, as transformers' Phi3Config gives it.
  int64_t originalMaxPositionEmbeddings = 8192;
  std::optional<double> attentionFactor; // yarn, longrope: an explicit cos/sin scale
  double betaFast = 32.0;          // yarn (0 in the file means the default, as in transformers)
  double betaSlow = 1.0;           // yarn
  double mscale = 0.0;             // yarn; 0 = unset
  double mscaleAllDim = 0.0;       // yarn; 0 = unset
  bool truncate = true;            // yarn: floor/ceil the correction range
  std::vector<double> shortFactor; // longrope: rotaryDim / 2 entries each
  std::vector<double> longFactor;
};

// Everything transformers' RoPE functions read from a config.
struct RopeConfig {
  double theta = 10000.0; // rope_theta
  int64_t headDim = 0;
  double partialRotaryFactor = 1.0; // partial_rotary_factor
  int64_t rotaryDim = 0;            // int(headDim * partialRotaryFactor): the dims that rotate
  int64_t maxPositionEmbeddings = 2048;
  std::optional<RopeScaling> scaling;
};

// Reads rope_theta, partial_rotary_factor and rope_scaling / rope_parameters from config.json's
// top-level object `config`; `headDim` and `maxPositionEmbeddings` are the config's (already
// read). Unsupported types and bad values fail naming the field as the file spells it
// ('rope_scaling.type' or 'rope_parameters.rope_type'), the supported types or the limit.
// Scaling type names a model family reads as another (Phi3Config: "su" and "yarn" are longrope).
using RopeTypeAliases = std::vector<std::pair<std::string, std::string>>;

Result<RopeConfig> parseRopeConfig(const ConfigFields &config, int64_t headDim,
                                   int64_t maxPositionEmbeddings,
                                   const RopeTypeAliases &aliases = {});

// How the kernels pick a sequence's inverse frequencies at run time. L is the sequence's length
// after the step: the position of its last token in the step + 1.
using RopeMode = kernels::cpu::RopeMode;

// What RopeKvWrite needs to rotate as transformers does.
//   kStatic:     invFreq for every token (default, linear, yarn, llama3).
//   kLongShort:  longrope: invFreq (short factors) while L <= originalMaxPositions, longInvFreq
//                beyond, as transformers switches on seq_len > original_max_position_embeddings.
//   kDynamicNtk: dynamic: invFreq (unscaled) while L <= originalMaxPositions (=
//                max_position_embeddings), beyond it dynamicNtkInvFreq(tables, L), recomputed
//                from ropeTheta and dynamicFactor with base' = theta * ((factor * L / max) -
//                (factor - 1)) ^ (dim / (dim - 2)).
// cos and sin are multiplied by attentionScaling (yarn, longrope; 1 otherwise).
struct RopeTables {
  RopeMode mode = RopeMode::kStatic;
  int64_t rotaryDim = 0;
  std::vector<float> invFreq;     // [rotaryDim / 2]
  std::vector<float> longInvFreq; // [rotaryDim / 2], kLongShort only
  int64_t originalMaxPositions = 0;
  float ropeTheta = 0.0f;     // kDynamicNtk
  double dynamicFactor = 1.0; // kDynamicNtk; double: transformers rounds factor - 1 from it
  float attentionScaling = 1.0f;
};

RopeTables ropeTables(const RopeConfig &config);

// transformers' inv_freq of a dynamic-NTK rope for a sequence of `seqLen` tokens: invFreq while
// seqLen <= originalMaxPositions, else the row the kernels compute (kernels::cpu::
// dynamicNtkInvFreq). `tables` must be kDynamicNtk.
std::vector<float> dynamicNtkInvFreq(const RopeTables &tables, int64_t seqLen);

} // namespace kiln::compiler
