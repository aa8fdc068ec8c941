// DeviceOps on a CUDA device (runtime/sharding/device_ops.h, [Note: compute device]):
// arrays in device memory, operations from kernels/cuda enqueued on the
// NcclCommunicator's compute stream. Compiled in CUDA builds only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "core/cuda_check.h"
#include "core/cuda_stream.h"
#include "core/device_buffer.h"
#include "core/error.h"
#include "kernels/cuda/optimizers/adam.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/symmetric_quant.h"
#include "kernels/cuda/grad_check.h"
#include "kernels/cuda/optimizers/sgd.h"
#include "runtime/sharding/device_ops.h"

namespace zeroshard {

namespace {

class CudaOps final : public DeviceOps {
 public:
  explicit CudaOps(NcclCommunicator& comm)
      : comm_(comm),
        side_(CudaStream::create()),
        workspace_(kernels::gpu::grad_check_workspace_bytes()),
        result_(sizeof(kernels::GradCheck)) {}

  ComputeDevice device() const override { return ComputeDevice::cuda; }
  bool host_addressable() const override { return false; }

  DeviceArray allocate(std::size_t numel, DType dtype) override {
    auto mem = std::make_shared<DeviceBuffer>(numel * dtype_size(dtype));
    zero(mem->data(), mem->bytes());
    void* data = mem->data();
    return DeviceArray(std::move(mem), data, numel, dtype);
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes > 0) ZS_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
  }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override {
    if (bytes == 0) return;
    switch (kind) {
      case CopyKind::move: return move_on_device(dst, src, bytes);
      case CopyKind::download:
        ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
        ZS_CUDA_CHECK(cudaStreamSynchronize(stream()));
        return;
      case CopyKind::upload:
        ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
        ZS_CUDA_CHECK(cudaStreamSynchronize(stream()));
        return;
      case CopyKind::download_settled:
        ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, side_.get()));
        side_.synchronize();
        return;
    }
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, AsyncCopy kind) override {
    if (bytes == 0) return;
    ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                  kind == AsyncCopy::download ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                  stream()));
  }
  OpsFence fence() override {
    auto event = std::make_shared<CudaEvent>(CudaEvent::create());
    event->record(stream());
    return OpsFence{std::move(event)};
  }
  void wait(const OpsFence& f) override {
    if (f.event) static_cast<CudaEvent*>(f.event.get())->synchronize();
  }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale,
               bool accumulate) override {
    if (accumulate) {
      kernels::gpu::accumulate_scaled(src, src_type, dst, dst_type, n, scale, stream());
      return;
    }
    if (n == 0) return;
    if (src == dst && src_type == dst_type) {
      if (scale != 1.0f) kernels::gpu::convert_scaled(copy_to_scratch(src, n * dtype_size(src_type)), src_type, dst, dst_type, n, scale, stream());
      return;
    }
    kernels::gpu::convert_scaled(src, src_type, dst, dst_type, n, scale, stream());
  }
  // Block 0, then each further block added in order: accumulate_cast with
  // scale 1 is round(dst + src) once per element, the same left-to-right
  // sums as kernels::sum_blocks (f32, bf16, f16).
  void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) override {
    ZS_CHECK(blocks > 0, "sum_blocks: needs at least one block (n = {} elements)", n);
    if (n == 0) return;
    const std::size_t bytes = n * dtype_size(dtype);
    if (dst != src) move(dst, src, bytes);
    for (std::size_t j = 1; j < blocks; ++j) {
      accumulate_cast(dst, dtype, static_cast<const std::byte*>(src) + j * bytes, dtype, n, 1.0f);
    }
  }
  void quantize(const void* x, DType dtype, std::size_t n, kernels::SymQuantFormat f, float* residual,
                void* chunk) override {
    if (residual != nullptr) {
      kernels::gpu::quantize_symmetric_feedback(x, dtype, n, f, residual, chunk, stream());
    } else {
      kernels::gpu::quantize_symmetric(x, dtype, n, f, chunk, stream());
    }
  }
  void dequantize(const void* chunk, std::size_t n, kernels::SymQuantFormat f, void* y, DType dtype,
                  bool accumulate) override {
    if (accumulate) {
      ZS_CHECK(dtype == DType::f32, "dequantize: accumulates into f32 only, got {}", dtype_name(dtype));
      kernels::gpu::dequantize_accumulate(chunk, n, f, static_cast<float*>(y), stream());
    } else {
      kernels::gpu::dequantize_symmetric(chunk, n, f, y, dtype, stream());
    }
  }
  kernels::GradStats grad_stats(const void* data, DType type, std::size_t n) override {
    kernels::gpu::check_gradients(data, type, n, 1.0f, result_.as<kernels::GradCheck>(), workspace_.data(),
                                  stream());
    kernels::GradCheck r;
    download(&r, result_.data(), sizeof(r));
    return kernels::GradStats{.sum_of_squares = r.sum_of_squares, .nonfinite = r.found_inf_or_nan ? 1u : 0u};
  }
  // fp32 states run by run, each with its group's scalars. Lion and Adagrad
  // are refused on a cuda engine without offload_optimizer (Engine's
  // check_cuda_optimizer), and so are 8-bit and bf16 states (kernels/cuda
  // has their kernels, the engine does not call them): offloaded updates
  // run on the host ops, so the throws below are never reached.
  void update(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u) override {
    if (u.states.dtype == StateDtype::q8) {
      throw InvariantError(fmt::format("cuda update: {} has no CUDA kernel for 8-bit states in this build (use "
                                       "offload_optimizer)", optimizer_type_name(hyper)));
    }
    if (u.states.dtype == StateDtype::bf16) {
      throw InvariantError(fmt::format("cuda update: {} with bf16 optimizer states has no CUDA path in this build "
                                       "(use offload_optimizer)", optimizer_type_name(hyper)));
    }
    const bool sgd = hyper.kind == OptimizerKind::sgd;
    ZS_CHECK(sgd || hyper.kind == OptimizerKind::adam || hyper.kind == OptimizerKind::adamw,
             "cuda update: no kernel for optimizer {}", optimizer_name(hyper.kind));
    ZS_CHECK(sgd || u.states.arrays.size() == 2, "Adam update with {} state arrays", u.states.arrays.size());
    const std::size_t ge = dtype_size(u.grad_dtype), ce = dtype_size(u.copy_dtype);
    auto state = [&](std::size_t k, std::size_t at) { return static_cast<float*>(u.states.arrays[k]) + at; };
    for (const UpdateRun& r : u.runs) {
      const std::size_t n = r.end - r.begin;
      if (n == 0) continue;
      float* param = u.weights + r.begin;
      const void* grad = static_cast<const std::byte*>(u.grads) + r.begin * ge;
      void* copy = u.copy != nullptr ? static_cast<std::byte*>(u.copy) + r.begin * ce : nullptr;
      if (sgd) {
        const kernels::gpu::SgdTensor t{.param = param, .grad = grad,
                                        .momentum_buffer = u.states.arrays.empty() ? nullptr : state(0, r.begin),
                                        .param_copy = copy, .n = n};
        kernels::gpu::sgd_update(t, sgd_scalars(hyper, r.lr, r.weight_decay, step, grad_scale), u.grad_dtype,
                                 u.copy_dtype, stream());
      } else {
        const kernels::gpu::AdamTensor t{.param = param, .grad = grad, .exp_avg = state(0, r.begin),
                                         .exp_avg_sq = state(1, r.begin), .param_copy = copy, .n = n};
        kernels::gpu::adam_update(t, adam_scalars(hyper, r.lr, r.weight_decay, step, grad_scale), u.grad_dtype,
                                  u.copy_dtype, stream());
      }
    }
  }

 private:
  CUstream_st* stream() const { return comm_.compute_stream(); }
  // A copy inside device memory; overlapping ranges (cudaMemcpy's are
  // undefined) go through the scratch buffer.
  void move_on_device(void* dst, const void* src, std::size_t bytes) {
    if (dst == src) return;
    const auto* d = static_cast<const std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    if (d + bytes <= s || s + bytes <= d) {
      ZS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
      return;
    }
    ZS_CUDA_CHECK(cudaMemcpyAsync(dst, copy_to_scratch(src, bytes), bytes, cudaMemcpyDeviceToDevice, stream()));
  }
  // Enqueues a copy of `bytes` bytes at src into the scratch buffer and
  // returns it: the source of an overlapping move or an in-place cast (the
  // kernels take non-overlapping arrays).
  const void* copy_to_scratch(const void* src, std::size_t bytes) {
    if (scratch_.bytes() < bytes) scratch_ = DeviceBuffer(bytes);
    ZS_CUDA_CHECK(cudaMemcpyAsync(scratch_.data(), src, bytes, cudaMemcpyDeviceToDevice, stream()));
    return scratch_.data();
  }

  NcclCommunicator& comm_;
  CudaStream side_;         ///< CopyKind::download_settled's copies
  DeviceBuffer workspace_;  ///< grad_check's
  DeviceBuffer result_;     ///< one GradCheck
  DeviceBuffer scratch_;    ///< overlapping moves and in-place casts; grows, never shrinks
};

}  // namespace

std::unique_ptr<DeviceOps> make_cuda_ops(Communicator& device_comm) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&device_comm);
  if (nccl == nullptr) {
    throw ConfigError(fmt::format(
        "an Engine on the cuda compute device needs an NcclCommunicator (comm/nccl) for its device buffers; "
        "got a \"{}\" communicator",
        device_comm.backend()));
  }
  ZS_CUDA_CHECK(cudaSetDevice(nccl->device()));
  return std::make_unique<CudaOps>(*nccl);
}

}  // namespace zeroshard
