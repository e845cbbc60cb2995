// cudasim does not simulate NCCL: the real libnccl.so.2 would find the simulated libcuda.so.1 and
// fail deep inside its initialization. This libnccl.so.2, first on LD_LIBRARY_PATH beside the
// simulated driver, exports no NCCL entry point, so kiln's probe reports NCCL unavailable and
// multi-GPU runs use the staged communicator (runtime/exec), which works on any device.
extern "C" __attribute__((visibility("default"))) int kilnCudasimNcclIsNotSimulated() {
  return 1;
}
