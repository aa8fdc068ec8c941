// doctest main for the CUDA test programs that need a GPU: without a device
// it prints "no CUDA device: skipped" and exits 77, which Meson reports as
// SKIP (the CPU-only CI machines build these programs but cannot run them).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped (cudaGetDeviceCount: %s, %d devices)\n",
                rc == cudaSuccess ? "ok" : cudaGetErrorString(rc), rc == cudaSuccess ? devices : 0);
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
