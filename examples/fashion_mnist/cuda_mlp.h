// The Fashion-MNIST MLP with its GEMMs on a GPU (cuBLAS), for
// `fashion_mnist --device cuda`. Only CUDA-enabled builds compile it
// ([Note: CUDA build] in the root meson.build); compute_device.h is the way
// in from code that must also build without CUDA.
//
// [Note: cuBLAS MLP]
// The model is the CPU Mlp's (mlp.h): CudaMlp takes an Mlp, uses its units
// and parameters, and replaces only forward_backward/evaluate, keeping the
// Engine calls in the same order (unshard, compute, reshard forward;
// unshard, gradients, reduce_gradients, reshard backward), so every ZeRO
// stage, offload tier and checkpoint works unchanged. The Engine stays on
// the host in this version: after a unit is unshard, its weight and bias are
// copied to device buffers (16-bit ones widened to fp32 there, as the CPU
// MLP widens them: [Note: MLP precision]); the forward keeps them for the
// backward of the same micro-batch (parameters change only in step()).
// Each layer's gradients are computed on the device in fp32, copied back to
// pinned host memory and added into engine.grad() with
// kernels::accumulate_cast (one rounding per element in 16-bit), before
// reduce_gradients. GEMMs: cublasSgemm with CUBLAS_DEFAULT_MATH (true fp32,
// no TF32); bias gradients: cublasSgemv against a vector of ones; bias +
// ReLU and ReLU's derivative: two small kernels (cuda_mlp_kernels.cu);
// softmax cross-entropy: on the host over the downloaded logits [n,
// classes] with the CPU MLP's softmax_cross_entropy_row (10 values a
// sample), so the loss is computed by the same code as on the CPU. Results
// match the CPU MLP to rounding, not bitwise: cuBLAS sums the GEMMs' inner
// products in another order than OpenBLAS (tests/cuda/test_cuda_mlp.cpp).
// One stream; the host waits for it once per forward (for the logits) and
// once per layer in backward (for the gradients, while the device already
// computes the next layer's dL/dh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/cuda_stream.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "examples/fashion_mnist/classifier.h"
#include "examples/fashion_mnist/mlp.h"
#include "runtime/engine/engine.h"

struct cublasContext;

namespace zeroshard::examples {

/// Picks this rank's GPU: device index = node_local_rank(comm) (one rank
/// per GPU), made current with cudaSetDevice. Collective: all ranks
/// all-reduce whether they succeeded before anyone throws. Returns e.g.
/// "cuda:0 (NVIDIA H200, 139.8 GiB)". Throws DeviceError when this or
/// another rank sees no CUDA device, or more ranks run on a node than it
/// has GPUs (the message says which rank and what to change); CommError if
/// the exchange fails.
std::string select_cuda_device(Communicator& comm);

/// The MLP of `mlp` computed with cuBLAS on the device current at
/// construction; see [Note: cuBLAS MLP]. Allocates every device and pinned
/// buffer once (about 4 bytes x (Psi + max_batch x (inputs + 2 x widest +
/// sum of layer widths)) of device memory); forward_backward and evaluate
/// allocate nothing. `mlp` (and its Engine, which must be finalized) must
/// outlive the CudaMlp. Thread safety: one thread, the one that drives the
/// Engine. Errors: DeviceError / DeviceOutOfMemoryError (core/cuda_check.h)
/// for CUDA and cuBLAS failures, including "no CUDA device".
class CudaMlp final : public Classifier {
 public:
  /// Allocates the buffers for mlp.max_batch() samples on the current device.
  explicit CudaMlp(Mlp& mlp);
  /// Waits for the stream, destroys the cuBLAS handle. Never throws.
  ~CudaMlp() override;
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  /// As Classifier::forward_backward (x [n, inputs] and labels [n] on the
  /// host), computed on the GPU; returns when the gradients are in the
  /// engine and every unit is reduced.
  double forward_backward(std::span<const float> x, std::span<const std::uint8_t> labels,
                          std::size_t n) override;
  /// As Classifier::evaluate, computed on the GPU.
  EvalCounts evaluate(std::span<const float> x, std::span<const std::uint8_t> labels,
                      std::size_t n) override;
  /// mlp.max_batch().
  std::size_t max_batch() const override { return mlp_.max_batch(); }
  /// mlp.layer_sizes().
  const std::vector<std::int64_t>& layer_sizes() const override { return mlp_.layer_sizes(); }
  /// mlp.num_parameters().
  std::size_t num_parameters() const override { return mlp_.num_parameters(); }
  /// The CUDA device index the buffers live on.
  int device() const { return device_; }

 private:
  /// cublasDestroy on a handle.
  struct CublasDeleter {
    void operator()(cublasContext* handle) const noexcept;
  };
  /// Checks the batch (Mlp::check_batch, `what` naming it), makes device_
  /// current, copies x [n, inputs] to the device.
  void begin_batch(const char* what, std::span<const float> x,
                   std::span<const std::uint8_t> labels, std::size_t n, std::size_t min_n);
  /// Copies layer l's weight and bias (unit unshard) to w_[l], b_[l] as fp32.
  void upload_params(int l);
  /// Forward through every layer (unshard/reshard even for n == 0); leaves
  /// the logits [n, classes] in acts_.back() and in logits_host_ (waits).
  void forward(std::size_t n);
  /// Enqueues layer l's fp32 gradients for dL/dz = delta [n, out] and input
  /// h_below [n, in] (both device arrays) and their copy to grad_w_host_ /
  /// grad_b_host_, then records grads_ready_.
  void enqueue_grads(int l, const float* delta, const float* h_below, std::size_t n);
  /// Waits for grads_ready_ and adds the copied gradients of layer l into
  /// the engine's gradient buffers (kernels::accumulate_cast).
  void add_grads_to_engine(int l);

  Mlp& mlp_;
  Engine& engine_;
  DType dtype_;  ///< the engine's compute dtype
  int device_ = 0;
  CudaStream stream_;
  std::unique_ptr<cublasContext, CublasDeleter> cublas_;
  std::vector<DeviceBuffer> w_;     ///< w_[l]: [out_l, in_l] fp32, from the last forward
  std::vector<DeviceBuffer> b_;     ///< b_[l]: [out_l] fp32
  std::vector<DeviceBuffer> acts_;  ///< acts_[l]: [max_batch, out_l], post-ReLU (logits last)
  DeviceBuffer x_;                  ///< [max_batch, inputs]
  DeviceBuffer delta_a_, delta_b_;  ///< [max_batch, widest]: dL/dz of this layer / the one below
  DeviceBuffer grad_w_;             ///< [largest weight] fp32 weight gradient of one layer
  DeviceBuffer grad_b_;             ///< [widest] fp32 bias gradient of one layer
  DeviceBuffer ones_;               ///< [max_batch] of 1.0f (bias gradient as a GEMV)
  DeviceBuffer staging_;            ///< [largest weight] 16-bit parameters before widening
  PinnedHostBuffer logits_host_;    ///< [max_batch, classes]
  PinnedHostBuffer dlogits_host_;   ///< [max_batch, classes]
  PinnedHostBuffer grad_w_host_;    ///< [largest weight]
  PinnedHostBuffer grad_b_host_;    ///< [widest]
  CudaEvent grads_ready_;           ///< recorded after a layer's gradient copy-back
};

}  // namespace zeroshard::examples
