// The kiln dialect: graph-level ops of a decoder step (docs/design.md "Compile"). Each op that
// reaches the plan has an entry of the same name in the op table (runtime/ops/op_table.h).
// Values are builtin ranked tensors; activations are f32 with a dynamic dim 0 (rows scale with
// the step's tokens at run time) and static trailing dims. Weights are f32 logically; `dtype` is how they are stored.
#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let summary = "Graph-level ops of one engine step of a decoder-only LLM";
  let cppNamespace = "::kiln::compiler";
}

class Kiln_Op<string mnemonic, list<Trait> traits = []> : Op<Kiln_Dialect, mnemonic, traits> {
  let hasVerifier = 1;
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Kiln_Activation : RankedTensorOf<[F32]>;
def Kiln_Index : RankedTensorOf<[I32]>;

def Kiln_StepInputKind : I32EnumAttr<"StepInputKind", "which step input a value holds", [
  I32EnumAttrCase<"TokenIds", 1, "token_ids">,
  I32EnumAttrCase<"Positions", 2, "positions">,
  I32EnumAttrCase<"SlotMapping", 3, "slot_mapping">,
  I32EnumAttrCase<"QueryStartLoc", 4, "query_start_loc">,
  I32EnumAttrCase<"ContextLens", 5, "context_lens">,
  I32EnumAttrCase<"BlockTables", 6, "block_tables">,
  I32EnumAttrCase<"LogitsIndices", 7, "logits_indices">,
  I32EnumAttrCase<"SequenceLengths", 8, "sequence_lengths">,
  I32EnumAttrCase<"LastPositions", 9, "last_positions">,
  I32EnumAttrCase<"ShiftedTokenIds", 10, "shifted_token_ids">,
  I32EnumAttrCase<"TokenTypeIds", 11, "token_type_ids">
]> {
  let cppNamespace = "::kiln::compiler";
}

def Kiln_WeightOp : Kiln_Op<"weight", [Pure]> {
  let summary = "a stored weight: checkpoint tensors concatenated along dim 0";
  let description = [{
    `sources` lists checkpoint tensor names whose rows are concatenated in order (fusion makes
    multi-part weights, e.g. q, k, v). `dtype` (f32, f16 or bf16) is the stored element type,
    unless `quant` ("Q8", "Q4" or "Q4M", schema/plan.fbs) says the matrix is stored quantized
    with one scale per `group_size` columns (runtime/base/quant_layout.h); only a linear's w and
    an embedding's table may be (compiler/transforms/quantize_weights.cc marks them).
  }];
  let arguments = (ins StrAttr:$name, StrArrayAttr:$sources, TypeAttr:$dtype,
                   OptionalAttr<StrAttr>:$quant, OptionalAttr<I64Attr>:$group_size);
  let results = (outs Kiln_Activation:$result);
  let builders = [
    OpBuilder<(ins "mlir::Type":$type, "mlir::StringAttr":$name, "mlir::ArrayAttr":$sources,
                   "mlir::TypeAttr":$dtype), [{
      build($_builder, $_state, type, name, sources, dtype, nullptr, nullptr);
    }]>
  ];
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Kiln_ConstantOp : Kiln_Op<"constant", [Pure]> {
  let summary = "compiler-computed constant data stored with the weights (rope inv_freq)";
  let arguments = (ins StrAttr:$name, FloatElementsAttr<32>:$value);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Kiln_StepInputOp : Kiln_Op<"step_input", [Pure]> {
  let summary = "one of the step descriptor's i32 inputs";
  let description = [{
    block_tables and slot_mapping exist once per KV cache group (schema/plan.fbs "KV cache
    groups"): `kv_group` names the group; it is 0 for every other kind.
  }];
  let arguments = (ins Kiln_StepInputKind:$kind, DefaultValuedAttr<I64Attr, "0">:$kv_group);
  let results = (outs Kiln_Index:$result);
  let assemblyFormat = "$kind attr-dict `:` type($result)";
}

def Kiln_EmbeddingOp : Kiln_Op<"embedding", [Pure]> {
  let summary = "y[t] = table[ids[t] - vocab_start] * scale, zeros for ids outside the table's "
                "rows";
  let arguments = (ins Kiln_Index:$ids, Kiln_Activation:$table,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<F32Attr, "1.0f">:$scale);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_RmsNormOp : Kiln_Op<"rms_norm", [Pure]> {
  let summary = "y = x / sqrt(mean(x^2) + eps) * w";
  let arguments = (ins Kiln_Activation:$x, Kiln_Activation:$w, F32Attr:$eps);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_LayerNormOp : Kiln_Op<"layer_norm", [Pure]> {
  let summary = "y = (x - mean(x)) / sqrt(var(x) + eps) * w + b (encoders)";
  let arguments = (ins Kiln_Activation:$x, Kiln_Activation:$w, Kiln_Activation:$b, F32Attr:$eps);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_GeluOp : Kiln_Op<"gelu", [Pure]> {
  let summary = "y = 0.5 x (1 + erf(x / sqrt(2))) (transformers' exact \"gelu\")";
  let arguments = (ins Kiln_Activation:$x);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_AddOp : Kiln_Op<"add", [Pure]> {
  let summary = "elementwise a + b";
  let arguments = (ins Kiln_Activation:$lhs, Kiln_Activation:$rhs);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_AddRmsNormOp : Kiln_Op<"add_rms_norm", [Pure]> {
  let summary = "residual' = residual + x; normed = rms_norm(residual') * w";
  let description = [{
    The residual result is planned in place of the residual operand: the residual stream is one
    buffer, so the operand must be dead after this op (fuse-add-rmsnorm checks it).
  }];
  let arguments = (ins Kiln_Activation:$x, Kiln_Activation:$residual, Kiln_Activation:$w,
                   F32Attr:$eps);
  let results = (outs Kiln_Activation:$updated_residual, Kiln_Activation:$normed);
}

def Kiln_LinearOp : Kiln_Op<"linear", [Pure]> {
  let summary = "y = x w^T (+ bias), w is [out, in]";
  let arguments = (ins Kiln_Activation:$x, Kiln_Activation:$w,
                   Optional<Kiln_Activation>:$bias);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_SiluOp : Kiln_Op<"silu", [Pure]> {
  let summary = "x * sigmoid(x) (unfused; fuse-gate-up turns silu + mul into silu_mul)";
  let arguments = (ins Kiln_Activation:$x);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_MulOp : Kiln_Op<"mul", [Pure]> {
  let summary = "elementwise a * b (unfused)";
  let arguments = (ins Kiln_Activation:$lhs, Kiln_Activation:$rhs);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_SiluMulOp : Kiln_Op<"silu_mul", [Pure]> {
  let summary = "y = silu(gu[:, :I]) * gu[:, I:]";
  let arguments = (ins Kiln_Activation:$gate_up);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_GeluTanhOp : Kiln_Op<"gelu_tanh", [Pure]> {
  let summary = "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (unfused; fuse-gate-up turns "
                "gelu_tanh + mul into gelu_tanh_mul)";
  let arguments = (ins Kiln_Activation:$x);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_GeluTanhMulOp : Kiln_Op<"gelu_tanh_mul", [Pure]> {
  let summary = "y = gelu_tanh(gu[:, :I]) * gu[:, I:] (GeGLU)";
  let arguments = (ins Kiln_Activation:$gate_up);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_MoeExpertsOp : Kiln_Op<"moe_experts", [Pure]> {
  let summary = "mixture-of-experts MLP: top_k experts by softmax(router_logits), weighted sum";
  let description = [{
    schema/plan.fbs MoeExperts: gate_up holds expert e's [gate | up] rows at e * 2 * intermediate,
    down its rows at e * hidden; the top_k probabilities are renormalized to sum 1 when
    `renormalize` is set (Mixtral; Qwen3-MoE's norm_topk_prob).
  }];
  let arguments = (ins Kiln_Activation:$x, Kiln_Activation:$router_logits,
                   Kiln_Activation:$gate_up, Kiln_Activation:$down, I64Attr:$num_experts,
                   I64Attr:$top_k, I64Attr:$intermediate, I64Attr:$renormalize);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_SigmoidGatedAddOp : Kiln_Op<"sigmoid_gated_add", [Pure]> {
  let summary = "y = a + sigmoid(x . w) * b per row, w is [1, n] (Qwen2-MoE's shared expert)";
  let description = [{
    schema/plan.fbs SigmoidGatedAdd: a is the routed experts' output, b the shared expert's, x
    the MoE block's input and w the shared_expert_gate row; the gate is one scalar per row.
  }];
  let arguments = (ins Kiln_Activation:$a, Kiln_Activation:$b, Kiln_Activation:$x,
                   Kiln_Activation:$w);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_SoftcapOp : Kiln_Op<"softcap", [Pure]> {
  let summary = "y = tanh(x / cap) * cap (Gemma 2's final logit soft-capping)";
  let arguments = (ins Kiln_Activation:$x, F32Attr:$cap);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_RopeKvWriteOp : Kiln_Op<"rope_kv_write",
                                  [MemoryEffects<[MemWrite]>, AttrSizedOperandSegments]> {
  let summary = "rotate q and k, write k and v into the layer's paged KV cache, return q";
  let description = [{
    `qkv` is either one fused [tokens, (H + 2 KV) D] value (what the plan executes) or the three
    unfused q [tokens, H D], k [tokens, KV D], v [tokens, KV D] values the builder emits; fuse-qkv
    rewrites the latter into the former by concatenating the projection weights.
    `rope_mode` (plan.fbs RopeMode) 0 rotates every token by `inv_freq` [rotary_dim / 2]; 1
    (long/short, longrope) holds two tables in `inv_freq` [rotary_dim] (short then long) and uses
    the long one for a sequence whose length (`sequence_lengths`: all its known tokens) exceeds
    `original_max_positions`; 2 (dynamic NTK) recomputes the frequencies from `rope_theta` and
    `dynamic_factor` for such a sequence. Modes 1 and 2 read `query_start_loc` (which sequence a
    token belongs to) and `sequence_lengths`.
    `attention_scaling` multiplies cos and sin (yarn, longrope). With `q_norm` and `k_norm`
    ([head_dim] each, fp32), every q and k head is RMS-normalized with `qk_norm_eps` and scaled by
    its weight before rotation (Qwen3).
  }];
  let arguments = (ins Variadic<Kiln_Activation>:$qkv, Kiln_Index:$positions,
                   Kiln_Index:$slot_mapping, Kiln_Activation:$inv_freq,
                   Optional<Kiln_Index>:$query_start_loc, Optional<Kiln_Index>:$sequence_lengths,
                   Optional<Kiln_Activation>:$q_norm, Optional<Kiln_Activation>:$k_norm,
                   I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                   I64Attr:$rotary_dim,
                   DefaultValuedAttr<I64Attr, "0">:$rope_mode,
                   DefaultValuedAttr<I64Attr, "0">:$original_max_positions,
                   DefaultValuedAttr<F32Attr, "0.0f">:$rope_theta,
                   DefaultValuedAttr<F64Attr, "1.0">:$dynamic_factor,
                   DefaultValuedAttr<F32Attr, "1.0f">:$attention_scaling,
                   DefaultValuedAttr<F32Attr, "0.0f">:$qk_norm_eps);
  let results = (outs Kiln_Activation:$q);
  let assemblyFormat = [{
    `(` $qkv `)` $positions `,` $slot_mapping `,` $inv_freq
    (`sequences` `(` $query_start_loc^ `,` $sequence_lengths `)`)?
    (`qk_norm` `(` $q_norm^ `,` $k_norm `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def Kiln_AttentionOp : Kiln_Op<"attention", [MemoryEffects<[MemRead]>]> {
  let summary = "causal paged attention of q over the layer's KV cache";
  let description = [{
    With `sliding_window` W > 0 the token at position p attends to positions max(0, p - W + 1)..p
    (transformers' sliding window: query - key < W); 0 attends to all of 0..p. With
    `logit_softcap` c > 0 each score s becomes tanh(s / c) * c before the softmax (Gemma 2).
  }];
  let arguments = (ins Kiln_Activation:$q, Kiln_Index:$positions, Kiln_Index:$query_start_loc,
                   Kiln_Index:$context_lens, Kiln_Index:$block_tables,
                   I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                   F32Attr:$scale, DefaultValuedAttr<I64Attr, "0">:$sliding_window,
                   DefaultValuedAttr<F32Attr, "0.0f">:$logit_softcap);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_GatherRowsOp : Kiln_Op<"gather_rows", [Pure]> {
  let summary = "y[i] = x[indices[i]] (the rows whose logits the step returns)";
  let arguments = (ins Kiln_Activation:$x, Kiln_Index:$indices);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_AllReduceOp : Kiln_Op<"all_reduce", [MemoryEffects<[MemWrite]>]> {
  let summary = "sum of x over the tensor-parallel ranks (after a row-parallel linear)";
  let description = [{
    A collective: every rank's program runs it at the same position. Not Pure, so no rewrite
    removes or reorders it on one rank only (the ranks would deadlock on a missing partner).
  }];
  let arguments = (ins Kiln_Activation:$x);
  let results = (outs Kiln_Activation:$result);
}

def Kiln_AllGatherOp : Kiln_Op<"all_gather", [MemoryEffects<[MemWrite]>]> {
  let summary = "the ranks' column shards of x concatenated in rank order (vocab-parallel logits)";
  let description = [{
    The result width may be below tp * x's width: the last shard's padding columns are dropped.
  }];
  let arguments = (ins Kiln_Activation:$x);
  let results = (outs Kiln_Activation:$result);
}

#endif // KILN_OPS_TD
