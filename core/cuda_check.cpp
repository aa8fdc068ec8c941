// CUDA / NCCL / cuBLAS result checking; see core/cuda_check.h.
#include "core/cuda_check.h"

#include <string>

namespace zeroshard {

namespace {

// "device 3", or a note that no device could be queried (the failing call
// may be the first one, e.g. with no driver).
std::string current_device_text() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return "no current CUDA device";
  }
  return fmt::format("CUDA device {}", device);
}

std::string where(const char* file, int line) { return fmt::format("{}:{}", file, line); }

}  // namespace

void cuda_check(cudaError_t rc, std::string_view call, const char* file, int line) {
  if (rc == cudaSuccess) [[likely]]
    return;
  // Reset the per-thread last error so a later cudaGetLastError() does not
  // report this failure again (sticky errors such as a kernel fault stay).
  cudaGetLastError();
  const std::string msg = fmt::format("{} failed on {}: {} ({}, code {}) at {}", call,
                                      current_device_text(), cudaGetErrorString(rc),
                                      cudaGetErrorName(rc), static_cast<int>(rc),
                                      where(file, line));
  if (rc == cudaErrorMemoryAllocation) {
    throw DeviceOutOfMemoryError(
        msg + "; free cached blocks, reduce the micro-batch or the bucket sizes, or raise the "
              "ZeRO stage / offload tier");
  }
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
    throw DeviceError(msg + "; check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES)");
  }
  throw DeviceError(msg);
}

void cuda_check(ncclResult_t rc, std::string_view call, const char* file, int line) {
  if (rc == ncclSuccess) [[likely]]
    return;
  throw CommError(fmt::format(
      "{} failed on {}: {} (NCCL error {}) at {}; run with NCCL_DEBUG=WARN for NCCL's own "
      "explanation, and check that every rank issues the same collectives in the same order",
      call, current_device_text(), ncclGetErrorString(rc), static_cast<int>(rc),
      where(file, line)));
}

void cuda_check(cublasStatus_t rc, std::string_view call, const char* file, int line) {
  if (rc == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  throw DeviceError(fmt::format("{} failed on {}: {} (cuBLAS status {}) at {}", call,
                                current_device_text(), cublasGetStatusString(rc),
                                static_cast<int>(rc), where(file, line)));
}

}  // namespace zeroshard
