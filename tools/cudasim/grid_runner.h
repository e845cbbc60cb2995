// Runs a CUDA kernel's grid on the CPU: blocks one after another, the threads of a block as
// fibers on the calling OS thread. A thread runs until it reaches __syncthreads, a warp
// collective (__shfl*_sync, __syncwarp, __ballot_sync) or its end; the runner then releases
// every barrier whose participants have all arrived, as a GPU would. A barrier that can never
// complete (a __syncthreads inside divergent code, a shuffle whose mask names an exited lane)
// fails the launch with an error naming the block, the warps and what each waits for, where a
// GPU would hang or compute garbage.
#pragma once

#include "runtime/base/status.h"
#include "tools/cudasim/device/device_abi.h"

#include <string>

namespace kiln::cudasim {

using kiln_cudasim::Dim3;

// A kernel body for one thread: the simulated kernel's entry point, given its parameter struct.
using KernelEntry = void (*)(const void *params);

// Runs the whole grid and returns when every thread has finished. Launches from several OS
// threads are serialized: a simulated kernel's __shared__ variables are the object's statics.
// Errors: dimensions CUDA rejects (empty, block over 1024 threads, grid y/z over 65535),
// `maxThreads` (the kernel's __launch_bounds__, 0 = none) exceeded, a deadlock, a trap.
Status runGrid(const std::string &name, KernelEntry entry, const void *params, Dim3 grid,
               Dim3 block, unsigned maxThreads = 0);

// The table simulated kernels call through (device_abi.h).
const kiln_cudasim::DeviceApi &deviceApi();

} // namespace kiln::cudasim
