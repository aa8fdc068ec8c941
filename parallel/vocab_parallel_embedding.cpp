#include "parallel/vocab_parallel_embedding.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {
constexpr const char* kEmbeddingName = "VocabParallelEmbedding";
}

VocabParallelEmbedding::VocabParallelEmbedding(Communicator& tp_group, std::size_t vocab,
                                               std::size_t dim)
    : tp_(tp_group), vocab_(vocab), dim_(dim) {
  if (vocab_ == 0 || dim_ == 0 ||
      vocab_ > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw ConfigError(
        fmt::format("{}: vocab={} and dim={} must both be >= 1 (and vocab at "
                    "most {}, the int32 id range)",
                    kEmbeddingName, vocab_, dim_, std::numeric_limits<std::int32_t>::max()));
  }
  slice_ = split_slice(vocab_, tp_.world_size(), tp_.rank());
}

void VocabParallelEmbedding::forward(std::span<const std::int32_t> ids,
                                     std::span<const float> weight, std::span<float> out) const {
  check_token_ids(kEmbeddingName, "id", ids, vocab_);
  check_size(kEmbeddingName, "forward weight", weight.size(), weight_elements());
  check_size(kEmbeddingName, "forward out", out.size(), ids.size() * dim_);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    float* row = out.data() + t * dim_;
    const auto id = static_cast<std::size_t>(ids[t]);
    if (slice_.contains(id)) {
      std::copy_n(weight.data() + (id - slice_.begin) * dim_, dim_, row);
    } else {
      std::fill_n(row, dim_, 0.0f);
    }
  }
  tp_.all_reduce(out.data(), out.size(), DType::f32, ReduceOp::sum);
}

void VocabParallelEmbedding::backward(std::span<const std::int32_t> ids,
                                      std::span<const float> dout, std::span<float> dweight) const {
  check_token_ids(kEmbeddingName, "id", ids, vocab_);
  check_size(kEmbeddingName, "backward dout", dout.size(), ids.size() * dim_);
  check_size(kEmbeddingName, "backward dweight", dweight.size(), weight_elements());
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const auto id = static_cast<std::size_t>(ids[t]);
    if (!slice_.contains(id)) continue;
    const float* src = dout.data() + t * dim_;
    float* dst = dweight.data() + (id - slice_.begin) * dim_;
    for (std::size_t d = 0; d < dim_; ++d) dst[d] += src[d];
  }
}

}  // namespace zeroshard::parallel
