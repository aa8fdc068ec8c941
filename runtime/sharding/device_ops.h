// Where the engine keeps the arrays compute uses, and the element-wise
// operations on them: the one seam between the engine's logic and its
// memory space. Used by the engine (runtime/engine/engine_state.h) and its buffer
// pool (runtime/sharding/buffer_pool.h).
//
// [Note: compute device]
// An Engine runs on one compute device (runtime/engine/engine.h, ComputeDevice):
//   - cpu: arrays in host memory (4 KiB-aligned, pre-faulted), operations on
//     kernels/cpu (Highway, thread pool), collectives on a host communicator
//     (MPI or self);
//   - cuda: arrays in GPU memory (cudaMalloc, allocated once and cached),
//     operations on kernels/cuda, enqueued in order on the device
//     communicator's compute stream (NcclCommunicator::compute_stream()), so
//     every NCCL collective, which first waits for that stream, sees their
//     results; collectives of parameters and gradients on NCCL.
// Everything the engine decides (layout, buckets, order of collectives,
// loss scale, skips) is the same code on both; only DeviceOps differs.
// Arrays on the host and nvme offload tiers are in host memory whatever the
// device (ArrayStore::host_ops, runtime/sharding/array_store.h), so a GPU engine with offload copies between
// the two (runtime/engine/engine_optimizer.cpp, [Note: optimizer on the host for a
// GPU engine]). The cuda operations are bitwise the cpu ones (kernels/cuda:
// [Note: bitwise GPU kernels]) except the sum of squares of the gradient
// statistics, whose double summation order differs (kernels/cuda/
// grad_check.h), so a clipped step can differ in the last bits.
// One path per operation: the engine's logic touches arrays only through
// DeviceOps (the compute device's, or the ArrayStore's host_ops for host
// and nvme tiers), never through kernels/ directly; kernels/cpu is called
// directly only on host buffers the engine made itself (checkpoint and
// set_parameter conversions). host_addressable() is asked in three places,
// each deciding whether a copy between memory spaces is needed at all:
// ArrayStore::in_device_memory / host_copy (reads of device arrays),
// Unsharder::start (a host-tier shard uploaded before its all-gather) and
// the optimizer's staging (runtime/engine/engine_optimizer.cpp); the Engine
// constructor uses it to check a GPU configuration.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/cast.h"
#include "kernels/quant/symmetric_quant.h"
#include "offload/host_allocator.h"
#include "optimizer/optimizer.h"
#include "optimizer/update_8bit.h"
#include "optimizer/update_bf16.h"
#include "runtime/config/config.h"

namespace zeroshard {

class Communicator;

/// Owning array of `numel()` elements of `dtype()` in a DeviceOps' memory
/// space (host memory for cpu, device memory for cuda). Move-only; the
/// memory goes back when the last owner is destroyed. Thread safety: as a
/// plain pointer.
class DeviceArray {
 public:
  DeviceArray() = default;
  /// Wraps `data`, kept alive by `memory`.
  DeviceArray(std::shared_ptr<void> memory, void* data, std::size_t numel, DType dtype)
      : memory_(std::move(memory)), data_(data), numel_(numel), dtype_(dtype) {}
  DeviceArray(DeviceArray&& o) noexcept = default;
  DeviceArray& operator=(DeviceArray&& o) noexcept = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  /// Element 0 (nullptr when empty); a device pointer for cuda.
  void* data() const { return data_; }
  /// Address of element i.
  void* at(std::size_t i) const { return static_cast<std::byte*>(data_) + i * dtype_size(dtype_); }
  /// The pointer as T* (T must be the storage type of dtype(); not checked).
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  std::size_t bytes() const { return numel_ * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }

 private:
  std::shared_ptr<void> memory_;
  void* data_ = nullptr;
  std::size_t numel_ = 0;
  DType dtype_ = DType::f32;
};

/// The arrays of one optimizer update over n elements, all in the ops'
/// memory space: `weights` are the fp32 values the optimizer updates (the
/// parameters in fp32 training, the master weights in mixed precision),
/// `grads` n elements of grad_dtype, `states` optimizer_state_count arrays,
/// `copy` (mixed precision, else null) receives the updated weights rounded
/// to copy_dtype.
struct UpdateArrays {
  float* weights = nullptr;
  const void* grads = nullptr;
  DType grad_dtype = DType::f32;
  std::span<float* const> states;
  void* copy = nullptr;
  DType copy_dtype = DType::bf16;
};

/// A point in a DeviceOps' order of operations (DeviceOps::fence()); empty
/// for ops that complete every operation before returning.
struct OpsFence {
  std::shared_ptr<void> event;
};

/// Memory and element-wise operations of one compute device. Every pointer
/// argument addresses the ops' memory space unless its name says host.
/// Operations may run asynchronously in one order (the cuda stream); those
/// that return or fill host data complete first. Thread safety: one thread
/// (the engine's). Errors: std::bad_alloc / DeviceOutOfMemoryError on
/// allocation, DeviceError for CUDA failures, InvariantError for bad
/// arguments.
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual ComputeDevice device() const = 0;
  /// True when the ops' memory is the host's (the engine then reads and
  /// writes it directly); false for a separate memory space, which the
  /// engine reaches only through download / upload.
  virtual bool host_addressable() const = 0;
  /// A new array of numel elements of dtype, zeroed.
  virtual DeviceArray allocate(std::size_t numel, DType dtype) = 0;
  /// Sets `bytes` bytes at p to zero bits.
  virtual void zero(void* p, std::size_t bytes) = 0;
  /// Copies `bytes` bytes; the ranges may overlap (memmove).
  virtual void move(void* dst, const void* src, std::size_t bytes) = 0;
  /// Copies `bytes` bytes to host memory; returns once host_dst holds them.
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;
  /// Copies `bytes` bytes from host memory; host_src may be reused on return.
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  /// download() of memory that no enqueued operation writes any more (the
  /// output of a collective whose CommWork completed): the copy need not
  /// wait for the rest of the queue (cuda: a side stream), so the host does
  /// not stall behind the loop's queued kernels.
  virtual void download_settled(void* host_dst, const void* src, std::size_t bytes) = 0;
  /// Enqueues a copy of `bytes` bytes to host memory (page-locked memory
  /// lets it run in the background); host_dst holds them once a fence()
  /// taken afterwards is waited for.
  virtual void download_async(void* host_dst, const void* src, std::size_t bytes) = 0;
  /// Enqueues a copy from host memory; host_src must stay unchanged until a
  /// fence() taken afterwards is waited for.
  virtual void upload_async(void* dst, const void* host_src, std::size_t bytes) = 0;
  /// Marks the operations enqueued so far.
  virtual OpsFence fence() = 0;
  /// Returns once every operation enqueued before `f` was taken is done.
  virtual void wait(const OpsFence& f) = 0;
  /// kernels::cast: dst[i] = src[i] * scale converted (kernels/cpu/cast.h).
  virtual void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                    float scale) = 0;
  /// kernels::accumulate_cast: dst[i] += src[i] * scale (kernels/cpu/cast.h).
  virtual void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                               float scale) = 0;
  /// kernels::sum_blocks (kernels/cpu/sum_blocks.h): dst[i] = block 0 + ...
  /// + block (blocks-1) at element i, added left to right, block j being
  /// the n elements at src + j * n; dst is src itself or disjoint from it.
  /// The local sum of the rank-ordered reductions (comm/ordered_reduce.h).
  /// The cuda form runs it as a copy of block 0 and one accumulate_cast
  /// per further block (bitwise the same sums; f32, bf16, f16 only).
  virtual void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype) = 0;
  /// kernels::quantize_symmetric (kernels/quant/symmetric_quant.h): n
  /// elements of x (f32, bf16 or f16) into `chunk`
  /// (sym_quant_chunk_bytes(n, f) bytes, 4-byte aligned); with `residual`
  /// (n floats) quantize_symmetric_feedback. The cuda form runs
  /// kernels/cuda/symmetric_quant.h (bitwise the same chunks).
  virtual void quantize(const void* x, DType dtype, std::size_t n, kernels::SymQuantFormat f, float* residual,
                        void* chunk) = 0;
  /// kernels::dequantize_symmetric of the chunk's n elements into y
  /// (dtype), or with `accumulate` (dtype f32) dequantize_accumulate into y.
  virtual void dequantize(const void* chunk, std::size_t n, kernels::SymQuantFormat f, void* y, DType dtype,
                          bool accumulate) = 0;
  /// Sum of squares and Inf/NaN count of n elements (completes first). The
  /// cuda form reports a count of 1 for "some", not the number.
  virtual kernels::GradStats grad_stats(const void* data, DType type, std::size_t n) = 0;
  /// One optimizer update (optimizer/optimizer.h) over n elements of `a`.
  virtual void update(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step,
                      float grad_scale, const UpdateArrays& a, std::size_t n) = 0;
  /// One Adam / AdamW update with 8-bit states (optimizer_update_8bit,
  /// optimizer/update_8bit.h) over n elements starting at a block
  /// boundary: a.weights, a.grads, a.copy as update() (a.states unused),
  /// `state` the codes and absmax of the range, `runs` the parameter
  /// groups' parts. The cpu ops (and the simulated device's) run it; the
  /// cuda ops have no 8-bit kernel and throw InvariantError (a cuda engine
  /// with 8-bit states needs offload_optimizer: Engine refuses it
  /// otherwise, so its updates run on the host ops).
  virtual void update_8bit(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const UpdateArrays& a,
                           const kernels::Adam8bitState& state, std::size_t block, std::span<const UpdateRun> runs,
                           std::size_t n) = 0;
  /// One Adam / AdamW update with bf16 states (optimizer_update_bf16,
  /// optimizer/update_bf16.h) over n elements of one parameter group:
  /// a.weights, a.grads, a.copy as update() (a.states unused), exp_avg and
  /// exp_avg_sq n bf16 bit patterns each in the ops' memory, first_index
  /// the flat-buffer index of element 0 (the stochastic-rounding stream).
  /// The cpu ops (and the simulated device's) run it; the cuda ops throw
  /// InvariantError (a cuda engine with bf16 states needs
  /// offload_optimizer: Engine refuses it otherwise, so its updates run on
  /// the host ops).
  virtual void update_bf16(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step,
                           float grad_scale, const UpdateArrays& a, std::uint16_t* exp_avg,
                           std::uint16_t* exp_avg_sq, std::uint64_t first_index, std::size_t n) = 0;
};

/// Ops on host memory and kernels/cpu; arrays from `allocator` when given
/// (e.g. page-locked memory for offload_*.pin_memory), else pre-faulted
/// 4 KiB-aligned pageable memory. Never throws.
std::unique_ptr<DeviceOps> make_cpu_ops(std::shared_ptr<HostAllocator> allocator = nullptr);

/// Ops that compute with kernels/cpu on host memory but present it as a
/// separate memory space (device() cpu, host_addressable() false), and
/// check every call: a pointer argument must lie inside memory these ops
/// allocated, and a host_* argument outside it (InvariantError naming the
/// call otherwise). Like a stream, asynchronous copies complete only at
/// wait(): done at the next other operation (queue order), but a host
/// buffer read before wait() sees stale bytes, and one changed before
/// wait() is what gets uploaded, so a missing wait shows in the results.
/// Lets tests drive the engine's GPU data flow (staging, downloads,
/// uploads) on machines without a GPU. Collectives see plain host memory;
/// the device communicator must complete the queue (wait(fence())) before
/// each collective, as NCCL waits for the compute stream
/// (tests/runtime/engine/test_simulated_device.cpp does).
std::unique_ptr<DeviceOps> make_simulated_device_ops();

/// Ops on the current CUDA device for an engine whose collectives run on
/// `device_comm`, which must be an NcclCommunicator (its compute stream
/// orders the operations). Throws ConfigError in a build without CUDA or
/// when device_comm is not NCCL (naming its backend), DeviceError without a
/// usable device.
std::unique_ptr<DeviceOps> make_cuda_ops(Communicator& device_comm);

}  // namespace zeroshard
