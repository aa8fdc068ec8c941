#include "parallel/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kCrossEntropyName = "VocabParallelCrossEntropy";
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Communicator& tp_group, std::size_t vocab)
    : tp_(tp_group), vocab_(vocab) {
  if (vocab_ == 0 || vocab_ > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw ConfigError(fmt::format("{}: vocab={} must be in [1, {}] (the int32 id range)", kCrossEntropyName, vocab_,
                                  std::numeric_limits<std::int32_t>::max()));
  }
  slice_ = split_slice(vocab_, tp_.world_size(), tp_.rank());
}

CrossEntropyForward VocabParallelCrossEntropy::forward(
    std::span<const float> logits, std::span<const std::int32_t> targets) const {
  const std::size_t tokens = targets.size();
  const std::size_t lv = slice_.size;
  check_token_ids(kCrossEntropyName, "target", targets, vocab_);
  check_size(kCrossEntropyName, "forward logits", logits.size(), tokens * lv);

  // m_i: the row maximum over the whole vocabulary (-inf on a rank with an
  // empty slice; some rank holds at least one column since vocab >= 1).
  std::vector<float> row_max(tokens, -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < tokens; ++i) {
    const float* row = logits.data() + i * lv;
    for (std::size_t v = 0; v < lv; ++v) row_max[i] = std::max(row_max[i], row[v]);
  }
  tp_.all_reduce(row_max.data(), tokens, DType::f32, ReduceOp::max);

  // [s_0..s_{T-1}, z_0..z_{T-1}], summed over the group in one all-reduce.
  std::vector<double> sums(2 * tokens, 0.0);
  for (std::size_t i = 0; i < tokens; ++i) {
    const float* row = logits.data() + i * lv;
    const double m = row_max[i];
    double s = 0.0;
    for (std::size_t v = 0; v < lv; ++v) s += std::exp(static_cast<double>(row[v]) - m);
    sums[i] = s;
    const auto y = static_cast<std::size_t>(targets[i]);
    if (slice_.contains(y)) sums[tokens + i] = row[y - slice_.begin];
  }
  tp_.all_reduce(sums.data(), sums.size(), DType::f64, ReduceOp::sum);

  CrossEntropyForward out;
  out.log_sum_exp.resize(tokens);
  double total = 0.0;
  for (std::size_t i = 0; i < tokens; ++i) {
    const double lse = static_cast<double>(row_max[i]) + std::log(sums[i]);
    out.log_sum_exp[i] = lse;
    total += lse - sums[tokens + i];
  }
  out.loss = tokens == 0 ? 0.0 : total / static_cast<double>(tokens);
  return out;
}

void VocabParallelCrossEntropy::backward(std::span<const float> logits,
                                         std::span<const std::int32_t> targets,
                                         const CrossEntropyForward& saved, float grad_scale,
                                         std::span<float> dlogits) const {
  const std::size_t tokens = targets.size();
  const std::size_t lv = slice_.size;
  check_token_ids(kCrossEntropyName, "target", targets, vocab_);
  check_size(kCrossEntropyName, "backward logits", logits.size(), tokens * lv);
  check_size(kCrossEntropyName, "backward log_sum_exp", saved.log_sum_exp.size(), tokens);
  check_size(kCrossEntropyName, "backward dlogits", dlogits.size(), tokens * lv);
  if (tokens == 0) return;
  const double scale = static_cast<double>(grad_scale) / static_cast<double>(tokens);
  for (std::size_t i = 0; i < tokens; ++i) {
    const float* row = logits.data() + i * lv;
    float* drow = dlogits.data() + i * lv;
    const double lse = saved.log_sum_exp[i];
    const auto y = static_cast<std::size_t>(targets[i]);
    for (std::size_t v = 0; v < lv; ++v) {
      double g = std::exp(static_cast<double>(row[v]) - lse);
      if (slice_.begin + v == y) g -= 1.0;
      drow[v] = static_cast<float>(g * scale);
    }
  }
}

}  // namespace zeroshard::parallel
