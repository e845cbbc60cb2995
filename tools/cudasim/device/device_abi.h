// The interface between kernels compiled for the simulator (device/cudasim_device.h, built into
// a shared object per kernel by kernel_jit.cc) and the grid runner that executes them
// (grid_runner.cc). Plain structs and function pointers only: both sides are compiled separately,
// the kernel side with nothing but this header, the shims beside it and the kernel templates.
#pragma once

namespace kiln_cudasim {

struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
};

// What a CUDA thread reads through threadIdx, blockIdx, blockDim and gridDim.
struct ThreadContext {
  Dim3 threadIdx;
  Dim3 blockIdx;
  Dim3 blockDim;
  Dim3 gridDim;
};

// The built-ins that need the other threads of the block. Each call that synchronizes suspends
// the calling thread (a fiber) until its partners arrive, as a GPU warp or CTA would.
struct DeviceApi {
  // The context of the thread that is running now (the runner's fiber on this OS thread).
  ThreadContext *(*current)();
  void (*syncThreads)();
  void (*syncWarp)(unsigned mask);
  // Every lane in `mask` passes its 32-bit value and the lane it reads; returns that lane's value.
  unsigned (*shuffle)(unsigned mask, unsigned bits, int sourceLane);
  unsigned (*ballot)(unsigned mask, int predicate);
  // Stops the launch with an error naming the thread (device-side assert, __trap()).
  [[noreturn]] void (*trap)(const char *what);
};

} // namespace kiln_cudasim

// Defined by every simulated kernel's shared object; the runner points it at its DeviceApi
// right after loading the object.
extern "C" const kiln_cudasim::DeviceApi *kiln_cudasim_api;
