// DeviceOps on host memory and kernels/cpu (runtime/sharding/device_ops.h), and the
// CUDA factory's answer in builds without CUDA.
#include "runtime/sharding/device_ops.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/sum_blocks.h"
#include "zs_config.h"

namespace zeroshard {

namespace {

class CpuOps : public DeviceOps {
 public:
  explicit CpuOps(std::shared_ptr<HostAllocator> allocator = nullptr) : allocator_(std::move(allocator)) {}
  ComputeDevice device() const override { return ComputeDevice::cpu; }
  bool host_addressable() const override { return true; }

  DeviceArray allocate(std::size_t numel, DType dtype) override {
    const std::size_t bytes = numel * dtype_size(dtype);
    if (allocator_ && bytes > 0) {
      const std::size_t rounded = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
      void* p = allocator_->allocate(rounded);
      std::memset(p, 0, rounded);
      std::shared_ptr<void> mem(p, [a = allocator_, rounded](void* q) { a->deallocate(q, rounded); });
      return DeviceArray(std::move(mem), p, numel, dtype);
    }
    auto mem = std::make_shared<AlignedBuffer<std::byte>>(bytes);  // zeroed
    void* data = mem->data();
    return DeviceArray(std::move(mem), data, numel, dtype);
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  // Host memory on both sides: every kind is a memmove, complete on return.
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, AsyncCopy kind) override {
    copy(dst, src, bytes, kind == AsyncCopy::download ? CopyKind::download : CopyKind::upload);
  }
  OpsFence fence() override { return {}; }
  void wait(const OpsFence&) override {}
  void convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale,
               bool accumulate) override {
    if (accumulate) {
      kernels::accumulate_cast(dst, dst_type, src, src_type, n, scale);
    } else {
      kernels::cast(dst, dst_type, src, src_type, n, scale);
    }
  }
  void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) override {
    kernels::sum_blocks(dst, src, blocks, n, dtype);
  }
  void quantize(const void* x, DType dtype, std::size_t n, kernels::SymQuantFormat f, float* residual,
                void* chunk) override {
    if (residual != nullptr) {
      kernels::quantize_symmetric_feedback(x, dtype, n, f, residual, chunk);
    } else {
      kernels::quantize_symmetric(x, dtype, n, f, chunk);
    }
  }
  void dequantize(const void* chunk, std::size_t n, kernels::SymQuantFormat f, void* y, DType dtype,
                  bool accumulate) override {
    if (accumulate) {
      ZS_CHECK(dtype == DType::f32, "dequantize: accumulates into f32 only, got {}", dtype_name(dtype));
      kernels::dequantize_accumulate(chunk, n, f, static_cast<float*>(y));
    } else {
      kernels::dequantize_symmetric(chunk, n, f, y, dtype);
    }
  }
  kernels::GradStats grad_stats(const void* data, DType type, std::size_t n) override {
    return kernels::grad_stats(data, type, n);
  }
  // One fused pass per run (optimizer_update_range): fp32 on the weights in
  // place; mixed precision widens the gradients and writes the rounded copy.
  void update(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u) override {
    optimizer_update_range(hyper, step, grad_scale, u);
  }

 private:
  std::shared_ptr<HostAllocator> allocator_;
};

// The allocations of a SimulatedDeviceOps, shared with the arrays' deleters.
struct Allocations {
  std::map<const std::byte*, std::size_t> ranges;  // begin -> bytes
};

class SimulatedDeviceOps final : public CpuOps {
 public:
  bool host_addressable() const override { return false; }

  // Asynchronous copies are queued and run at the next other operation or
  // wait(), as a stream would order them.
  void copy_async(void* dst, const void* src, std::size_t bytes, AsyncCopy kind) override {
    if (kind == AsyncCopy::download) {
      check_device(src, bytes, "download_async src");
      check_host(dst, bytes, "download_async host_dst");
    } else {
      check_device(dst, bytes, "upload_async dst");
      check_host(src, bytes, "upload_async host_src");
    }
    pending_.push_back({dst, src, bytes});
  }
  void wait(const OpsFence&) override { flush(); }

  DeviceArray allocate(std::size_t numel, DType dtype) override {
    const std::size_t bytes = numel * dtype_size(dtype);
    auto buf = std::make_unique<AlignedBuffer<std::byte>>(std::max<std::size_t>(bytes, 1));
    std::byte* data = buf->data();
    allocations_->ranges[data] = bytes;
    std::shared_ptr<void> mem(buf.release(), [reg = allocations_](void* p) {
      auto* b = static_cast<AlignedBuffer<std::byte>*>(p);
      reg->ranges.erase(b->data());
      delete b;
    });
    return DeviceArray(std::move(mem), data, numel, dtype);
  }
  void zero(void* p, std::size_t bytes) override {
    flush();
    check_device(p, bytes, "zero");
    CpuOps::zero(p, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override {
    flush();
    switch (kind) {
      case CopyKind::move:
        check_device(dst, bytes, "move dst");
        check_device(src, bytes, "move src");
        break;
      case CopyKind::download:
      case CopyKind::download_settled:
        check_device(src, bytes, "download src");
        check_host(dst, bytes, "download host_dst");
        break;
      case CopyKind::upload:
        check_device(dst, bytes, "upload dst");
        check_host(src, bytes, "upload host_src");
        break;
    }
    CpuOps::copy(dst, src, bytes, kind);
  }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale,
               bool accumulate) override {
    flush();
    check_device(dst, n * dtype_size(dst_type), accumulate ? "accumulate_cast dst" : "cast dst");
    check_device(src, n * dtype_size(src_type), accumulate ? "accumulate_cast src" : "cast src");
    CpuOps::convert(dst, dst_type, src, src_type, n, scale, accumulate);
  }
  void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) override {
    flush();
    check_device(dst, n * dtype_size(dtype), "sum_blocks dst");
    check_device(src, blocks * n * dtype_size(dtype), "sum_blocks src");
    CpuOps::sum_blocks(dst, src, blocks, n, dtype);
  }
  void quantize(const void* x, DType dtype, std::size_t n, kernels::SymQuantFormat f, float* residual,
                void* chunk) override {
    flush();
    check_device(x, n * dtype_size(dtype), "quantize x");
    if (residual != nullptr) check_device(residual, n * sizeof(float), "quantize residual");
    check_device(chunk, kernels::sym_quant_chunk_bytes(n, f), "quantize chunk");
    CpuOps::quantize(x, dtype, n, f, residual, chunk);
  }
  void dequantize(const void* chunk, std::size_t n, kernels::SymQuantFormat f, void* y, DType dtype,
                  bool accumulate) override {
    flush();
    check_device(chunk, kernels::sym_quant_chunk_bytes(n, f), "dequantize chunk");
    check_device(y, n * dtype_size(dtype), "dequantize y");
    CpuOps::dequantize(chunk, n, f, y, dtype, accumulate);
  }
  kernels::GradStats grad_stats(const void* data, DType type, std::size_t n) override {
    flush();
    check_device(data, n * dtype_size(type), "grad_stats");
    return CpuOps::grad_stats(data, type, n);
  }
  void update(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u) override {
    flush();
    const std::size_t n = u.n;
    check_device(u.weights, n * sizeof(float), "update weights");
    check_device(u.grads, n * dtype_size(u.grad_dtype), "update grads");
    if (u.copy != nullptr) check_device(u.copy, n * dtype_size(u.copy_dtype), "update copy");
    const UnitStates st{.dtype = u.states.dtype, .block = u.states.block,
                        .count = u.states.dtype == StateDtype::q8 ? static_cast<int>(u.states.arrays.size() / 2)
                                                                  : static_cast<int>(u.states.arrays.size()),
                        .packed = nullptr};
    if (st.dtype == StateDtype::q8) kernels::check_quant_block(st.block, "simulated device update");
    for (int k = 0; k < st.arrays(); ++k) {
      const std::size_t numel = st.array_numel(k, n, n);
      check_device(u.states.arrays[static_cast<std::size_t>(k)], numel * dtype_size(st.array_dtype(k)),
                   "update state");
    }
    CpuOps::update(hyper, step, grad_scale, u);
  }

 private:
  // The allocation that contains p, or ranges.end().
  auto containing(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    auto it = allocations_->ranges.upper_bound(b);
    if (it == allocations_->ranges.begin()) return allocations_->ranges.end();
    --it;
    return b < it->first + std::max<std::size_t>(it->second, 1) ? it : allocations_->ranges.end();
  }
  void check_device(const void* p, std::size_t bytes, const char* what) const {
    if (bytes == 0) return;
    auto it = containing(p);
    const auto* b = static_cast<const std::byte*>(p);
    ZS_CHECK(it != allocations_->ranges.end() && b + bytes <= it->first + it->second,
             "simulated device: {} ({} bytes at {}) is not device memory", what, bytes, p);
  }
  void check_host(const void* p, std::size_t bytes, const char* what) const {
    if (bytes == 0) return;
    const auto* b = static_cast<const std::byte*>(p);
    auto it = allocations_->ranges.lower_bound(b);
    const bool after = it != allocations_->ranges.end() && it->first < b + bytes;
    ZS_CHECK(!after && containing(p) == allocations_->ranges.end(),
             "simulated device: {} ({} bytes at {}) is device memory, not host memory", what, bytes, p);
  }

  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  void flush() {
    for (const Copy& c : pending_) {
      if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
    }
    pending_.clear();
  }

  std::shared_ptr<Allocations> allocations_ = std::make_shared<Allocations>();
  std::vector<Copy> pending_;
};

}  // namespace

std::unique_ptr<DeviceOps> make_cpu_ops(std::shared_ptr<HostAllocator> allocator) {
  return std::make_unique<CpuOps>(std::move(allocator));
}
std::unique_ptr<DeviceOps> make_simulated_device_ops() { return std::make_unique<SimulatedDeviceOps>(); }

#if !ZS_HAVE_CUDA
std::unique_ptr<DeviceOps> make_cuda_ops(Communicator&) {
  throw ConfigError(
      "an Engine on the cuda compute device needs a CUDA build of zeroshard; this one was built without "
      "CUDA (nvcc not found or -Dcuda=disabled)");
}
#endif

}  // namespace zeroshard
