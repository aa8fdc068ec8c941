#include "parallel/column_parallel_linear.h"

#include "core/error.h"
#include "parallel/check_size.h"
#include "parallel/gemm.h"
#include "parallel/linear_common.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kName = "ColumnParallelLinear";
}

ColumnParallelLinear::ColumnParallelLinear(Communicator& tp_group, std::size_t in_features,
                                           std::size_t out_features, bool bias,
                                           std::size_t granule)
    : tp_(tp_group), in_(in_features), out_(out_features), bias_(bias) {
  slice_ = linear_split(kName, in_, out_, out_, "out_features", granule, tp_.world_size(), tp_.rank());
}

void ColumnParallelLinear::forward(std::span<const float> x, std::size_t tokens,
                                   std::span<const float> weight, std::span<const float> bias,
                                   std::span<float> y) const {
  const std::size_t lo = slice_.size;
  check_size(kName, "forward x", x.size(), tokens * in_);
  check_size(kName, "forward weight", weight.size(), lo * in_);
  check_size(kName, "forward bias", bias.size(), bias_elements());
  check_size(kName, "forward y", y.size(), tokens * lo);
  sgemm(Trans::no, Trans::yes, tokens, lo, in_, 1.0f, x.data(), weight.data(), 0.0f, y.data());
  if (bias_) add_bias_rows(y.data(), bias.data(), tokens, lo);
}

void ColumnParallelLinear::backward(std::span<const float> x, std::span<const float> dy,
                                    std::size_t tokens, std::span<const float> weight,
                                    std::span<float> dx, std::span<float> dweight,
                                    std::span<float> dbias) const {
  const std::size_t lo = slice_.size;
  check_size(kName, "backward x", x.size(), tokens * in_);
  check_size(kName, "backward dy", dy.size(), tokens * lo);
  check_size(kName, "backward weight", weight.size(), lo * in_);
  if (!dx.empty()) check_size(kName, "backward dx", dx.size(), tokens * in_);
  check_size(kName, "backward dweight", dweight.size(), lo * in_);
  check_size(kName, "backward dbias", dbias.size(), bias_elements());
  // dW [lo, in] += dY^T [lo, tokens] X [tokens, in]
  sgemm(Trans::yes, Trans::no, lo, in_, tokens, 1.0f, dy.data(), x.data(), 1.0f, dweight.data());
  if (bias_) add_column_sums(dbias.data(), dy.data(), tokens, lo);
  if (dx.empty()) return;
  // This rank's part of dX [tokens, in] = dY [tokens, lo] W [lo, in]; the
  // full dX is the sum of the parts over the group (Megatron's f backward).
  sgemm(Trans::no, Trans::no, tokens, in_, lo, 1.0f, dy.data(), weight.data(), 0.0f, dx.data());
  tp_.all_reduce(dx.data(), dx.size(), DType::f32, ReduceOp::sum);
}

}  // namespace zeroshard::parallel
