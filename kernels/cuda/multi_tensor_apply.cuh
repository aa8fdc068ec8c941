// multi_tensor_apply: one kernel launch over many tensors, after apex's
// csrc/multi_tensor_apply.cuh. Internal to kernels/cuda (.cu files only).
//
// The host walks a list of tensors, each given as D device pointers of equal
// length n (param, grad, exp_avg, ...), cuts every tensor into chunks of
// kChunkElems elements, and packs (tensor, chunk) pairs into a
// TensorListMeta passed by value as the kernel argument: block b of the
// launch handles chunk block_chunk[b] of tensor block_tensor[b]. When the
// metadata is full (kMaxTensors tensors or kMaxBlocks chunks) it launches
// and starts over; a tensor cut off mid-way continues in the next launch.
// The metadata stays under 12 KiB; CUDA 12.1+ allows 32 KiB of kernel
// arguments on sm_70 and newer, and zeroshard targets sm_80+.
//
// Inside a block, each thread handles kIlp elements per step, loading all
// of them before computing and storing any (the pointers may alias as far
// as the compiler knows, so this is what gives memory-level parallelism).
// An Op supplies: `struct Regs`, and __device__ load(ptrs, i, regs),
// compute(regs), store(ptrs, i, regs).
//
// Like every .cu file here, it reports errors as cudaError_t values: .cu
// files include no zeroshard header that uses fmt (fmt 9 does not compile
// under nvcc in C++20 mode); the .cpp wrappers turn them into exceptions.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>


namespace zeroshard::kernels::gpu {

inline constexpr int kChunkElems = 65536;  ///< elements per (tensor, chunk) block
inline constexpr int kBlockThreads = 512;
inline constexpr int kIlp = 4;

/// Kernel argument of one multi-tensor launch over D-pointer tensors.
template <int D>
struct TensorListMeta {
  static constexpr int kMaxTensors = 64;
  static constexpr int kMaxBlocks = 1024;
  void* addr[D][kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::uint8_t block_tensor[kMaxBlocks];
  std::int32_t block_chunk[kMaxBlocks];
};

template <int D, class Op>
__global__ void __launch_bounds__(kBlockThreads)
    multi_tensor_kernel(TensorListMeta<D> meta, Op op) {
  const int t = meta.block_tensor[blockIdx.x];
  const std::int64_t start = static_cast<std::int64_t>(meta.block_chunk[blockIdx.x]) * kChunkElems;
  const std::int64_t end = min(start + static_cast<std::int64_t>(kChunkElems), meta.n[t]);
  void* ptrs[D];
#pragma unroll
  for (int d = 0; d < D; ++d) ptrs[d] = meta.addr[d][t];
  for (std::int64_t base = start + threadIdx.x; base < end;
       base += static_cast<std::int64_t>(kBlockThreads) * kIlp) {
    typename Op::Regs r[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::int64_t i = base + static_cast<std::int64_t>(k) * kBlockThreads;
      if (i < end) op.load(ptrs, i, r[k]);
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const std::int64_t i = base + static_cast<std::int64_t>(k) * kBlockThreads;
      if (i < end) {
        op.compute(r[k]);
        op.store(ptrs, i, r[k]);
      }
    }
  }
}

/// One tensor of a multi-tensor launch: D device pointers of n elements.
template <int D>
struct TensorPtrs {
  std::array<void*, D> ptr{};
  std::size_t n = 0;
};

/// Applies `op` to every element of every tensor, in as few launches of
/// multi_tensor_kernel as the metadata allows, on `stream`. Tensors with
/// n == 0 are skipped. Returns the first launch error (cudaSuccess if none;
/// later launches are not attempted after a failure).
template <int D, class Op>
cudaError_t multi_tensor_apply(std::span<const TensorPtrs<D>> tensors, const Op& op,
                               cudaStream_t stream) {
  using Meta = TensorListMeta<D>;
  Meta meta{};
  int nt = 0;  // tensors filled in meta
  int nb = 0;  // blocks filled in meta
  auto launch = [&] {
    multi_tensor_kernel<D, Op><<<nb, kBlockThreads, 0, stream>>>(meta, op);
    nb = 0;
    return cudaGetLastError();
  };
  for (const TensorPtrs<D>& t : tensors) {
    if (t.n == 0) continue;
    const std::size_t chunks = (t.n + kChunkElems - 1) / kChunkElems;
    for (int d = 0; d < D; ++d) meta.addr[d][nt] = t.ptr[d];
    meta.n[nt] = static_cast<std::int64_t>(t.n);
    for (std::size_t c = 0; c < chunks; ++c) {
      meta.block_tensor[nb] = static_cast<std::uint8_t>(nt);
      meta.block_chunk[nb] = static_cast<std::int32_t>(c);
      ++nb;
      const bool last_chunk = c + 1 == chunks;
      if (nb == Meta::kMaxBlocks || (last_chunk && nt + 1 == Meta::kMaxTensors)) {
        if (const cudaError_t rc = launch(); rc != cudaSuccess) return rc;
        if (last_chunk) {
          nt = -1;  // the tensor is done; the next one starts at slot 0
        } else {
          // The tensor continues in the next launch, moved to slot 0.
          for (int d = 0; d < D; ++d) meta.addr[d][0] = t.ptr[d];
          meta.n[0] = static_cast<std::int64_t>(t.n);
          nt = 0;
        }
      }
    }
    ++nt;
  }
  return nb > 0 ? launch() : cudaSuccess;
}

/// Grid size for an element-wise kernel over n elements with `threads`
/// threads per block and a grid-stride loop: enough blocks to cover n,
/// capped at 65535 x 16 (far above what fills any GPU).
inline unsigned elementwise_blocks(std::size_t n, int threads) {
  const std::size_t want = (n + static_cast<std::size_t>(threads) - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::size_t>(want, 1, 65535u * 16u));
}

}  // namespace zeroshard::kernels::gpu
