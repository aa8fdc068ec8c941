#include "parallel/parallel_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/activation/softmax.h"
#include "parallel/check_size.h"
#include "parallel/gemm.h"

namespace zeroshard::parallel {

namespace {

constexpr const char* kAttentionName = "ParallelSelfAttention";

std::size_t checked_head_dim(std::size_t dim, std::size_t heads) {
  if (dim == 0 || heads == 0 || dim % heads != 0) {
    throw ConfigError(fmt::format("{}: dim={} must be a positive multiple of heads={}", kAttentionName, dim, heads));
  }
  return dim / heads;
}

}  // namespace

ParallelSelfAttention::ParallelSelfAttention(Communicator& tp_group, std::size_t dim, std::size_t heads)
    : dim_(dim), heads_(heads), hd_(checked_head_dim(dim, heads)),
      heads_slice_(split_slice(heads, tp_group.world_size(), tp_group.rank())),
      qkv_(tp_group, dim, 3 * dim, /*bias=*/true, /*granule=*/3 * hd_),
      proj_(tp_group, dim, dim, /*bias=*/true, /*granule=*/hd_) {}

void ParallelSelfAttention::forward(std::span<const float> x, std::size_t batch, std::size_t seq,
                                    const AttentionWeights& w, std::span<float> y, AttentionSaved& saved) const {
  const std::size_t tokens = batch * seq;
  const std::size_t lh = heads_slice_.size;
  const std::size_t w3 = 3 * hd_ * lh;  // row length of the local qkv
  const std::size_t wc = hd_ * lh;      // row length of the local context
  check_size(kAttentionName, "forward x", x.size(), tokens * dim_);
  check_size(kAttentionName, "forward y", y.size(), tokens * dim_);
  // Sized only: every element is written below (a reused AttentionSaved
  // keeps its buffers).
  saved.qkv.resize(tokens * w3);
  saved.probs.resize(batch * lh * seq * seq);
  saved.context.resize(tokens * wc);
  qkv_.forward(x, tokens, w.qkv_weight, w.qkv_bias, saved.qkv);

  // Per (sequence, head), with P the head's seq x seq probabilities in
  // saved.probs: S = scale Q K^T into P, the causal softmax of each row in
  // place (above the diagonal exactly 0), context = P V ([Note: attention
  // by matrix products]).
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd_)));
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < lh; ++h) {
      float* probs = saved.probs.data() + (b * lh + h) * seq * seq;
      const float* q = saved.qkv.data() + b * seq * w3 + h * 3 * hd_;
      sgemm(Trans::no, Trans::yes, seq, seq, hd_, scale, q, w3, q + hd_, w3, 0.0f, probs, seq);
      for (std::size_t i = 0; i < seq; ++i) kernels::causal_softmax_row(probs + i * seq, i + 1, seq);
      sgemm(Trans::no, Trans::no, seq, hd_, seq, 1.0f, probs, seq, q + 2 * hd_, w3, 0.0f,
            saved.context.data() + b * seq * wc + h * hd_, wc);
    }
  }
  proj_.forward(saved.context, tokens, w.proj_weight, w.proj_bias, y);
}

void ParallelSelfAttention::backward(std::span<const float> x, std::span<const float> dy, std::size_t batch,
                                     std::size_t seq, const AttentionWeights& w, const AttentionSaved& saved,
                                     std::span<float> dx, const AttentionGrads& g) const {
  const std::size_t tokens = batch * seq;
  const std::size_t lh = heads_slice_.size;
  const std::size_t w3 = 3 * hd_ * lh;
  const std::size_t wc = hd_ * lh;
  check_size(kAttentionName, "backward x", x.size(), tokens * dim_);
  check_size(kAttentionName, "backward dy", dy.size(), tokens * dim_);
  check_size(kAttentionName, "backward dx", dx.size(), tokens * dim_);
  check_size(kAttentionName, "backward saved qkv", saved.qkv.size(), tokens * w3);
  check_size(kAttentionName, "backward saved probs", saved.probs.size(), batch * lh * seq * seq);
  check_size(kAttentionName, "backward saved context", saved.context.size(), tokens * wc);

  // Scratch of this thread, kept between calls: every element is written
  // below before it is read (products with beta 0, whole blocks), so
  // neither a fresh allocation nor zeroing is needed.
  thread_local std::vector<float> dcontext, dqkv, ds;
  dcontext.resize(tokens * wc);
  dqkv.resize(tokens * w3);
  ds.resize(seq * seq);
  // Row-parallel output projection: no communication; dcontext is this
  // rank's heads' slice.
  proj_.backward(saved.context, dy, tokens, w.proj_weight, dcontext, g.proj_weight, g.proj_bias);

  // Per (sequence, head): dP = dC V^T, dV = P^T dC, dS = P (dP - rowsum(P dP))
  // (scaled), dQ = dS K, dK = dS^T Q, each written into its column block of
  // dqkv ([Note: attention by matrix products]).
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd_)));
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < lh; ++h) {
      const float* probs = saved.probs.data() + (b * lh + h) * seq * seq;
      const float* q = saved.qkv.data() + b * seq * w3 + h * 3 * hd_;
      const float* dc = dcontext.data() + b * seq * wc + h * hd_;
      float* dq = dqkv.data() + b * seq * w3 + h * 3 * hd_;
      sgemm(Trans::no, Trans::yes, seq, seq, hd_, 1.0f, dc, wc, q + 2 * hd_, w3, 0.0f, ds.data(), seq);
      sgemm(Trans::yes, Trans::no, seq, hd_, seq, 1.0f, probs, seq, dc, wc, 0.0f, dq + 2 * hd_, w3);
      for (std::size_t i = 0; i < seq; ++i) {
        kernels::softmax_backward_row(probs + i * seq, ds.data() + i * seq, i + 1, seq, scale);
      }
      sgemm(Trans::no, Trans::no, seq, hd_, seq, 1.0f, ds.data(), seq, q + hd_, w3, 0.0f, dq, w3);
      sgemm(Trans::yes, Trans::no, seq, hd_, seq, 1.0f, ds.data(), seq, q, w3, 0.0f, dq + hd_, w3);
    }
  }
  // Column-parallel QKV projection: dX all-reduced over the group.
  qkv_.backward(x, dqkv, tokens, w.qkv_weight, dx, g.qkv_weight, g.qkv_bias);
}

}  // namespace zeroshard::parallel
