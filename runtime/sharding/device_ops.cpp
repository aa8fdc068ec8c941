// DeviceOps on host memory and kernels/cpu (runtime/sharding/device_ops.h), and the
// CUDA factory's answer in builds without CUDA.
#include "runtime/sharding/device_ops.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
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
  void move(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void download(void* host_dst, const void* src, std::size_t bytes) override { move(host_dst, src, bytes); }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { move(dst, host_src, bytes); }
  void download_settled(void* host_dst, const void* src, std::size_t bytes) override { download(host_dst, src, bytes); }
  void download_async(void* host_dst, const void* src, std::size_t bytes) override { download(host_dst, src, bytes); }
  void upload_async(void* dst, const void* host_src, std::size_t bytes) override { upload(dst, host_src, bytes); }
  OpsFence fence() override { return {}; }
  void wait(const OpsFence&) override {}
  void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) override {
    kernels::cast(dst, dst_type, src, src_type, n, scale);
  }
  void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                       float scale) override {
    kernels::accumulate_cast(dst, dst_type, src, src_type, n, scale);
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
  // One fused pass (optimizer_update_mixed): fp32 on the weights in place;
  // mixed precision widens the gradients and writes the rounded copy.
  void update(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step, float grad_scale,
              const UpdateArrays& a, std::size_t n) override {
    optimizer_update_mixed(hyper, lr, weight_decay, step, grad_scale, a.weights, a.grads, a.grad_dtype,
                           a.states.data(), a.copy, a.copy_dtype, n);
  }
  void update_8bit(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const UpdateArrays& a,
                   const kernels::Adam8bitState& state, std::size_t block, std::span<const UpdateRun> runs,
                   std::size_t n) override {
    optimizer_update_8bit(hyper, step, grad_scale, a.weights, a.grads, a.grad_dtype, state, a.copy, a.copy_dtype, n,
                          block, runs);
  }
  void update_bf16(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step, float grad_scale,
                   const UpdateArrays& a, std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, std::uint64_t first_index,
                   std::size_t n) override {
    optimizer_update_bf16(hyper, lr, weight_decay, step, grad_scale, a.weights, a.grads, a.grad_dtype, exp_avg,
                          exp_avg_sq, a.copy, a.copy_dtype, n, first_index);
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
  void download_async(void* host_dst, const void* src, std::size_t bytes) override {
    check_device(src, bytes, "download_async src");
    check_host(host_dst, bytes, "download_async host_dst");
    pending_.push_back({host_dst, src, bytes});
  }
  void upload_async(void* dst, const void* host_src, std::size_t bytes) override {
    check_device(dst, bytes, "upload_async dst");
    check_host(host_src, bytes, "upload_async host_src");
    pending_.push_back({dst, host_src, bytes});
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
  void move(void* dst, const void* src, std::size_t bytes) override {
    flush();
    check_device(dst, bytes, "move dst");
    check_device(src, bytes, "move src");
    CpuOps::move(dst, src, bytes);
  }
  void download(void* host_dst, const void* src, std::size_t bytes) override {
    flush();
    check_device(src, bytes, "download src");
    check_host(host_dst, bytes, "download host_dst");
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
  }
  void upload(void* dst, const void* host_src, std::size_t bytes) override {
    flush();
    check_device(dst, bytes, "upload dst");
    check_host(host_src, bytes, "upload host_src");
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
  }
  void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) override {
    flush();
    check_device(dst, n * dtype_size(dst_type), "cast dst");
    check_device(src, n * dtype_size(src_type), "cast src");
    CpuOps::cast(dst, dst_type, src, src_type, n, scale);
  }
  void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                       float scale) override {
    flush();
    check_device(dst, n * dtype_size(dst_type), "accumulate_cast dst");
    check_device(src, n * dtype_size(src_type), "accumulate_cast src");
    CpuOps::accumulate_cast(dst, dst_type, src, src_type, n, scale);
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
  void update(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step, float grad_scale,
              const UpdateArrays& a, std::size_t n) override {
    flush();
    check_device(a.weights, n * sizeof(float), "update weights");
    check_device(a.grads, n * dtype_size(a.grad_dtype), "update grads");
    for (float* st : a.states) check_device(st, n * sizeof(float), "update state");
    if (a.copy != nullptr) check_device(a.copy, n * dtype_size(a.copy_dtype), "update copy");
    CpuOps::update(hyper, lr, weight_decay, step, grad_scale, a, n);
  }
  void update_8bit(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const UpdateArrays& a,
                   const kernels::Adam8bitState& state, std::size_t block, std::span<const UpdateRun> runs,
                   std::size_t n) override {
    flush();
    check_device(a.weights, n * sizeof(float), "update_8bit weights");
    check_device(a.grads, n * dtype_size(a.grad_dtype), "update_8bit grads");
    const std::size_t nb = kernels::quant_block_count(n, block) * sizeof(float);
    check_device(state.exp_avg_code, n, "update_8bit exp_avg codes");
    check_device(state.exp_avg_sq_code, n, "update_8bit exp_avg_sq codes");
    check_device(state.exp_avg_absmax, nb, "update_8bit exp_avg absmax");
    check_device(state.exp_avg_sq_absmax, nb, "update_8bit exp_avg_sq absmax");
    if (a.copy != nullptr) check_device(a.copy, n * dtype_size(a.copy_dtype), "update_8bit copy");
    CpuOps::update_8bit(hyper, step, grad_scale, a, state, block, runs, n);
  }
  void update_bf16(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step, float grad_scale,
                   const UpdateArrays& a, std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, std::uint64_t first_index,
                   std::size_t n) override {
    flush();
    check_device(a.weights, n * sizeof(float), "update_bf16 weights");
    check_device(a.grads, n * dtype_size(a.grad_dtype), "update_bf16 grads");
    check_device(exp_avg, n * sizeof(std::uint16_t), "update_bf16 exp_avg");
    check_device(exp_avg_sq, n * sizeof(std::uint16_t), "update_bf16 exp_avg_sq");
    if (a.copy != nullptr) check_device(a.copy, n * dtype_size(a.copy_dtype), "update_bf16 copy");
    CpuOps::update_bf16(hyper, lr, weight_decay, step, grad_scale, a, exp_avg, exp_avg_sq, first_index, n);
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
