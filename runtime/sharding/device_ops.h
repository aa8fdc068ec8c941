// Where the engine keeps the arrays compute uses, and the element-wise
// operations on them: the one seam between the engine's logic and its
// memory space. Used by the engine (runtime/engine/engine_state.h) and its buffer
// pool (runtime/sharding/buffer_pool.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/cast.h"
#include "kernels/quant/symmetric_quant.h"
#include "offload/host_allocator.h"
#include "optimizer/optimizer.h"
#include "optimizer/range_update.h"
#include "runtime/config/config.h"

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
// the two (runtime/update/shard_optimizer.cpp, [Note: optimizer on the host for a
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
// the optimizer's staging (runtime/update/shard_optimizer.cpp); the Engine
// constructor uses it to check a GPU configuration.
// Each backend (cpu, the simulated device, cuda, and the step replay's
// size-only ops in runtime/plan/memory_replay.cpp) implements the fourteen
// virtual functions (twelve, and ZeRO++'s quantize and dequantize); the named copies and casts (move, download, upload,
// download_settled, download_async, upload_async, cast, accumulate_cast)
// are how callers spell them. The optimizer update is one entry for every
// state format (optimizer/range_update.h).

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

/// Where a DeviceOps::copy moves bytes.
enum class CopyKind : std::uint8_t {
  move,              ///< within the ops' memory; the ranges may overlap (memmove)
  download,          ///< to host memory; returns once the host holds them
  upload,            ///< from host memory; the host source may be reused on return
  /// download of memory that no enqueued operation writes any more (the
  /// output of a collective whose CommWork completed): the copy need not
  /// wait for the rest of the queue (cuda: a side stream), so the host does
  /// not stall behind the loop's queued kernels.
  download_settled,
};

/// Where a DeviceOps::copy_async moves bytes.
enum class AsyncCopy : std::uint8_t {
  download,  ///< to host memory
  upload,    ///< from host memory
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
  /// Copies `bytes` bytes from src to dst as `kind` says (the side that is
  /// host memory is named by the kind: download's dst, upload's src).
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) = 0;
  /// Enqueues a copy of `bytes` bytes between the ops' memory and host
  /// memory (page-locked memory lets it run in the background): a download's
  /// host dst holds them, and an upload's host src may change, only once a
  /// fence() taken afterwards is waited for.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, AsyncCopy kind) = 0;
  /// Marks the operations enqueued so far.
  virtual OpsFence fence() = 0;
  /// Returns once every operation enqueued before `f` was taken is done.
  virtual void wait(const OpsFence& f) = 0;
  /// kernels::cast (accumulate false: dst[i] = src[i] * scale converted) or
  /// kernels::accumulate_cast (true: dst[i] += src[i] * scale), from
  /// kernels/cpu/cast.h.
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale,
                       bool accumulate) = 0;
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
  /// One optimizer update (optimizer_update_range, optimizer/range_update.h)
  /// over u.n elements whose arrays are all in the ops' memory, in the state
  /// format u.states names. The cpu ops (and the simulated device's) run
  /// every format; the cuda ops run fp32 states of Adam, AdamW and SGD and
  /// throw InvariantError otherwise (Engine refuses those configurations
  /// without offload_optimizer, so their updates run on the host ops).
  virtual void update(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u) = 0;

  // The named forms of copy, copy_async and convert.

  /// copy(CopyKind::move): within the ops' memory, ranges may overlap.
  void move(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes, CopyKind::move); }
  /// copy(CopyKind::download): returns once host_dst holds the bytes.
  void download(void* host_dst, const void* src, std::size_t bytes) {
    copy(host_dst, src, bytes, CopyKind::download);
  }
  /// copy(CopyKind::upload): host_src may be reused on return.
  void upload(void* dst, const void* host_src, std::size_t bytes) { copy(dst, host_src, bytes, CopyKind::upload); }
  /// copy(CopyKind::download_settled).
  void download_settled(void* host_dst, const void* src, std::size_t bytes) {
    copy(host_dst, src, bytes, CopyKind::download_settled);
  }
  /// copy_async(AsyncCopy::download).
  void download_async(void* host_dst, const void* src, std::size_t bytes) {
    copy_async(host_dst, src, bytes, AsyncCopy::download);
  }
  /// copy_async(AsyncCopy::upload).
  void upload_async(void* dst, const void* host_src, std::size_t bytes) {
    copy_async(dst, host_src, bytes, AsyncCopy::upload);
  }
  /// convert(accumulate false): dst[i] = src[i] * scale converted.
  void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) {
    convert(dst, dst_type, src, src_type, n, scale, false);
  }
  /// convert(accumulate true): dst[i] += src[i] * scale.
  void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) {
    convert(dst, dst_type, src, src_type, n, scale, true);
  }
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
