// The `--kv-dtype` goldens (tools/goldens/make_kv_dtype_goldens.py: transformers' fp32 model with
// k and v rounded to the cache dtype where kiln stores them) checked on a device: shared by
// kv_dtype_test (cpu) and cuda_kv_dtype_test (cuda).
#pragma once

#include "tests/e2e/e2e_util.h"

#include <string>

namespace kiln::e2e {

// Kiln computes k and v in fp32 in its own summation order and rounds them to the cache dtype; an
// element within fp32 noise of a rounding boundary can round to the neighbouring half value in
// one engine and not in the other (a "flip"), which moves the later rows of that sequence by up
// to the flip's effect. So: most rows reproduce the golden to fp32 noise (1e-4), every row is
// within `flipBound`, and the greedy ids agree wherever the golden's top-2 margin exceeds twice
// it. An fp32 cache fails the first check: it moves every row of these goldens by at least 0.0059
// (bf16), 0.0011 (fp16) and 0.15 (fp8), none is within 1e-4. Measured at every ISA level (sse2,
// avx2, avx512, amx): bf16 152 of 152 rows within 1e-4 (worst 2.4e-5), fp16 114-126 of 152 (worst
// 4.6e-4), fp8 116 of 152 (worst 0.048). The bounds are about twice that: fp16 1e-3, bf16 8x it
// (its ulp is 8x fp16's), fp8 0.1; 60% of the rows.
constexpr float kFp16FlipBound = 1e-3f;
constexpr float kBf16FlipBound = 8e-3f;
constexpr float kFp8FlipBound = 0.1f;
constexpr double kReproducedFraction = 0.6;

// `model` (tests/data/models) compiled with --kv-dtype `flag` has fp32 activations and a `expected`
// cache.
void expectKvDtype(const std::string &model, const std::string &flag, schema::DType expected);

// Golden `name` (of `model`, whose cache is `dtype`) on `device`, compiled with `options` plus the
// golden's own (a golden's "kv_scales" are added to the model unless options.kvKScales are given):
// every row of the prompt's prefill, the teacher-forced decode steps and one
// prefill of the whole sequence, as described above.
void checkKvGolden(const std::string &name, const std::string &model, schema::DType dtype,
                   float flipBound, double reproducedFraction, const std::string &device = "cpu",
                   compiler::CompileOptions options = {});

} // namespace kiln::e2e
