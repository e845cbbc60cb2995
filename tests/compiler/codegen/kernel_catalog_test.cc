// Kernel instance validation, generated translation units and launch shapes: no NVRTC involved.
#include "compiler/codegen/kernel_catalog.h"
#include "tests/kernels/cuda/decoder_kernels.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

KernelInstance rmsNorm(std::string hidden = "4096", std::string threads = "512") {
  return makeKernelInstance("rms_norm", {{"dtype", "bf16"},
                                         {"weight_dtype", "bf16"},
                                         {"hidden", std::move(hidden)},
                                         {"threads", std::move(threads)}});
}

TEST(KernelCatalog, SymbolsAreStableAndReadable) {
  EXPECT_EQ(rmsNorm().symbol, "kiln_rms_norm_bf16_4096_512_bf16");
  // The ten of a decoder (tests/kernels/cuda/decoder_kernels.h), gemv (Linear), argmax_rows
  // (greedy sampling), the four of quantized weights (kernels/cuda/quant.cuh: GEMV, dequantize,
  // embedding; quant_gemm.cuh: the tile GEMM), Gemma 2's
  // gelu_tanh_mul and softcap, moe_experts' six (route, place, gate_up, down, combine and the row
  // kernel), the encoders' layer_norm and gelu, and Qwen2-MoE's sigmoid_gated_add.
  EXPECT_EQ(kernelOps().size(), 27u);
}

TEST(KernelCatalog, GeneratedSourceWrapsEachTemplateInAnExternCEntryPoint) {
  auto source = generateKernelSource(
      {rmsNorm(), makeKernelInstance("attention_prefill", {{"dtype", "f16"},
                                                           {"num_heads", "32"},
                                                           {"num_kv_heads", "8"},
                                                           {"head_dim", "128"},
                                                           {"block_size", "16"},
                                                           {"kv_dtype", "f8"}})});
  ASSERT_TRUE(source.isOk()) << source.status().toString();
  EXPECT_NE(source->find("#include \"kiln/norm.cuh\"\n"), std::string::npos);
  EXPECT_NE(source->find("#include \"kiln/attention_prefill.cuh\"\n"), std::string::npos);
  EXPECT_EQ(source->find("elementwise.cuh"), std::string::npos);
  EXPECT_NE(source->find("extern \"C\" __global__ void __launch_bounds__(512) "
                         "kiln_rms_norm_bf16_4096_512_bf16(const "
                         "kiln::kernels::cuda::RmsNormParams p) {\n  "
                         "kiln::kernels::cuda::allowDependentGrids();\n  "
                         "kiln::kernels::cuda::rmsNorm<__nv_bfloat16, __nv_bfloat16, 4096, "
                         "512>(p);\n}\n"),
            std::string::npos)
      << *source;
  // An fp8 KV cache (--kv-dtype fp8) is the template's last argument.
  EXPECT_NE(source->find("kiln::kernels::cuda::PagedPrefill<__half, 32, 8, 128, 16, "
                         "kiln::kernels::cuda::Fp8E4M3>::run(p);"),
            std::string::npos)
      << *source;
}

TEST(KernelCatalog, InvalidInstancesNameTheProblem) {
  struct Case {
    KernelInstance instance;
    const char *message;
  };
  KernelInstance missing = rmsNorm();
  missing.constants.erase("hidden");
  KernelInstance extra = rmsNorm();
  extra.constants["eps"] = "1";
  KernelInstance badSymbol = rmsNorm();
  badSymbol.symbol = "9lives";
  KernelInstance badDtype = rmsNorm();
  badDtype.constants["dtype"] = "f64";
  KernelInstance unknown = rmsNorm();
  unknown.op = "softmax";
  std::vector<Case> cases = {
      {missing, "missing constant 'hidden'"},
      {extra, "unknown constant 'eps'"},
      {badSymbol, "'9lives' (rms_norm) is not a C identifier"},
      {badDtype, "constant 'dtype' is 'f64'; expected f32, f16 or bf16"},
      {unknown,
       "unknown op 'softmax'; kernel templates exist for embedding, embedding_quant, rms_norm"},
      {rmsNorm("0"), "constant 'hidden' is '0'; expected an integer in [1, 1048576]"},
      {rmsNorm("4096x"), "constant 'hidden' is '4096x'"},
      {rmsNorm("4096", "100"), "'threads' is 100; expected a multiple of 32, at most 1024"},
      {makeKernelInstance("attention_decode", {{"dtype", "f32"},
                                               {"num_heads", "6"},
                                               {"num_kv_heads", "4"},
                                               {"head_dim", "64"},
                                               {"block_size", "16"},
                                               {"kv_dtype", "f32"}}),
       "num_heads 6 is not a multiple of num_kv_heads 4"},
      {makeKernelInstance("attention_decode", {{"dtype", "bf16"},
                                               {"num_heads", "4"},
                                               {"num_kv_heads", "4"},
                                               {"head_dim", "12"},
                                               {"block_size", "16"},
                                               {"kv_dtype", "bf16"}}),
       "head_dim 12 of bf16 is not a whole number of 16-byte vectors"},
      {makeKernelInstance("attention_decode", {{"dtype", "bf16"},
                                               {"num_heads", "4"},
                                               {"num_kv_heads", "4"},
                                               {"head_dim", "24"},
                                               {"block_size", "16"},
                                               {"kv_dtype", "f8"}}),
       "head_dim 24 of f8 is not a whole number of 16-byte vectors"},
      {makeKernelInstance("attention_decode_reduce",
                          {{"dtype", "f8"}, {"num_heads", "8"}, {"head_dim", "16"}}),
       "constant 'dtype' is 'f8'; expected f32, f16 or bf16"},
  };
  for (const Case &c : cases) {
    Status status = validateKernelInstance(c.instance);
    ASSERT_FALSE(status.isOk()) << c.message;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
    EXPECT_FALSE(generateKernelSource({c.instance}).isOk());
  }
  auto twice = generateKernelSource({rmsNorm(), rmsNorm()});
  ASSERT_FALSE(twice.isOk());
  EXPECT_NE(twice.status().message().find("defined twice"), std::string::npos);
}

TEST(KernelCatalog, LaunchShapesFollowTheTemplatesGridRules) {
  auto norm = launchShapeOf(rmsNorm());
  ASSERT_TRUE(norm.isOk());
  EXPECT_EQ(norm->gridRows, GridRows::kRows);
  EXPECT_EQ(norm->gridY, 1);
  EXPECT_EQ(norm->threads, 512);
  // 14336 bf16 = 1792 vectors of 8; 256 threads per CTA -> 7 CTAs per row.
  auto silu = launchShapeOf(makeKernelInstance(
      "silu_mul", {{"dtype", "bf16"}, {"intermediate", "14336"}, {"threads", "256"}}));
  ASSERT_TRUE(silu.isOk());
  EXPECT_EQ(silu->gridY, 7);
  // 172 bf16 is no whole number of vectors: one element per thread, 2 CTAs of 128.
  auto odd = launchShapeOf(makeKernelInstance(
      "silu_mul", {{"dtype", "bf16"}, {"intermediate", "172"}, {"threads", "128"}}));
  ASSERT_TRUE(odd.isOk());
  EXPECT_EQ(odd->gridY, 2);
  // fp32 activations from a bf16 table: vectors of 4 (the narrower of 4 and 8).
  auto embedding = launchShapeOf(makeKernelInstance(
      "embedding",
      {{"dtype", "f32"}, {"weight_dtype", "bf16"}, {"hidden", "4096"}, {"threads", "256"}}));
  ASSERT_TRUE(embedding.isOk());
  EXPECT_EQ(embedding->gridY, 4);
  auto attention = launchShapeOf(makeKernelInstance(
      "attention_decode_reduce", {{"dtype", "f32"}, {"num_heads", "8"}, {"head_dim", "16"}}));
  ASSERT_TRUE(attention.isOk());
  EXPECT_EQ(attention->gridRows, GridRows::kAttention);
  EXPECT_EQ(attention->threads, 128);
}

TEST(KernelCatalog, LlamaNeedsTenKernelsSpecializedToTheModel) {
  std::vector<KernelInstance> kernels =
      kiln::testing::decoderKernels({4096, 32, 8, 128, 14336, 16, 0, "bf16", ""});
  ASSERT_EQ(kernels.size(), 10u);
  std::vector<std::string> symbols;
  for (const KernelInstance &k : kernels) {
    EXPECT_TRUE(validateKernelInstance(k).isOk()) << k.symbol;
    symbols.push_back(k.symbol);
  }
  EXPECT_EQ(symbols, (std::vector<std::string>{
                         "kiln_embedding_bf16_4096_256_bf16",
                         "kiln_rms_norm_bf16_4096_512_bf16",
                         "kiln_add_rms_norm_bf16_4096_512_bf16",
                         "kiln_rope_kv_write_16_bf16_128_bf16_32_8_128_256",
                         "kiln_attention_decode_16_bf16_128_bf16_32_8",
                         "kiln_attention_decode_reduce_bf16_128_32",
                         "kiln_attention_prefill_16_bf16_128_bf16_32_8",
                         "kiln_silu_mul_bf16_14336_256",
                         "kiln_add_bf16_256_4096",
                         "kiln_gather_rows_bf16_256_4096",
                     }));
  // Partial rotary and a tiny model: rotary_dim is its own constant, threads shrink to a warp.
  std::vector<KernelInstance> tiny =
      kiln::testing::decoderKernels({64, 4, 2, 16, 128, 16, 8, "f32", ""});
  EXPECT_EQ(tiny[3].constants.at("rotary_dim"), "8");
  EXPECT_EQ(tiny[1].constants.at("threads"), "32");
}

} // namespace
} // namespace kiln::compiler
