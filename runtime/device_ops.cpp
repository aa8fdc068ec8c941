// DeviceOps on host memory and kernels/cpu (runtime/device_ops.h), and the
// CUDA factory's answer in builds without CUDA.
#include "runtime/device_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "zs_config.h"

namespace zeroshard {

namespace {

// Elements converted to fp32 at a time for the mixed-precision update.
constexpr std::size_t kUpdateChunk = 16384;

class CpuOps final : public DeviceOps {
 public:
  ComputeDevice device() const override { return ComputeDevice::cpu; }

  DeviceArray allocate(std::size_t numel, DType dtype) override {
    auto mem = std::make_shared<AlignedBuffer<std::byte>>(numel * dtype_size(dtype));  // zeroed
    void* data = mem->data();
    return DeviceArray(std::move(mem), data, numel, dtype);
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  void move(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void download(void* host_dst, const void* src, std::size_t bytes) override { move(host_dst, src, bytes); }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { move(dst, host_src, bytes); }
  void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) override {
    kernels::cast(dst, dst_type, src, src_type, n, scale);
  }
  void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                       float scale) override {
    kernels::accumulate_cast(dst, dst_type, src, src_type, n, scale);
  }
  kernels::GradStats grad_stats(const void* data, DType type, std::size_t n) override {
    return kernels::grad_stats(data, type, n);
  }
  // fp32: on the weights in place. Mixed: gradients widened chunk by chunk,
  // the rounded compute copy written back (bitwise the fused mixed kernel).
  void update(const OptimizerHyper& hyper, float lr, float weight_decay, std::int64_t step, float grad_scale,
              const UpdateArrays& a, std::size_t n) override {
    if (a.copy == nullptr && a.grad_dtype == DType::f32) {
      optimizer_update(hyper, lr, weight_decay, step, grad_scale, a.weights, static_cast<const float*>(a.grads),
                       a.states.data(), n);
      return;
    }
    scratch_.resize(kUpdateChunk);
    std::vector<float*> st(a.states.size());
    const std::size_t ge = dtype_size(a.grad_dtype), ce = dtype_size(a.copy_dtype);
    for (std::size_t i = 0; i < n; i += kUpdateChunk) {
      const std::size_t m = std::min(kUpdateChunk, n - i);
      for (std::size_t k = 0; k < st.size(); ++k) st[k] = a.states[k] + i;
      kernels::cast(scratch_.data(), DType::f32, static_cast<const std::byte*>(a.grads) + i * ge, a.grad_dtype, m);
      optimizer_update(hyper, lr, weight_decay, step, grad_scale, a.weights + i, scratch_.data(), st.data(), m);
      if (a.copy != nullptr) kernels::cast(static_cast<std::byte*>(a.copy) + i * ce, a.copy_dtype, a.weights + i, DType::f32, m);
    }
  }

 private:
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<DeviceOps> make_cpu_ops() { return std::make_unique<CpuOps>(); }

#if !ZS_HAVE_CUDA
std::unique_ptr<DeviceOps> make_cuda_ops(Communicator&) {
  throw ConfigError(
      "an Engine on the cuda compute device needs a CUDA build of zeroshard; this one was built without "
      "CUDA (nvcc not found or -Dcuda=disabled)");
}
#endif

}  // namespace zeroshard
