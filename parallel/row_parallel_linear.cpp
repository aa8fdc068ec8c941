#include "parallel/row_parallel_linear.h"

#include "core/error.h"
#include "parallel/check_size.h"
#include "parallel/gemm.h"
#include "parallel/linear_common.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kName = "RowParallelLinear";
}

RowParallelLinear::RowParallelLinear(Communicator& tp_group, std::size_t in_features,
                                     std::size_t out_features, bool bias,
                                     std::size_t granule)
    : tp_(tp_group), in_(in_features), out_(out_features), bias_(bias) {
  slice_ = linear_split(kName, in_, out_, in_, "in_features", granule, tp_.world_size(), tp_.rank());
}

void RowParallelLinear::forward(std::span<const float> x, std::size_t tokens,
                                std::span<const float> weight, std::span<const float> bias,
                                std::span<float> y) const {
  const std::size_t li = slice_.size;
  check_size(kName, "forward x", x.size(), tokens * li);
  check_size(kName, "forward weight", weight.size(), out_ * li);
  check_size(kName, "forward bias", bias.size(), bias_elements());
  check_size(kName, "forward y", y.size(), tokens * out_);
  // Partial Y [tokens, out] = X_local [tokens, li] W_local^T [li, out]; a
  // rank with no columns contributes zeros (sgemm with k = 0, beta = 0).
  sgemm(Trans::no, Trans::yes, tokens, out_, li, 1.0f, x.data(), weight.data(), 0.0f, y.data());
  tp_.all_reduce(y.data(), y.size(), DType::f32, ReduceOp::sum);
  if (bias_) add_bias_rows(y.data(), bias.data(), tokens, out_);
}

void RowParallelLinear::backward(std::span<const float> x, std::span<const float> dy,
                                 std::size_t tokens, std::span<const float> weight,
                                 std::span<float> dx, std::span<float> dweight,
                                 std::span<float> dbias) const {
  const std::size_t li = slice_.size;
  check_size(kName, "backward x", x.size(), tokens * li);
  check_size(kName, "backward dy", dy.size(), tokens * out_);
  check_size(kName, "backward weight", weight.size(), out_ * li);
  if (!dx.empty()) check_size(kName, "backward dx", dx.size(), tokens * li);
  check_size(kName, "backward dweight", dweight.size(), out_ * li);
  check_size(kName, "backward dbias", dbias.size(), bias_elements());
  // dW_local [out, li] += dY^T [out, tokens] X_local [tokens, li]
  sgemm(Trans::yes, Trans::no, out_, li, tokens, 1.0f, dy.data(), x.data(), 1.0f, dweight.data());
  if (bias_) add_column_sums(dbias.data(), dy.data(), tokens, out_);
  // dX_local [tokens, li] = dY [tokens, out] W_local [out, li]
  if (!dx.empty()) {
    sgemm(Trans::no, Trans::no, tokens, li, out_, 1.0f, dy.data(), weight.data(), 0.0f,
          dx.data());
  }
}

}  // namespace zeroshard::parallel
