// Quantized weights end to end (schema/plan.fbs Q8 / Q4 / Q4M): compiled by the real compiler,
// run on the cpu backend, against transformers on the same quantized weights.
// - `--quantize int8` (one scale per row) and `--quantize int4` (groups of 32, tied table):
//   tools/goldens/make_quantize_goldens.py quantizes the fixtures in numpy by the formats'
//   definitions; logits within 1e-4 at every position, greedy ids, chunked prefill and
//   prefix-cache hits (the quantized goldens move the logits by 0.15 and 3.1 from fp32's, so the
//   test tells quantized from unquantized weights).
// - GGUF blocks kept packed by default and dequantized when --dtype is given; the artifact's
//   bytes are the packed size.
// - Mixture-of-experts (tiny-mixtral): experts quantized, routers kept F32, against transformers on
//   the same quantized experts.
// - Flags and shapes kiln cannot quantize fail to compile, naming the flag or the weight.
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

TEST(QuantizedModels, Int8PerRowMatchesTransformers) {
  checkGoldenLogits("tiny-llama.int8");
  checkGoldenChunkedAndCached("tiny-llama.int8", 5);
}

// fp8 E4M3 values with one fp16 scale per row (Q8F).
TEST(QuantizedModels, Fp8PerRowMatchesTransformers) {
  compiler::CompileOptions fp8;
  fp8.quantize = "fp8";
  WeightFormats formats = weightFormats(compileForTest(kData + "/models/tiny-llama", fp8));
  // hidden 64: qkv, o, gate_up of 2 layers, the embedding table and the lm_head; down's rows 128.
  EXPECT_EQ(formats.count["Q8F g64"], 8);
  EXPECT_EQ(formats.count["Q8F g128"], 2);
  checkGoldenLogits("tiny-llama.fp8");
  checkGoldenChunkedAndCached("tiny-llama.fp8", 5);
}

TEST(QuantizedModels, Int4GroupsTiedTableMatchesTransformers) {
  checkGoldenLogits("tiny-llama-tied.int4");
  checkGoldenChunkedAndCached("tiny-llama-tied.int4", 6);
}

TEST(QuantizedModels, GgufBlocksStayPackedUnlessDtypeIsGiven) {
  const std::string gguf = kData + "/gguf/tiny-llama.gguf"; // Q8_0 matrices
  WeightFormats packed = weightFormats(compileForTest(gguf));
  // qkv, o, gate_up, down per layer (2), the embedding table and the lm_head; norms stay F32.
  EXPECT_EQ(packed.count["Q8 g32"], 10);
  EXPECT_EQ(packed.count["F32"], 6);
  compiler::CompileOptions dense;
  dense.keepGgufBlocks = false;
  WeightFormats dequantized = weightFormats(compileForTest(gguf, dense));
  EXPECT_EQ(dequantized.count["F32"], 16);
  EXPECT_EQ(dequantized.quantizedBytes, 0u);
  checkGoldenLogits("tiny-llama.gguf", "cpu", dense);
}

// A GPU target keeps the blocks packed too (one weights file serves every target of the
// artifact; tests/e2e/cuda_quantized_test.cc runs them on cuda).
TEST(QuantizedModels, GpuTargetsKeepGgufBlocksPacked) {
#ifndef KILN_HAVE_CODEGEN
  GTEST_SKIP() << "built without the CUDA code generator (KILN_ENABLE_CUDA=OFF)";
#else
  compiler::CompileOptions options;
  options.targets = {"cpu", "sm_90"};
  WeightFormats formats = weightFormats(compileForTest(kData + "/gguf/tiny-llama.gguf", options));
  EXPECT_EQ(formats.count["Q8 g32"], 10);
  EXPECT_EQ(formats.count["F32"], 6);
#endif
}

// Q4 g32 stores 4 bits a weight plus an fp16 scale a group: 4.5 bits, 64-byte aligned sections.
TEST(QuantizedModels, Int4BytesAreAQuarterOfBf16PlusScales) {
  compiler::CompileOptions int4;
  int4.quantize = "int4";
  WeightFormats formats = weightFormats(compileForTest(kData + "/models/tiny-llama-tied", int4));
  // tiny-llama-tied: hidden 64, intermediate 128, vocab 512, 3 layers; per layer qkv [128, 64],
  // o [64, 64], gate_up [256, 64], down [64, 128]; the tied table [512, 64]. At most 2 x 63
  // bytes of section padding a matrix.
  const uint64_t values = 3 * (128 * 64 + 64 * 64 + 256 * 64 + 64 * 128) + 512 * 64;
  EXPECT_EQ(formats.count["Q4 g32"], 13);
  EXPECT_GE(formats.quantizedBytes, values / 2 + values / 32 * 2);
  EXPECT_LE(formats.quantizedBytes, values / 2 + values / 32 * 2 + 13 * 2 * 63);
}

// Mixture-of-experts: every expert's gate_up and down stored quantized and read in place
// (kernels/cpu/moe.cc), the routers kept F32 (compiler/transforms/quantize_weights.cc);
// tools/goldens/make_quantize_goldens.py quantizes the experts of transformers' model the same
// way (the routing on the quantized weights keeps a lead of 1e-3 on every golden token).
// tiny-mixtral: hidden 64, 8 experts of 96, 2 layers.
void checkQuantizedMoe(const std::string &mode, const std::string &format64,
                       const std::string &formatDown) {
  SCOPED_TRACE(mode);
  compiler::CompileOptions options;
  options.quantize = mode;
  options.groupSize = mode == "int4" ? 32 : 0;
  WeightFormats formats = weightFormats(compileForTest(kData + "/models/tiny-mixtral", options));
  // qkv, o and the experts' gate_up per layer, the embedding table and the lm_head; the experts'
  // down [8 x 64, 96]; F32: 2 norms per layer, the final norm, the RoPE table and the 2 routers.
  if (format64 == formatDown) {
    EXPECT_EQ(formats.count[format64], 10);
  } else {
    EXPECT_EQ(formats.count[format64], 8);
    EXPECT_EQ(formats.count[formatDown], 2);
  }
  EXPECT_EQ(formats.count["F32"], 8);
  checkGoldenLogits("tiny-mixtral." + mode);
  checkGoldenChunkedAndCached("tiny-mixtral." + mode, 5);
}

TEST(QuantizedModels, MoeExpertsInt8PerRowMatchTransformers) {
  checkQuantizedMoe("int8", "Q8 g64", "Q8 g96");
}
TEST(QuantizedModels, MoeExpertsInt4GroupsMatchTransformers) {
  checkQuantizedMoe("int4", "Q4 g32", "Q4 g32");
}

std::string compileError(const std::string &model, compiler::CompileOptions options) {
  options.modelDir = model;
  options.outDir = "/tmp/kiln-quantized-never-written.kiln";
  Status status = compiler::compileModel(options);
  EXPECT_FALSE(status.isOk());
  return status.message();
}

TEST(QuantizedModels, UnquantizableRequestsFailNamingTheFlagOrWeight) {
  const std::string model = kData + "/models/tiny-llama"; // hidden 64, intermediate 128
  struct Case {
    std::string quantize;
    int64_t groupSize;
    int64_t tp;
    std::vector<std::string> targets;
    std::string expected;
  };
  const Case cases[] = {
      {"int3", 0, 1, {"cpu"}, "--quantize 'int3' is not supported: use int8, int4 or fp8"},
      {"int4", 48, 1, {"cpu"}, "--group-size must be a multiple of 32"},
      {"", 32, 1, {"cpu"}, "--group-size 32 needs --quantize int8|int4|fp8"},
      {"int4", 128, 1, {"cpu"}, "has 64 columns, which groups of 128 do not divide"},
      {"int4", 64, 2, {"cpu"}, "--tp 2 splits the 64-column groups of quantized weight"},
  };
  for (const Case &c : cases) {
    compiler::CompileOptions options;
    options.quantize = c.quantize;
    options.groupSize = c.groupSize;
    options.tp = c.tp;
    options.targets = c.targets;
    const std::string message = compileError(model, options);
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
  // Experts: a rank's 48 of tiny-mixtral's 96 columns of down split the 32-column runs.
  compiler::CompileOptions tp2;
  tp2.quantize = "int8";
  tp2.tp = 2;
  std::string message = compileError(kData + "/models/tiny-mixtral", tp2);
  EXPECT_NE(message.find("--tp 2 splits the 32-column groups of quantized weight"),
            std::string::npos)
      << message;
}

} // namespace
} // namespace kiln::e2e
