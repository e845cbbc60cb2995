// One CUDA kernel launch as the op table describes it (runtime/ops/op_table.h): which of the op's
// kernels, the grid, and the parameter struct of kernels/cuda/params.h passed by value. Plain host
// data: runtime/hal/cuda turns it into a cuLaunchKernel call.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace kiln::rt {

// Device scratch of an op's launches (OpEntry::cuda.scratchBytes of them, allocated when the op
// is prepared, never during a step): the split-K partials of decode attention, the routed rows of
// a mixture-of-experts layer. One buffer serves every op of the device in turn (ops run in order
// on one stream, and no op keeps anything in it past its own launches).
struct OpScratch {
  void *base = nullptr;
};

struct CudaLaunch {
  size_t kernel = 0; // index into the op's kernel symbols (Op.kernel, comma-separated)
  // true: the backend sets grid, block and shared bytes from the plan op's GridRule for the
  // step's counts; false: the op table entry computed them (attention).
  bool gridFromPlan = true;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block = 128;
  uint32_t sharedBytes = 0;
  alignas(8) std::array<uint8_t, 192> params{}; // one params.h struct, passed by value
  size_t paramBytes = 0;
};

template <typename Params> CudaLaunch launchWith(const Params &params, size_t kernel = 0) {
  static_assert(sizeof(Params) <= sizeof(CudaLaunch::params), "params struct too large");
  CudaLaunch launch;
  launch.kernel = kernel;
  std::memcpy(launch.params.data(), &params, sizeof(Params));
  launch.paramBytes = sizeof(Params);
  return launch;
}

} // namespace kiln::rt
