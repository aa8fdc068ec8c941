// The one place where CUDA, NCCL and cuBLAS result codes become exceptions.
//
// Every CUDA runtime, NCCL and cuBLAS call in zeroshard is wrapped in
// ZS_CUDA_CHECK(call). The macro evaluates the call once and hands its
// result to the overload of cuda_check() for that result type, which throws
// when the result is not success:
//   cudaError_t     DeviceError (DeviceOutOfMemoryError for
//                   cudaErrorMemoryAllocation), with cudaGetErrorName/String
//   ncclResult_t    CommError, with ncclGetErrorString
//   cublasStatus_t  DeviceError, with cublasGetStatusString
// The message names the call as written, the file and line, and the
// device that was current. Only CUDA-enabled builds include this header.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string_view>

#include "core/error.h"

namespace zeroshard {

/// A CUDA runtime or cuBLAS call failed (bad argument, kernel fault, no
/// device). The message names the call, the error and the device.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// cudaMalloc (or cudaMallocHost) could not allocate; the message names the
/// request in bytes and the device's free/total memory where known.
class DeviceOutOfMemoryError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// Throws DeviceError (DeviceOutOfMemoryError for cudaErrorMemoryAllocation)
/// unless rc == cudaSuccess. `call` is the call's text, `file`/`line` where
/// it was made. Clears CUDA's sticky last-error state for non-sticky errors
/// (cudaGetLastError). Thread safety: safe from any thread.
void cuda_check(cudaError_t rc, std::string_view call, const char* file, int line);

/// Throws CommError unless rc == ncclSuccess (ncclInProgress is an error
/// here: zeroshard creates blocking communicators). Thread safety: any thread.
void cuda_check(ncclResult_t rc, std::string_view call, const char* file, int line);

/// Throws DeviceError unless rc == CUBLAS_STATUS_SUCCESS.
/// Thread safety: safe from any thread.
void cuda_check(cublasStatus_t rc, std::string_view call, const char* file, int line);

}  // namespace zeroshard

/// Evaluates `call` (a CUDA runtime, NCCL or cuBLAS call) once and throws the
/// matching zeroshard::Error subclass if it failed; see core/cuda_check.h.
#define ZS_CUDA_CHECK(call) ::zeroshard::cuda_check((call), #call, __FILE__, __LINE__)
