// Owning CUDA stream and event types; see core/cuda_stream.h.
#include "core/cuda_stream.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "core/cuda_check.h"

namespace zeroshard {

CudaStream CudaStream::create(int priority) {
  cudaStream_t s = nullptr;
  ZS_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  return CudaStream(s);
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    CudaStream old(std::exchange(stream_, other.stream_));
    other.stream_ = nullptr;
  }
  return *this;
}

void CudaStream::synchronize() const { ZS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

CudaEvent CudaEvent::create(bool timing) {
  cudaEvent_t e = nullptr;
  ZS_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return CudaEvent(e);
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    CudaEvent old(std::exchange(event_, other.event_));
    other.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::record(CUstream_st* stream) { ZS_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::make_wait(CUstream_st* stream) const {
  ZS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

bool CudaEvent::query() const {
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) return false;
  cuda_check(rc, "cudaEventQuery", __FILE__, __LINE__);
  return true;
}

void CudaEvent::synchronize() const { ZS_CUDA_CHECK(cudaEventSynchronize(event_)); }

float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
  float ms = 0;
  ZS_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace zeroshard
