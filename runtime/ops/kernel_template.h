// What the op table says about a CUDA kernel template in kernels/cuda: the header it lives in, the
// parameter struct it takes, its template constants and how its launch grid follows from them;
// and one specialization of it (KernelInstance). Plain data: compiler/codegen turns instances into
// NVRTC source, the runtime only ever sees their symbols.
#pragma once

#include "schema/plan_generated.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::rt {

// How a launch's grid follows from the template's constants (compiler/codegen launchShapeOf).
enum class KernelGrid : uint8_t {
  kRowCta,         // grid.x = rows, one CTA per row
  kRowChunks,      // grid (rows, ceil(width / (threads * vector width)))
  kRowChunksMixed, // as kRowChunks, vector width also limited by weight_dtype
  kAttention,      // the runtime computes the grid from the step counts
  kGemv,           // the runtime computes the grid from the op's out features
};

struct KernelTemplate {
  const char *op;                      // "rms_norm": the instance's op, also its symbol's stem
  const char *header;                  // include name under "kiln/"
  const char *paramsType;              // struct in kernels/cuda/params.h
  const char *callee;                  // template, called as callee<args>(p); a PascalCase
                                       // name is a struct template whose run() is called
  std::vector<const char *> constants; // template arguments in order
  KernelGrid grid = KernelGrid::kRowCta;
  const char *widthConstant = nullptr; // kRowChunks*: the row width cut into chunks
  int32_t fixedGridY = 0;              // kRowCta: grid.y when > 0 (CTAs sharing a row)
};

// One specialization of a template, exported as extern "C" __global__ `symbol`. `constants` are
// its template arguments by name: "dtype" / "weight_dtype" / "y_dtype" are "f32", "f16" or "bf16",
// "kv_dtype" one of those or "f8" (fp8 E4M3, common.cuh Fp8E4M3), the rest decimal integers.
struct KernelInstance {
  std::string op;
  std::string symbol;
  std::map<std::string, std::string> constants;
};

// A stable, readable symbol: "kiln_" + op + each constant's value in name order, e.g.
// kiln_rms_norm_bf16_4096_512_bf16 (dtype, hidden, threads, weight_dtype).
std::string kernelSymbol(const std::string &op,
                         const std::map<std::string, std::string> &constants);
KernelInstance makeKernelInstance(const std::string &op,
                                  std::map<std::string, std::string> constants);

// "f32", "f16" or "bf16" for a float dtype, "f8" for F8E4M3 (a KV cache's; "f32" for anything
// else).
std::string kernelDType(schema::DType dtype);
// Threads for `elements` units of work per CTA: whole warps, at least one, at most `cap`.
int64_t threadsFor(int64_t elements, int64_t cap);
// 16-byte vectors per row when the row is a whole number of them, else one element each
// (kernels/cuda/elementwise.cuh and norm.cuh load rows this way).
int64_t vectorsPerRow(int64_t width, const std::string &dtype);

} // namespace kiln::rt
