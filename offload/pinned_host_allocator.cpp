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
// Page-locked blocks: PageableHostAllocator's 4 KiB-aligned (huge-page
// aligned from 2 MiB) memory, registered with cudaHostRegister. Not
// cudaHostAlloc: the CUDA runtime sub-allocates small pinned blocks, so
// their addresses need not be 4 KiB aligned, and O_DIRECT swap I/O into
// them fails (seen on an H100, CUDA 13.0). Thread safe (the CUDA runtime is).
class CudaPinnedHostAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = pageable_.allocate(bytes);
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
      cudaGetLastError();  // clear the error state
      pageable_.deallocate(p, bytes);
      throw std::bad_alloc();
    }
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    if (p == nullptr) return;
    cudaHostUnregister(p);
    pageable_.deallocate(p, bytes);
  }
  bool pinned() const noexcept override { return true; }
  std::string_view name() const noexcept override { return "cuda_pinned"; }

 private:
  PageableHostAllocator pageable_;
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
