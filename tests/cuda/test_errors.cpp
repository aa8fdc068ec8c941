// Error reporting of the CUDA backend that needs no GPU: ZS_CUDA_CHECK's
// exception types and messages for CUDA, NCCL and cuBLAS results, and the
// argument checks the kernel launchers make before touching the device.
// This program runs (and passes) on machines without a GPU.
#include <string>

#include <doctest/doctest.h>

#include "core/cuda_check.h"
#include "core/cuda_stream.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/grad_check.h"
#include "kernels/cuda/optimizers/adam.h"
#include "kernels/cuda/optimizers/sgd.h"
#include "tests/support/thrown.h"

using namespace zeroshard;

namespace {

// The message of the Exception that f throws (a test failure when none is).
template <class Exception, class F>
std::string message_of(F&& f) {
  return testing::required_error_message<Exception>(f, "no exception thrown");
}

}  // namespace

TEST_CASE("ZS_CUDA_CHECK maps each library's failure to a zeroshard error") {
  CHECK_NOTHROW(ZS_CUDA_CHECK(cudaSuccess));
  CHECK_NOTHROW(ZS_CUDA_CHECK(ncclSuccess));
  CHECK_NOTHROW(ZS_CUDA_CHECK(CUBLAS_STATUS_SUCCESS));

  const std::string cuda = message_of<DeviceError>([] { ZS_CUDA_CHECK(cudaErrorInvalidValue); });
  CHECK(cuda.find("cudaErrorInvalidValue") != std::string::npos);
  CHECK(cuda.find("test_errors.cpp") != std::string::npos);

  const std::string oom =
      message_of<DeviceOutOfMemoryError>([] { ZS_CUDA_CHECK(cudaErrorMemoryAllocation); });
  CHECK(oom.find("cudaErrorMemoryAllocation") != std::string::npos);

  const std::string nccl = message_of<CommError>([] { ZS_CUDA_CHECK(ncclInvalidArgument); });
  CHECK(nccl.find("ncclInvalidArgument") != std::string::npos);
  CHECK(nccl.find("NCCL") != std::string::npos);

  const std::string cublas =
      message_of<DeviceError>([] { ZS_CUDA_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); });
  CHECK(cublas.find("CUBLAS_STATUS_NOT_INITIALIZED") != std::string::npos);
}

TEST_CASE("kernel launchers reject bad arguments before touching the device") {
  kernels::gpu::AdamTensor adam;
  adam.n = 3;
  CHECK_THROWS_AS(kernels::gpu::adam_update(adam, {}, DType::f64, DType::bf16, nullptr),
                  InvariantError);
  CHECK_THROWS_AS(kernels::gpu::adam_update(adam, {}, DType::f32, DType::bf16, nullptr),
                  InvariantError);
  kernels::gpu::SgdTensor sgd;
  sgd.n = 3;
  CHECK_THROWS_AS(kernels::gpu::sgd_update(sgd, {}, DType::f32, DType::bf16, nullptr),
                  InvariantError);
  float dummy = 0;
  CHECK_THROWS_AS(kernels::gpu::convert(&dummy, DType::f64, &dummy, DType::f32, 1, nullptr),
                  InvariantError);
  CHECK_THROWS_AS(kernels::gpu::convert(nullptr, DType::f32, &dummy, DType::f16, 1, nullptr),
                  InvariantError);
  CHECK_THROWS_AS(kernels::gpu::check_gradients(&dummy, DType::f64, 1, 1.0f, nullptr, nullptr,
                                                nullptr),
                  InvariantError);
  CHECK_THROWS_AS(kernels::gpu::unscale_and_check(&dummy, 1, 1.0f, nullptr, nullptr, nullptr),
                  InvariantError);
  CHECK(kernels::gpu::grad_check_workspace_bytes() > 0);
}

TEST_CASE("cuda_device_count never throws") {
  CHECK(cuda_device_count() >= 0);
}
