// Entry points that the simulated driver (libcuda.so.1 from sim_driver.cc) exports beyond the
// CUDA driver API, for the simulated libraries beside it (sim_cublaslt.cc). Resolve them with
// dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY) + dlsym: the process has loaded the simulated
// driver under that soname before any library call can reach them.
#pragma once

#include <cuda.h>

extern "C" {

// Host work ordered on `stream` like a kernel: run now (streams are synchronous in the
// simulator), or, while the stream is being captured, recorded as a graph node that runs `work`
// at every launch of the graph. `release(data)` is called once the work can never run again
// (right after it ran, or when the last graph holding it is destroyed); it may be null.
CUresult kilnCudasimEnqueueHostWork(CUstream stream, void (*work)(void *data), void *data,
                                    void (*release)(void *data));
}

// The symbol name, for dlsym.
inline constexpr const char *kKilnCudasimEnqueueHostWork = "kilnCudasimEnqueueHostWork";
