// Entry points that the simulated driver (libcuda.so.1 from sim_driver.cc) exports beyond the
// CUDA driver API, for the simulated libraries beside it (sim_cublaslt.cc, sim_nccl.cc). Resolve
// them with dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY) + dlsym: the process has loaded the
// simulated driver under that soname before any library call can reach them.
#pragma once

#include <cuda.h>

#include <cstddef>

extern "C" {

// Host work ordered on `stream` like a kernel: run now (streams are synchronous in the
// simulator), or, while the stream is being captured, recorded as a graph node that runs `work`
// at every launch of the graph. `release(data)` is called once the work can never run again
// (right after it ran, or when the last graph holding it is destroyed); it may be null.
CUresult kilnCudasimEnqueueHostWork(CUstream stream, void (*work)(void *data), void *data,
                                    void (*release)(void *data));

// What NCCL learns from the CUDA runtime, for the simulated NCCL. Each returns a device ordinal,
// or -1 with `why` (NUL-terminated, at most `whyBytes`) saying what is wrong.
// The device of this thread's current context.
int kilnCudasimCurrentDevice(char *why, size_t whyBytes);
// The device `stream` belongs to (the legacy stream: the current context's device), and in
// `*capturing` whether it is being captured.
int kilnCudasimStreamDevice(CUstream stream, int *capturing, char *why, size_t whyBytes);
// The device whose live allocation holds all of [p, p + bytes) (cuMemHostAlloc memory is none).
int kilnCudasimRangeDevice(const void *p, size_t bytes, char *why, size_t whyBytes);
}

// The symbol names, for dlsym.
inline constexpr const char *kKilnCudasimEnqueueHostWork = "kilnCudasimEnqueueHostWork";
inline constexpr const char *kKilnCudasimCurrentDevice = "kilnCudasimCurrentDevice";
inline constexpr const char *kKilnCudasimStreamDevice = "kilnCudasimStreamDevice";
inline constexpr const char *kKilnCudasimRangeDevice = "kilnCudasimRangeDevice";
