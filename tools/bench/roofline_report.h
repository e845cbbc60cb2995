// The host-side half of tools/bench/roofline.cu: rates from timed repetitions and the JSON line it
// prints. No CUDA here, so CI tests the arithmetic and the output format without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

// The ceiling of a machine is its best run: slower repetitions measure interference (clock
// ramp-up, other tenants), not the hardware. Empty or non-positive times give no rate.
inline std::optional<double> bestMs(const std::vector<float> &ms) {
  std::optional<double> best;
  for (float t : ms)
    if (t > 0 && (!best || t < *best))
      best = t;
  return best;
}

// units (bytes or FLOPs) per second from one repetition's milliseconds.
inline double perSecond(double units, double ms) { return units / (ms * 1e-3); }

// A GEMM of m x n x k does one multiply and one add per (i, j, l).
inline double gemmFlops(uint64_t m, uint64_t n, uint64_t k) { return 2.0 * m * n * k; }

// "sm_90a" for compute capability 9.0: the name kiln compile --target and the cuda backend use
// (the 'a' variants on Hopper and Blackwell, as runtime/hal/cuda smTargetName).
inline std::string smTarget(int major, int minor) {
  return "sm_" + std::to_string(major * 10 + minor) + (major == 9 || major == 10 ? "a" : "");
}

struct RooflineReport {
  std::string deviceName;
  int ccMajor = 0, ccMinor = 0;
  int smCount = 0;
  uint64_t memoryBytes = 0;
  int driverVersion = 0, runtimeVersion = 0;
  int repetitions = 0;
  // Bandwidth: a device-to-device copy (counts bytes read + written) and a read-only reduction.
  uint64_t copyBytes = 0; // size of one copy's source buffer
  std::optional<double> copyBestMs, readBestMs;
  uint64_t readBytes = 0;
  // Tensor cores: one m x n x k bf16 GEMM with fp32 accumulate through cuBLASLt.
  uint64_t gemmM = 0, gemmN = 0, gemmK = 0;
  std::optional<double> gemmBestMs;
  int gemmAlgorithmsTried = 0;
  std::vector<std::string> errors; // what could not be measured, and why
};

inline std::string jsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

inline std::string jsonNumber(std::optional<double> v) {
  if (!v)
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", *v);
  return buf;
}

// hbm_bytes_per_s is the larger of the two bandwidth figures: the best the memory system delivered
// in this run, so fractions of it (tools/bench/compare.py) are never flattered by a weak kernel.
inline std::string toJson(const RooflineReport &r) {
  std::optional<double> copyRate, readRate, hbm, flops;
  if (r.copyBestMs)
    copyRate = perSecond(2.0 * r.copyBytes, *r.copyBestMs);
  if (r.readBestMs)
    readRate = perSecond(static_cast<double>(r.readBytes), *r.readBestMs);
  if (copyRate || readRate)
    hbm = std::max(copyRate.value_or(0), readRate.value_or(0));
  if (r.gemmBestMs)
    flops = perSecond(gemmFlops(r.gemmM, r.gemmN, r.gemmK), *r.gemmBestMs);
  std::string errors;
  for (const std::string &e : r.errors)
    errors += (errors.empty() ? "\"" : ", \"") + jsonEscape(e) + "\"";
  std::string j = "{";
  j += "\"tool\": \"kiln-roofline\", \"device_name\": \"" + jsonEscape(r.deviceName) + "\"";
  j += ", \"sm\": \"" + smTarget(r.ccMajor, r.ccMinor) + "\"";
  j += ", \"compute_capability\": \"" + std::to_string(r.ccMajor) + "." +
       std::to_string(r.ccMinor) + "\"";
  j += ", \"sm_count\": " + std::to_string(r.smCount);
  j += ", \"memory_bytes\": " + std::to_string(r.memoryBytes);
  j += ", \"driver_version\": " + std::to_string(r.driverVersion);
  j += ", \"runtime_version\": " + std::to_string(r.runtimeVersion);
  j += ", \"repetitions\": " + std::to_string(r.repetitions);
  j += ", \"hbm_bytes_per_s\": " + jsonNumber(hbm);
  j += ", \"copy_bytes_per_s\": " + jsonNumber(copyRate);
  j += ", \"copy_buffer_bytes\": " + std::to_string(r.copyBytes);
  j += ", \"copy_best_ms\": " + jsonNumber(r.copyBestMs);
  j += ", \"read_bytes_per_s\": " + jsonNumber(readRate);
  j += ", \"read_buffer_bytes\": " + std::to_string(r.readBytes);
  j += ", \"read_best_ms\": " + jsonNumber(r.readBestMs);
  j += ", \"bf16_flops_per_s\": " + jsonNumber(flops);
  j += ", \"gemm_mnk\": [" + std::to_string(r.gemmM) + ", " + std::to_string(r.gemmN) + ", " +
       std::to_string(r.gemmK) + "]";
  j += ", \"gemm_best_ms\": " + jsonNumber(r.gemmBestMs);
  j += ", \"gemm_algorithms_tried\": " + std::to_string(r.gemmAlgorithmsTried);
  j += ", \"errors\": [" + errors + "]}";
  return j;
}

// Without a GPU there is nothing to measure: one JSON object that says so, for scripts.
inline std::string noGpuJson(const std::string &reason) {
  return "{\"tool\": \"kiln-roofline\", \"device_name\": null, \"hbm_bytes_per_s\": null, "
         "\"bf16_flops_per_s\": null, \"errors\": [\"no GPU: " +
         jsonEscape(reason) + "\"]}";
}

} // namespace kiln::tools
