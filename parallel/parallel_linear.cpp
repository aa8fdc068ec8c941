#include "parallel/parallel_linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/check_size.h"
#include "parallel/gemm.h"

namespace zeroshard::parallel {

ParallelLinear::ParallelLinear(const char* name, Communicator& tp_group, std::size_t in_features,
                               std::size_t out_features, bool bias, std::size_t granule,
                               Split split)
    : name_(name), tp_(tp_group), in_(in_features), out_(out_features), bias_(bias), split_(split) {
  if (in_ == 0 || out_ == 0) {
    throw ConfigError(fmt::format("{}: in_features={} and out_features={} must both be >= 1",
                                  name_, in_, out_));
  }
  const bool by_out = split_ == Split::out_features;
  const std::size_t features = by_out ? out_ : in_;
  if (granule == 0 || features % granule != 0) {
    throw ConfigError(fmt::format("{}: granule={} must be >= 1 and divide {}={}", name_, granule,
                                  by_out ? "out_features" : "in_features", features));
  }
  const Slice blocks = split_slice(features / granule, tp_.world_size(), tp_.rank());
  slice_ = Slice{blocks.begin * granule, blocks.size * granule};
  x_width_ = by_out ? in_ : slice_.size;
  y_width_ = by_out ? slice_.size : out_;
}

void ParallelLinear::forward(std::span<const float> x, std::size_t tokens,
                             std::span<const float> weight, std::span<const float> bias,
                             std::span<float> y) const {
  const std::size_t xw = x_width_, yw = y_width_;
  check_size(name_, "forward x", x.size(), tokens * xw);
  check_size(name_, "forward weight", weight.size(), yw * xw);
  check_size(name_, "forward bias", bias.size(), bias_elements());
  check_size(name_, "forward y", y.size(), tokens * yw);
  // y [tokens, yw] = x [tokens, xw] weight^T [xw, yw]; a rank with no
  // columns of a row-split layer contributes zeros (k = 0, beta = 0).
  sgemm(Trans::no, Trans::yes, tokens, yw, xw, 1.0f, x.data(), weight.data(), 0.0f, y.data());
  // Megatron's g: the row-split layer's partial products summed over the group.
  if (split_ == Split::in_features) tp_.all_reduce(y.data(), y.size(), DType::f32, ReduceOp::sum);
  if (!bias_) return;
  for (std::size_t t = 0; t < tokens; ++t) {
    float* row = y.data() + t * yw;
    for (std::size_t o = 0; o < yw; ++o) row[o] += bias[o];
  }
}

void ParallelLinear::backward(std::span<const float> x, std::span<const float> dy,
                              std::size_t tokens, std::span<const float> weight,
                              std::span<float> dx, std::span<float> dweight,
                              std::span<float> dbias) const {
  const std::size_t xw = x_width_, yw = y_width_;
  check_size(name_, "backward x", x.size(), tokens * xw);
  check_size(name_, "backward dy", dy.size(), tokens * yw);
  check_size(name_, "backward weight", weight.size(), yw * xw);
  if (!dx.empty()) check_size(name_, "backward dx", dx.size(), tokens * xw);
  check_size(name_, "backward dweight", dweight.size(), yw * xw);
  check_size(name_, "backward dbias", dbias.size(), bias_elements());
  // dweight [yw, xw] += dy^T [yw, tokens] x [tokens, xw]
  sgemm(Trans::yes, Trans::no, yw, xw, tokens, 1.0f, dy.data(), x.data(), 1.0f, dweight.data());
  if (bias_) {
    for (std::size_t t = 0; t < tokens; ++t) {
      const float* row = dy.data() + t * yw;
      for (std::size_t o = 0; o < yw; ++o) dbias[o] += row[o];
    }
  }
  if (dx.empty()) return;
  // dx [tokens, xw] = dy [tokens, yw] weight [yw, xw]
  sgemm(Trans::no, Trans::no, tokens, xw, yw, 1.0f, dy.data(), weight.data(), 0.0f, dx.data());
  // Megatron's f backward: the column-split layer's parts of dX summed.
  if (split_ == Split::out_features) tp_.all_reduce(dx.data(), dx.size(), DType::f32, ReduceOp::sum);
}

}  // namespace zeroshard::parallel
