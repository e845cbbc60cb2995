// Linear: out = x W^T (+ b); x, W and out each fp32/fp16/bf16, fp32 accumulation.
//
// The tiles run at the CPU's instruction-set level (cpu_isa.h): linear_sse2.cc (4 lanes),
// linear_avx2.cc (8 lanes, FMA) or linear_avx512.cc (16 lanes, FMA), all built from
// linear_impl.inc, which fixes each output element's summation order for its width. This file is
// built for the baseline and only picks the tile function and splits the tiles over the worker pool
// (worker_pool.h). From avx2 up, Linears with fp32, bf16 or (where the CPU has F16C) fp16 weights
// run on panels (linear_panels_impl.inc: weights packed in their own type when the op is prepared,
// widened after each load, x broadcast) of 16 outputs at avx2 (linear_panels_avx2.cc) and 32 from
// avx512 up (linear_panels_avx512.cc). avx512bf16 does not use its
// dot-product instruction: it multiplies bf16 activations, which would round the fp32 x that the
// references expect. amx runs Linears with bf16 weights on the tiles (linear_amx.cc: x rounded
// to bf16, as llama.cpp's and vLLM's bf16 paths do).
#include "kernels/cpu/elem_io.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/linear_amx.h"
#include "kernels/cpu/linear_panels.h"
#include "kernels/cpu/linear_quant.h"
#include "kernels/cpu/linear_tile.h"
#include "kernels/cpu/worker_pool.h"

#include <algorithm>

namespace kiln::kernels::cpu {
namespace {

using namespace linear_tile;

TileFn tileFunctionFor(CpuIsa isa) {
  switch (isa) {
  case CpuIsa::kAvx512:
  case CpuIsa::kAvx512Bf16:
  case CpuIsa::kAmx:
    return tileAvx512;
  case CpuIsa::kAvx2:
    return tileAvx2;
  case CpuIsa::kSse2:
    break;
  }
  return tileSse2;
}

// Floats of a worker's XCache for this call (linear_tile.h); 0 when x is read in place or too
// large to keep.
size_t cachedXFloats(const LinearArgs &args) {
  const bool converted = args.weightType == WeightType::kBF16 || args.xType != ElemType::kF32;
  const int64_t floats = int64_t(args.rows) * cachedXStride(args.inFeatures);
  if (!converted || args.rows > kMaxCachedRowTiles * kRowTile || floats > kMaxCachedXFloats)
    return 0;
  return static_cast<size_t>(floats);
}

// How the active level runs a Linear with these weights, and so whether it packs them.
enum class Path { kTiles, kAmx, kPanelsAvx2, kPanelsAvx512 };
Path pathFor(WeightType type) {
  const CpuIsa isa = activeCpuIsa();
  if (isa == CpuIsa::kAmx && type == WeightType::kBF16)
    return Path::kAmx;
  const bool panelType = type == WeightType::kF32 || type == WeightType::kBF16 ||
                         (type == WeightType::kF16 && cpuHasF16c());
  if (panelType && isa >= CpuIsa::kAvx512)
    return Path::kPanelsAvx512;
  if (panelType && isa == CpuIsa::kAvx2)
    return Path::kPanelsAvx2;
  return Path::kTiles;
}

} // namespace

size_t linearPackedWeightBytes(WeightType type, int32_t outFeatures, int32_t inFeatures,
                               QuantWeight quant) {
  if (quant.groupSize > 0)
    return quantPackedWeightBytes(quant, outFeatures, inFeatures);
  switch (pathFor(type)) {
  case Path::kAmx:
    return packedAmxWeightBytes(outFeatures, inFeatures);
  case Path::kPanelsAvx2:
    return packedPanelBytesAvx2(type, outFeatures, inFeatures);
  case Path::kPanelsAvx512:
    return packedPanelBytesAvx512(type, outFeatures, inFeatures);
  case Path::kTiles:
    break;
  }
  return 0;
}

void packLinearWeights(const void *weight, WeightType type, int32_t outFeatures, int32_t inFeatures,
                       void *packed, QuantWeight quant) {
  if (quant.groupSize > 0)
    return packQuantWeights(weight, quant, outFeatures, inFeatures, packed);
  switch (pathFor(type)) {
  case Path::kAmx:
    return packAmxWeights(static_cast<const uint16_t *>(weight), outFeatures, inFeatures, packed);
  case Path::kPanelsAvx2:
    return packPanelsAvx2(weight, type, outFeatures, inFeatures, packed);
  case Path::kPanelsAvx512:
    return packPanelsAvx512(weight, type, outFeatures, inFeatures, packed);
  case Path::kTiles:
    break;
  }
}

void linear(const LinearArgs &args) {
  if (args.quant.groupSize > 0) // weightType is not read (linear_quant.h)
    return linearQuant(args);
  switch (pathFor(args.weightType)) {
  case Path::kAmx:
    return linearAmx(args);
  case Path::kPanelsAvx2:
    return linearPanelsAvx2(args);
  case Path::kPanelsAvx512:
    return linearPanelsAvx512(args);
  case Path::kTiles:
    break;
  }
  const TileFn runTile = tileFunctionFor(activeCpuIsa());
  const int32_t rowTiles = (args.rows + kRowTile - 1) / kRowTile;
  const int32_t outTiles = (args.outFeatures + kOutTile - 1) / kOutTile;
  const int64_t tasks = static_cast<int64_t>(rowTiles) * outTiles;
  const int64_t work = static_cast<int64_t>(args.rows) * args.inFeatures * args.outFeatures;
  const size_t cacheFloats = cachedXFloats(args);
  parallelRun(work > 65536, [&](int worker, int workers) {
    float *scratch = threadScratch(kScratchFloats + cacheFloats);
    XCache cache;
    cache.data = cacheFloats ? scratch + kScratchFloats : nullptr;
    // Row tiles innermost, so a thread's consecutive tasks read the same weight rows (from L2
    // after the first); decode has one row tile and so splits purely over outputs.
    const IndexRange range = staticRange(tasks, worker, workers);
    for (int64_t task = range.begin; task < range.end; ++task) {
      const int32_t outTile = static_cast<int32_t>(task / rowTiles);
      const int32_t rowTile = static_cast<int32_t>(task % rowTiles);
      Tile tile;
      tile.xCache = &cache;
      tile.row0 = rowTile * kRowTile;
      tile.rows = std::min(kRowTile, args.rows - tile.row0);
      tile.out0 = outTile * kOutTile;
      tile.outs = std::min(kOutTile, args.outFeatures - tile.out0);
      runTile(args, tile, scratch);
    }
  });
}

} // namespace kiln::kernels::cpu
