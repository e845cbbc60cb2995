// The dense reference: one sequence, no paging, double precision, written from the Llama
// definition (transformers' modeling_llama) rather than from the plan, so it checks the plan's
// op semantics and the executor together.
#include "tests/runtime/exec/tiny_llama.h"

#include <cmath>

namespace kiln::rt::testing {
namespace {

using Matrix = std::vector<double>; // row-major [rows, cols]

// y[r, o] = sum_i x[r, i] * w[o, i]
Matrix matmulT(const Matrix &x, int64_t rows, const NamedTensor &w) {
  int64_t out = static_cast<int64_t>(w.shape[0]), in = static_cast<int64_t>(w.shape[1]);
  Matrix y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i)
        sum += x[r * in + i] * double(w.values[o * in + i]);
      y[r * out + o] = sum;
    }
  return y;
}

Matrix rmsNorm(const Matrix &x, int64_t rows, const NamedTensor &w, double eps) {
  int64_t n = static_cast<int64_t>(w.shape[0]);
  Matrix y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double meanSquare = 0;
    for (int64_t i = 0; i < n; ++i)
      meanSquare += x[r * n + i] * x[r * n + i];
    double inv = 1.0 / std::sqrt(meanSquare / n + eps);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = x[r * n + i] * inv * double(w.values[i]);
  }
  return y;
}

// HF rotate_half on one head vector in place.
void rope(double *x, int32_t position, const NamedTensor &invFreq) {
  int64_t half = static_cast<int64_t>(invFreq.values.size());
  for (int64_t i = 0; i < half; ++i) {
    double angle = double(position) * double(invFreq.values[i]);
    double a = x[i], b = x[i + half];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

// Causal GQA attention over the whole sequence; qkv rows are [q heads | k heads | v heads].
Matrix attention(Matrix &qkv, int64_t n, const TinyLlamaConfig &c, const NamedTensor &invFreq) {
  const int64_t d = c.headDim, width = int64_t(c.heads + 2 * c.kvHeads) * d;
  for (int64_t t = 0; t < n; ++t)
    for (int32_t h = 0; h < c.heads + c.kvHeads; ++h)
      rope(&qkv[t * width + h * d], static_cast<int32_t>(t), invFreq);
  Matrix out(n * c.heads * d, 0.0);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int64_t t = 0; t < n; ++t)
    for (int32_t h = 0; h < c.heads; ++h) {
      const int32_t kvHead = h / (c.heads / c.kvHeads);
      const double *q = &qkv[t * width + h * d];
      std::vector<double> scores(t + 1);
      double maxScore = -1e300;
      for (int64_t s = 0; s <= t; ++s) {
        const double *k = &qkv[s * width + (c.heads + kvHead) * d];
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += q[i] * k[i];
        scores[s] = dot * scale;
        maxScore = std::max(maxScore, scores[s]);
      }
      double total = 0;
      for (double &score : scores)
        total += (score = std::exp(score - maxScore));
      for (int64_t s = 0; s <= t; ++s) {
        const double *v = &qkv[s * width + (c.heads + c.kvHeads + kvHead) * d];
        for (int64_t i = 0; i < d; ++i)
          out[(t * c.heads + h) * d + i] += scores[s] / total * v[i];
      }
    }
  return out;
}

Matrix mlp(const Matrix &x, int64_t n, const TinyLlama &model, const std::string &prefix) {
  const int64_t inter = model.config.intermediate;
  Matrix gateUp = matmulT(x, n, model.weight(prefix + "gate_up"));
  Matrix act(n * inter);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < inter; ++i) {
      double g = gateUp[t * 2 * inter + i], u = gateUp[t * 2 * inter + inter + i];
      act[t * inter + i] = g / (1.0 + std::exp(-g)) * u;
    }
  return matmulT(act, n, model.weight(prefix + "down"));
}

} // namespace

std::vector<double> referenceLogits(const TinyLlama &model, const std::vector<int32_t> &tokens) {
  const TinyLlamaConfig &c = model.config;
  const int64_t n = static_cast<int64_t>(tokens.size()), hidden = c.hidden;
  const NamedTensor &embed = model.weight("embed.weight");
  Matrix h(n * hidden);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < hidden; ++i)
      h[t * hidden + i] = embed.values[tokens[t] * hidden + i];
  for (int32_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    Matrix qkv =
        matmulT(rmsNorm(h, n, model.weight(p + "input_norm"), c.eps), n, model.weight(p + "qkv"));
    Matrix o =
        matmulT(attention(qkv, n, c, model.weight("rope.inv_freq")), n, model.weight(p + "o"));
    for (size_t i = 0; i < h.size(); ++i)
      h[i] += o[i];
    Matrix m = mlp(rmsNorm(h, n, model.weight(p + "post_norm"), c.eps), n, model, p);
    for (size_t i = 0; i < h.size(); ++i)
      h[i] += m[i];
  }
  return matmulT(rmsNorm(h, n, model.weight("final_norm"), c.eps), n, model.weight("lm_head"));
}

} // namespace kiln::rt::testing
