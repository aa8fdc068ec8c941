// The libtorch example's model and data: a small CNN for Fashion-MNIST
// written with torch::nn layers, each a zeroshard::torch::Unit (so that
// ZeRO stage 3 gathers its parameters in its forward), and the dataset as
// tensors. Shared by examples/libtorch/main.cpp and bench/libtorch.
// Header-only.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include "examples/fashion_mnist/idx_dataset.h"
#include "libtorch/unit.h"

namespace zeroshard::examples {

/// images [B, 1, 28, 28] -> log-probabilities [B, 10]: conv 5x5 (16) ->
/// relu -> max-pool 2 -> conv 5x5 (32) -> relu -> max-pool 2 -> linear
/// 512 -> 128 -> relu -> linear 128 -> 10 -> log_softmax; 80,202
/// parameters in four units. Unsharded (no shard() call) each Unit is the
/// plain torch::nn layer.
struct FashionCnnImpl : ::torch::nn::Module {
  zeroshard::torch::Unit<::torch::nn::Conv2dImpl> conv1{nullptr}, conv2{nullptr};
  zeroshard::torch::Unit<::torch::nn::LinearImpl> fc1{nullptr}, fc2{nullptr};

  FashionCnnImpl() {
    conv1 =
        register_module("conv1", zeroshard::torch::Unit<::torch::nn::Conv2dImpl>(::torch::nn::Conv2dOptions(1, 16, 5)));
    conv2 = register_module("conv2",
                            zeroshard::torch::Unit<::torch::nn::Conv2dImpl>(::torch::nn::Conv2dOptions(16, 32, 5)));
    fc1 = register_module("fc1", zeroshard::torch::Unit<::torch::nn::LinearImpl>(512, 128));
    fc2 = register_module("fc2", zeroshard::torch::Unit<::torch::nn::LinearImpl>(128, 10));
  }

  at::Tensor forward(const at::Tensor& images) {
    namespace F = ::torch::nn::functional;
    at::Tensor x = F::max_pool2d(F::relu(conv1(images)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(F::relu(conv2(x)), F::MaxPool2dFuncOptions(2));
    x = F::relu(fc1(x.flatten(1)));
    return F::log_softmax(fc2(x), F::LogSoftmaxFuncOptions(1));
  }
};

/// A FashionCnn initialised from libtorch's generator seeded with `seed`.
inline std::shared_ptr<FashionCnnImpl> make_fashion_cnn(std::uint64_t seed) {
  ::torch::manual_seed(seed);
  return std::make_shared<FashionCnnImpl>();
}

/// A split as tensors: images [n, 1, 28, 28] float in [0, 1], labels [n] int64.
inline std::pair<at::Tensor, at::Tensor> fashion_tensors(const LabeledImages& split) {
  const auto n = static_cast<std::int64_t>(split.size());
  at::Tensor images = ::torch::from_blob(const_cast<float*>(split.images.pixels.data()),
                                         {n, 1, static_cast<std::int64_t>(split.images.rows),
                                          static_cast<std::int64_t>(split.images.cols)},
                                         ::torch::kFloat)
                          .clone();
  at::Tensor labels =
      ::torch::from_blob(const_cast<std::uint8_t*>(split.labels.data()), {n}, ::torch::kUInt8).to(::torch::kLong);
  return {images, labels};
}

}  // namespace zeroshard::examples
