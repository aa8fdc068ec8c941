// The cuBLAS MLP; see [Note: cuBLAS MLP] in cuda_mlp.h.
//
// Row-major arrays through column-major cuBLAS: a row-major M [r, c] is, to
// cuBLAS, the column-major M^T [c, r] with leading dimension c. So each
// row-major product C = op(A) op(B) below is issued as C^T = op(B)^T op(A)^T.
#include "examples/fashion_mnist/cuda_mlp.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/nccl/local_rank.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "examples/fashion_mnist/cuda_mlp_kernels.h"
#include "kernels/cpu/cast.h"
#include "kernels/cuda/convert.h"

namespace zeroshard::examples {
namespace {

/// A size as cuBLAS's int, checked.
int as_int(std::size_t v, const char* what) {
  ZS_CHECK(v <= std::size_t(INT_MAX), "{} = {} does not fit cuBLAS's int", what, v);
  return static_cast<int>(v);
}

/// Why this rank cannot use a GPU ("" when it can): no device, or fewer
/// devices than its node-local rank needs.
std::string cuda_device_problem(int rank, int local_rank, int* count) {
  *count = 0;
  const cudaError_t rc = cudaGetDeviceCount(count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    *count = 0;
    return fmt::format("no CUDA device visible (cudaGetDeviceCount: {}: {})", cudaGetErrorName(rc),
                       cudaGetErrorString(rc));
  }
  if (*count == 0) return "no CUDA device visible (cudaGetDeviceCount found 0)";
  if (local_rank >= *count) {
    return fmt::format(
        "rank {} is rank {} of its node, but the node has only {} visible CUDA device(s); "
        "--device cuda runs one rank per GPU: start at most {} ranks per node",
        rank, local_rank, *count, *count);
  }
  return {};
}

}  // namespace

std::string select_cuda_device(Communicator& comm) {
  const int local = node_local_rank(comm);
  int count = 0;
  std::string problem = cuda_device_problem(comm.rank(), local, &count);
  if (problem.empty()) {
    const cudaError_t rc = cudaSetDevice(local);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      problem = fmt::format("cudaSetDevice({}) failed: {}: {}", local, cudaGetErrorName(rc),
                            cudaGetErrorString(rc));
    }
  }
  // Every rank learns whether all got a GPU before any throws: a rank that
  // threw alone would leave the others waiting in their next collective.
  double ok = problem.empty() ? 1.0 : 0.0;
  comm.all_reduce(&ok, 1, DType::f64, ReduceOp::min);
  if (ok == 0.0) {
    throw DeviceError(problem.empty()
                          ? fmt::format("--device cuda: another rank could not use a GPU (see "
                                        "its message); rank {} had cuda:{}",
                                        comm.rank(), local)
                          : fmt::format("--device cuda: rank {}: {}", comm.rank(), problem));
  }
  cudaDeviceProp prop{};
  ZS_CUDA_CHECK(cudaGetDeviceProperties(&prop, local));
  return fmt::format("cuda:{} ({}, {:.1f} GiB)", local, prop.name,
                     double(prop.totalGlobalMem) / double(1ull << 30));
}

void CudaMlp::CublasDeleter::operator()(cublasContext* handle) const noexcept {
  cublasDestroy(handle);
}

CudaMlp::CudaMlp(Mlp& mlp) : mlp_(mlp), engine_(mlp.engine()), dtype_(engine_.compute_dtype()) {
  if (cuda_device_count() == 0) {
    throw DeviceError(
        "CudaMlp: no CUDA device visible (cudaGetDeviceCount found none); use --device cpu");
  }
  ZS_CUDA_CHECK(cudaGetDevice(&device_));
  stream_ = CudaStream::create();
  cublasHandle_t handle = nullptr;
  ZS_CUDA_CHECK(cublasCreate(&handle));
  cublas_.reset(handle);
  ZS_CUDA_CHECK(cublasSetStream(handle, stream_.get()));
  // True fp32 GEMMs (no TF32): the results must match the CPU MLP to rounding.
  ZS_CUDA_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));

  const auto& sizes = mlp_.layer_sizes();
  const std::size_t batch = mlp_.max_batch();
  const std::size_t widest = mlp_.widest(), largest_weight = mlp_.largest_weight();
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    w_.emplace_back(mlp_.layer_out(l) * mlp_.layer_in(l) * sizeof(float));
    b_.emplace_back(mlp_.layer_out(l) * sizeof(float));
    acts_.emplace_back(batch * mlp_.layer_out(l) * sizeof(float));
  }
  const std::size_t classes = std::size_t(sizes.back());
  x_ = DeviceBuffer(batch * std::size_t(sizes.front()) * sizeof(float));
  delta_a_ = DeviceBuffer(batch * widest * sizeof(float));
  delta_b_ = DeviceBuffer(batch * widest * sizeof(float));
  grad_w_ = DeviceBuffer(largest_weight * sizeof(float));
  grad_b_ = DeviceBuffer(widest * sizeof(float));
  ones_ = DeviceBuffer(batch * sizeof(float));
  if (dtype_ != DType::f32) staging_ = DeviceBuffer(largest_weight * dtype_size(dtype_));
  logits_host_ = PinnedHostBuffer(batch * classes * sizeof(float));
  dlogits_host_ = PinnedHostBuffer(batch * classes * sizeof(float));
  grad_w_host_ = PinnedHostBuffer(largest_weight * sizeof(float));
  grad_b_host_ = PinnedHostBuffer(widest * sizeof(float));
  const std::vector<float> ones(batch, 1.0f);
  ZS_CUDA_CHECK(cudaMemcpyAsync(ones_.data(), ones.data(), batch * sizeof(float),
                                cudaMemcpyHostToDevice, stream_.get()));
  grads_ready_ = CudaEvent::create();
  stream_.synchronize();
}

CudaMlp::~CudaMlp() {
  if (stream_.get() != nullptr) cudaStreamSynchronize(stream_.get());
}

void CudaMlp::begin_batch(const char* what, std::span<const float> x,
                          std::span<const std::uint8_t> labels, std::size_t n, std::size_t min_n) {
  mlp_.check_batch(what, x, labels, n, min_n);
  const std::size_t inputs = std::size_t(mlp_.layer_sizes().front());
  ZS_CUDA_CHECK(cudaSetDevice(device_));
  if (n > 0) {
    ZS_CUDA_CHECK(cudaMemcpyAsync(x_.data(), x.data(), n * inputs * sizeof(float),
                                  cudaMemcpyHostToDevice, stream_.get()));
  }
}

void CudaMlp::upload_params(int l) {
  const ParamId params[2] = {mlp_.weight(l), mlp_.bias(l)};
  DeviceBuffer* targets[2] = {&w_[std::size_t(l)], &b_[std::size_t(l)]};
  for (int k = 0; k < 2; ++k) {
    const std::size_t numel = engine_.layout().param(params[k]).numel;
    const void* host = engine_.param_data(params[k], dtype_);
    if (dtype_ == DType::f32) {
      // From pageable memory: returns once the source is staged, so the
      // engine may free it at reshard.
      ZS_CUDA_CHECK(cudaMemcpyAsync(targets[k]->data(), host, numel * sizeof(float),
                                    cudaMemcpyHostToDevice, stream_.get()));
    } else {
      ZS_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), host, numel * dtype_size(dtype_),
                                    cudaMemcpyHostToDevice, stream_.get()));
      kernels::gpu::convert(staging_.data(), dtype_, targets[k]->data(), DType::f32, numel,
                            stream_.get());
    }
  }
}

void CudaMlp::forward(std::size_t n) {
  const float one = 1.0f;
  const float zero = 0.0f;
  const float* h = x_.as<float>();
  mlp_.forward_units([&](int l) {
    const std::size_t in = mlp_.layer_in(l), out = mlp_.layer_out(l);
    if (n > 0) {
      upload_params(l);
      float* z = acts_[std::size_t(l)].as<float>();
      // z[n, out] = h[n, in] W[out, in]^T, i.e. z^T = W h^T column-major.
      ZS_CUDA_CHECK(cublasSgemm(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, as_int(out, "out"),
                                as_int(n, "n"), as_int(in, "in"), &one, w_[std::size_t(l)].as<float>(),
                                as_int(in, "in"), h, as_int(in, "in"), &zero, z,
                                as_int(out, "out")));
      ZS_CUDA_CHECK(cuda_detail::launch_add_bias_activate(
          z, b_[std::size_t(l)].as<float>(), n, out, /*relu=*/l + 1 < mlp_.num_layers(),
          stream_.get()));
    }
    h = acts_[std::size_t(l)].as<float>();
  });
  if (n > 0) {
    const std::size_t classes = std::size_t(mlp_.layer_sizes().back());
    ZS_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), acts_.back().data(),
                                  n * classes * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_.get()));
    stream_.synchronize();
  }
}

void CudaMlp::enqueue_grads(int l, const float* delta, const float* h_below, std::size_t n) {
  const std::size_t in = mlp_.layer_in(l), out = mlp_.layer_out(l);
  const float one = 1.0f;
  const float zero = 0.0f;
  // dW[out, in] = delta[n, out]^T h_below[n, in], i.e. dW^T = h_below^T delta.
  ZS_CUDA_CHECK(cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_T, as_int(in, "in"),
                            as_int(out, "out"), as_int(n, "n"), &one, h_below, as_int(in, "in"),
                            delta, as_int(out, "out"), &zero, grad_w_.as<float>(),
                            as_int(in, "in")));
  // db[out] = delta^T ones[n]: delta is column-major [out, n].
  ZS_CUDA_CHECK(cublasSgemv(cublas_.get(), CUBLAS_OP_N, as_int(out, "out"), as_int(n, "n"), &one,
                            delta, as_int(out, "out"), ones_.as<float>(), 1, &zero,
                            grad_b_.as<float>(), 1));
  ZS_CUDA_CHECK(cudaMemcpyAsync(grad_w_host_.data(), grad_w_.data(), out * in * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_.get()));
  ZS_CUDA_CHECK(cudaMemcpyAsync(grad_b_host_.data(), grad_b_.data(), out * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_.get()));
  grads_ready_.record(stream_.get());
}

void CudaMlp::add_grads_to_engine(int l) {
  const std::size_t in = mlp_.layer_in(l), out = mlp_.layer_out(l);
  grads_ready_.synchronize();
  kernels::accumulate_cast(engine_.grad_data(mlp_.weight(l), dtype_), dtype_,
                           grad_w_host_.data(), DType::f32, out * in);
  kernels::accumulate_cast(engine_.grad_data(mlp_.bias(l), dtype_), dtype_, grad_b_host_.data(),
                           DType::f32, out);
}

double CudaMlp::forward_backward(std::span<const float> x, std::span<const std::uint8_t> labels,
                                 std::size_t n) {
  begin_batch("micro-batch", x, labels, n, 1);
  forward(n);

  // dL/dlogits of the mean loss, times the loss scale, on the host (as the
  // CPU MLP computes it), then to the device.
  const std::size_t classes = std::size_t(mlp_.layer_sizes().back());
  const float grad_scale = static_cast<float>(engine_.loss_scale() / static_cast<double>(n));
  float* dlogits = dlogits_host_.as<float>();
  const double loss_sum = softmax_cross_entropy_sum(logits_host_.as<float>(), labels.data(), n,
                                                    classes, grad_scale, dlogits);
  float* delta = delta_a_.as<float>();
  float* delta_below = delta_b_.as<float>();
  ZS_CUDA_CHECK(cudaMemcpyAsync(delta, dlogits, n * classes * sizeof(float),
                                cudaMemcpyHostToDevice, stream_.get()));

  const float one = 1.0f;
  const float zero = 0.0f;
  mlp_.backward_units([&](int l) {
    const std::size_t in = mlp_.layer_in(l), out = mlp_.layer_out(l);
    const float* h_below = (l == 0) ? x_.as<float>() : acts_[std::size_t(l) - 1].as<float>();
    enqueue_grads(l, delta, h_below, n);
    if (l > 0) {
      // Enqueued after the gradients' copy-back, so that the device computes
      // it while the host adds them into the engine. dh[n, in] = delta[n,
      // out] W[out, in], i.e. dh^T = W^T delta^T; then zero where h_below <= 0.
      ZS_CUDA_CHECK(cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, as_int(in, "in"),
                                as_int(n, "n"), as_int(out, "out"), &one,
                                w_[std::size_t(l)].as<float>(), as_int(in, "in"), delta,
                                as_int(out, "out"), &zero, delta_below, as_int(in, "in")));
      ZS_CUDA_CHECK(
          cuda_detail::launch_relu_backward(delta_below, h_below, n * in, stream_.get()));
    }
    add_grads_to_engine(l);
    std::swap(delta, delta_below);
  });
  return loss_sum / static_cast<double>(n);
}

EvalCounts CudaMlp::evaluate(std::span<const float> x, std::span<const std::uint8_t> labels,
                             std::size_t n) {
  begin_batch("evaluation batch", x, labels, n, 0);
  forward(n);
  return count_predictions(logits_host_.as<float>(), labels.data(), n,
                           std::size_t(mlp_.layer_sizes().back()));
}

}  // namespace zeroshard::examples
