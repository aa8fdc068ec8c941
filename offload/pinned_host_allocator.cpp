#include "offload/pinned_host_allocator.h"

#include <new>

#include <fmt/format.h>

#include "core/error.h"
#include "zs_config.h"

#if ZS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace zeroshard {

namespace {

#if ZS_HAVE_CUDA
// cudaHostAlloc'ed blocks: resident from allocation (page-locked), so no
// pre-faulting pass is needed. Thread safe (the CUDA runtime is).
class CudaPinnedHostAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess || p == nullptr) {
      cudaGetLastError();  // clear the sticky-free error state
      throw std::bad_alloc();
    }
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { cudaFreeHost(p); }
  bool pinned() const noexcept override { return true; }
  std::string_view name() const noexcept override { return "cuda_pinned"; }
};
#endif

}  // namespace

std::shared_ptr<HostAllocator> make_host_allocator(bool pinned, const char* config_key) {
  if (!pinned) return std::make_shared<PageableHostAllocator>();
#if ZS_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw ConfigError(fmt::format("\"{}\" = true needs a CUDA device for page-locked memory; none is visible "
                                  "(set it to false)",
                                  config_key));
  }
  return std::make_shared<CudaPinnedHostAllocator>();
#else
  throw ConfigError(fmt::format(
      "\"{}\" = true needs page-locked memory from CUDA; this build has no CUDA (set it to false)", config_key));
#endif
}

}  // namespace zeroshard
