// `kiln compile --kv-dtype`: a KV cache dtype of its own (bf16, fp16, fp8 E4M3) under fp32
// activations (schema/plan.fbs "Dtypes"), compiled by the real compiler and run on the cpu
// backend, against transformers' fp32 model with k (after rotary) and v rounded to that dtype
// where kiln stores them
// (tools/goldens/make_kv_dtype_goldens.py): every row of the prompt's prefill, the teacher-forced
// decode steps and one prefill of the whole sequence, up to rounding flips (checkKvGolden). The
// rounding moves the goldens' logits by up to 0.025 (bf16), 0.0055 (fp16) and 0.45 (fp8) from
// fp32's.
// Flags kiln cannot honour fail to compile, naming the flag.
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/kv_golden_util.h"

#include "runtime/artifact/artifact.h"
#include "runtime/base/file.h"
#include "runtime/exec/kv_calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

TEST(KvDtype, Bf16CacheUnderFp32ActivationsMatchesTransformers) {
  checkKvGolden("tiny-llama.kv-bf16", "tiny-llama", schema::DType::BF16, kBf16FlipBound,
                kReproducedFraction);
}

TEST(KvDtype, Fp16CacheUnderFp32ActivationsMatchesTransformers) {
  checkKvGolden("tiny-llama-tied.kv-fp16", "tiny-llama-tied", schema::DType::F16, kFp16FlipBound,
                kReproducedFraction);
}

TEST(KvDtype, Fp8CacheUnderFp32ActivationsMatchesTransformers) {
  checkKvGolden("tiny-llama-tied.kv-fp8", "tiny-llama-tied", schema::DType::F8E4M3, kFp8FlipBound,
                kReproducedFraction);
}

// A checkpoint's calibrated per-layer k_scale / v_scale (tools/goldens/make_kv_dtype_goldens.py:
// amax of each layer's k and v over the prompts / 448, as llm-compressor calibrates them): the
// cache stores fp8(k / k_scale), attention reads it times k_scale. The golden moves by more than
// the flip bound from the unscaled fp8 golden's rows, so a cache that ignored the scales fails.
TEST(KvDtype, Fp8CacheWithCalibratedScalesMatchesTransformers) {
  checkKvGolden("tiny-llama-tied.kv-fp8-scaled", "tiny-llama-tied", schema::DType::F8E4M3,
                kFp8FlipBound, kReproducedFraction);
}

// kiln's own calibration (runtime/exec/kv_calibration.h: `kiln compile --kv-calibration`) on the
// golden's prompts measures what transformers measured there, the largest |k| after rotary and
// |v| of each layer, so it finds the golden's scales (to fp32 noise in k and v); compiled with
// them, the fp8 cache matches the golden as the checkpoint's scales do.
TEST(KvDtype, KilnCalibratesTheScalesTransformersCalibrated) {
  const std::string name = "tiny-llama-tied.kv-fp8-scaled";
  Result<std::string> text = readFile(kData + "/golden/" + name + ".json");
  ASSERT_TRUE(text.isOk()) << text.status().toString();
  const nlohmann::json golden = nlohmann::json::parse(*text);
  std::vector<std::vector<int32_t>> prompts;
  for (const nlohmann::json &c : golden.at("cases"))
    prompts.push_back(c.at("prompt_ids").get<std::vector<int32_t>>());
  compiler::CompileOptions measuring;
  measuring.maxSeqLen = 64;
  Result<rt::KvCalibration> calibration =
      rt::calibrateKvCache(compileForTest(kData + "/models/tiny-llama-tied", measuring), prompts);
  ASSERT_TRUE(calibration.isOk()) << calibration.status().toString();
  const auto scales = golden.at("kv_scales").get<std::map<std::string, float>>();
  ASSERT_EQ(calibration->kScales.size(), scales.size() / 2);
  for (size_t l = 0; l < calibration->kScales.size(); ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".self_attn.";
    const float k = scales.at(layer + "k_scale"), v = scales.at(layer + "v_scale");
    EXPECT_NEAR(calibration->kScales[l], k, 1e-5 * k) << l;
    EXPECT_NEAR(calibration->vScales[l], v, 1e-5 * v) << l;
  }
  size_t tokens = 0;
  for (const auto &p : prompts)
    tokens += p.size();
  EXPECT_EQ(calibration->tokens, static_cast<int64_t>(tokens));
  compiler::CompileOptions options;
  options.kvKScales = calibration->kScales;
  options.kvVScales = calibration->vScales;
  checkKvGolden(name, "tiny-llama-tied", schema::DType::F8E4M3, kFp8FlipBound, kReproducedFraction,
                "cpu", options);
}

TEST(KvDtype, AsDtypeWhenNotGiven) {
  expectKvDtype("tiny-llama", "", schema::DType::F32);
  expectKvDtype("tiny-llama", "fp32", schema::DType::F32);
}

TEST(KvDtype, UnsupportedRequestsFailNamingTheFlag) {
  struct Case {
    std::string kvDtype, dtype;
    std::vector<std::string> targets;
    std::string expected;
  };
  const Case cases[] = {
      {"fp4", "fp32", {"cpu"}, "--kv-dtype 'fp4' is not supported: use fp32, fp16, bf16 or fp8"},
  };
  for (const Case &c : cases) {
    compiler::CompileOptions options;
    options.modelDir = kData + "/models/tiny-llama";
    options.outDir = "/tmp/kiln-kv-dtype-never-written.kiln";
    options.kvDtype = c.kvDtype;
    options.dtype = c.dtype;
    options.targets = c.targets;
    const Status status = compiler::compileModel(options);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
  }
}

} // namespace
} // namespace kiln::e2e
