#include "parallel/parallel_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {

constexpr const char* kName = "ParallelSelfAttention";

std::size_t checked_head_dim(std::size_t dim, std::size_t heads) {
  if (dim == 0 || heads == 0 || dim % heads != 0) {
    throw ConfigError(fmt::format("{}: dim={} must be a positive multiple of heads={}", kName, dim,
                                  heads));
  }
  return dim / heads;
}

}  // namespace

ParallelSelfAttention::ParallelSelfAttention(Communicator& tp_group, std::size_t dim,
                                             std::size_t heads)
    : dim_(dim),
      heads_(heads),
      hd_(checked_head_dim(dim, heads)),
      heads_slice_(split_slice(heads, tp_group.world_size(), tp_group.rank())),
      qkv_(tp_group, dim, 3 * dim, /*bias=*/true, /*granule=*/3 * hd_),
      proj_(tp_group, dim, dim, /*bias=*/true, /*granule=*/hd_) {}

void ParallelSelfAttention::forward(std::span<const float> x, std::size_t batch, std::size_t seq,
                                    const AttentionWeights& w, std::span<float> y,
                                    AttentionSaved& saved) const {
  const std::size_t tokens = batch * seq;
  const std::size_t lh = heads_slice_.size;
  const std::size_t w3 = 3 * hd_ * lh;  // row length of the local qkv
  const std::size_t wc = hd_ * lh;      // row length of the local context
  check_size(kName, "forward x", x.size(), tokens * dim_);
  check_size(kName, "forward y", y.size(), tokens * dim_);
  saved.qkv.assign(tokens * w3, 0.0f);
  saved.probs.assign(batch * lh * seq * seq, 0.0f);
  saved.context.assign(tokens * wc, 0.0f);
  qkv_.forward(x, tokens, w.qkv_weight, w.qkv_bias, saved.qkv);

  const double scale = 1.0 / std::sqrt(static_cast<double>(hd_));
  std::vector<double> scores(seq), acc(hd_);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < lh; ++h) {
      float* probs = saved.probs.data() + (b * lh + h) * seq * seq;
      for (std::size_t i = 0; i < seq; ++i) {
        const float* q = saved.qkv.data() + (b * seq + i) * w3 + h * 3 * hd_;
        double m = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j <= i; ++j) {
          const float* k = saved.qkv.data() + (b * seq + j) * w3 + h * 3 * hd_ + hd_;
          double s = 0.0;
          for (std::size_t d = 0; d < hd_; ++d) s += static_cast<double>(q[d]) * k[d];
          scores[j] = s * scale;
          m = std::max(m, scores[j]);
        }
        double sum = 0.0;
        for (std::size_t j = 0; j <= i; ++j) {
          scores[j] = std::exp(scores[j] - m);
          sum += scores[j];
        }
        // context_i = sum_j P[i][j] v_j, j outer so that v_j is read along
        // its row (each element's sum still in increasing j: the same bits).
        float* c = saved.context.data() + (b * seq + i) * wc + h * hd_;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::size_t j = 0; j <= i; ++j) {
          const double pj = scores[j] / sum;
          const float* v = saved.qkv.data() + (b * seq + j) * w3 + h * 3 * hd_ + 2 * hd_;
          for (std::size_t d = 0; d < hd_; ++d) acc[d] += pj * v[d];
          probs[i * seq + j] = static_cast<float>(pj);
        }
        for (std::size_t d = 0; d < hd_; ++d) c[d] = static_cast<float>(acc[d]);
      }
    }
  }
  proj_.forward(saved.context, tokens, w.proj_weight, w.proj_bias, y);
}

void ParallelSelfAttention::backward(std::span<const float> x, std::span<const float> dy,
                                     std::size_t batch, std::size_t seq,
                                     const AttentionWeights& w, const AttentionSaved& saved,
                                     std::span<float> dx, const AttentionGrads& g) const {
  const std::size_t tokens = batch * seq;
  const std::size_t lh = heads_slice_.size;
  const std::size_t w3 = 3 * hd_ * lh;
  const std::size_t wc = hd_ * lh;
  check_size(kName, "backward x", x.size(), tokens * dim_);
  check_size(kName, "backward dy", dy.size(), tokens * dim_);
  check_size(kName, "backward dx", dx.size(), tokens * dim_);
  check_size(kName, "backward saved qkv", saved.qkv.size(), tokens * w3);
  check_size(kName, "backward saved probs", saved.probs.size(), batch * lh * seq * seq);
  check_size(kName, "backward saved context", saved.context.size(), tokens * wc);

  // Row-parallel output projection: no communication; dcontext is this
  // rank's heads' slice.
  std::vector<float> dcontext(tokens * wc);
  proj_.backward(saved.context, dy, tokens, w.proj_weight, dcontext, g.proj_weight, g.proj_bias);

  const double scale = 1.0 / std::sqrt(static_cast<double>(hd_));
  std::vector<float> dqkv(tokens * w3, 0.0f);
  std::vector<double> dp(seq), dk(seq * hd_), dv(seq * hd_), dq_acc(hd_);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < lh; ++h) {
      const float* probs = saved.probs.data() + (b * lh + h) * seq * seq;
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (std::size_t i = 0; i < seq; ++i) {
        const float* dc = dcontext.data() + (b * seq + i) * wc + h * hd_;
        const float* q = saved.qkv.data() + (b * seq + i) * w3 + h * 3 * hd_;
        const float* p = probs + i * seq;
        // dP[i][j] = dc_i . v_j; dV[j] += P[i][j] dc_i
        double dot = 0.0;
        for (std::size_t j = 0; j <= i; ++j) {
          const float* v = saved.qkv.data() + (b * seq + j) * w3 + h * 3 * hd_ + 2 * hd_;
          double s = 0.0;
          for (std::size_t d = 0; d < hd_; ++d) {
            s += static_cast<double>(dc[d]) * v[d];
            dv[j * hd_ + d] += static_cast<double>(p[j]) * dc[d];
          }
          dp[j] = s;
          dot += static_cast<double>(p[j]) * s;
        }
        // dS[i][j] = P[i][j] (dP[i][j] - sum_k P[i][k] dP[i][k]), then
        // dQ_i = scale sum_j dS K_j and dK_j += scale dS Q_i.
        float* dq = dqkv.data() + (b * seq + i) * w3 + h * 3 * hd_;
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (std::size_t j = 0; j <= i; ++j) {
          const double ds = static_cast<double>(p[j]) * (dp[j] - dot) * scale;
          const float* k = saved.qkv.data() + (b * seq + j) * w3 + h * 3 * hd_ + hd_;
          for (std::size_t d = 0; d < hd_; ++d) {
            dq_acc[d] += ds * k[d];
            dk[j * hd_ + d] += ds * q[d];
          }
        }
        for (std::size_t d = 0; d < hd_; ++d) dq[d] = static_cast<float>(dq_acc[d]);
      }
      for (std::size_t j = 0; j < seq; ++j) {
        float* row = dqkv.data() + (b * seq + j) * w3 + h * 3 * hd_;
        for (std::size_t d = 0; d < hd_; ++d) {
          row[hd_ + d] = static_cast<float>(dk[j * hd_ + d]);
          row[2 * hd_ + d] = static_cast<float>(dv[j * hd_ + d]);
        }
      }
    }
  }
  // Column-parallel QKV projection: dX all-reduced over the group.
  qkv_.backward(x, dqkv, tokens, w.qkv_weight, dx, g.qkv_weight, g.qkv_bias);
}

}  // namespace zeroshard::parallel
