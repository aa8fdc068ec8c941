// Vocabulary-parallel cross-entropy (Shoeybi et al., 2019, "Megatron-LM",
// section 3: the output embedding's logits are never gathered; the group
// exchanges only per-token scalars): the mean over tokens of
// torch.nn.functional.cross_entropy on logits split by vocabulary.
//
// [Note: vocabulary-parallel softmax]
// Rank t holds the logits of vocabulary slice V_t = split_slice(vocab, tp, t)
// for every token (the output of a tied LM head, logits = H E_t^T with E_t
// the rank's VocabParallelEmbedding weight, computed by a ColumnParallelLinear
// of `vocab` outputs without bias). For token i with target y_i:
//   m_i = max over ranks of the local max of logits[i]       (all-reduce max)
//   s_i = sum over ranks of sum_{v in V_t} exp(logits[i,v] - m_i)
//   z_i = logits[i, y_i] from the rank whose slice holds y_i, 0 elsewhere
//         (s and z: one all-reduce sum of 2 x tokens values)
//   loss = (1/tokens) sum_i ( log s_i - (z_i - m_i) )
//   dL/dlogits[i, v] = (exp(logits[i,v] - m_i) / s_i - [v == y_i]) / tokens
// on each rank's slice, with no communication in backward. Subtracting m_i
// keeps exp in range (log-sum-exp). The exponentials, sums and loss are
// computed in fp64 from the fp32 logits, so the result matches an unsplit
// fp64 reference to within fp64 rounding before the gradient is rounded to
// fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// What forward keeps for backward: m_i + log s_i per token (the
/// log-sum-exp of token i's full row of logits) and the mean loss.
struct CrossEntropyForward {
  double loss = 0.0;                ///< mean over tokens; 0 for no tokens
  std::vector<double> log_sum_exp;  ///< [tokens]
};

/// Cross-entropy over a vocabulary split across the tensor-parallel group
/// as [Note: vocabulary-parallel softmax]. Logits are row-major fp32
/// [tokens, local_vocab] holding columns vocab_slice() of the full
/// [tokens, vocab] logits; targets are int32 in [0, vocab), the same on every
/// rank. Thread safety: one thread at a time per communicator.
class VocabParallelCrossEntropy {
 public:
  /// A loss over `vocab` classes split over `tp_group` (kept by reference;
  /// must outlive it). Throws ConfigError when vocab is 0 or exceeds the
  /// int32 id range.
  VocabParallelCrossEntropy(Communicator& tp_group, std::size_t vocab);

  std::size_t vocab() const { return vocab_; }
  /// This rank's vocabulary columns (the same slice as a
  /// VocabParallelEmbedding of `vocab` rows over the group).
  Slice vocab_slice() const { return slice_; }
  std::size_t local_vocab() const { return slice_.size; }

  /// The mean loss over tokens = targets.size(), the same on every rank.
  /// Communication: one all-reduce (max) of tokens fp32 values and one
  /// all-reduce (sum) of 2 x tokens fp64 values over the group. Throws
  /// InvariantError naming the token and the id when a target is outside
  /// [0, vocab) (on every rank, before communicating) or when logits does
  /// not hold tokens x local_vocab elements; CommError from the all-reduces.
  CrossEntropyForward forward(std::span<const float> logits,
                              std::span<const std::int32_t> targets) const;

  /// dlogits [tokens, local_vocab] = grad_scale x dL/dlogits on this rank's
  /// slice (softmax - onehot, divided by tokens), from forward's logits,
  /// targets and result; grad_scale is dL_total/dL (1, or a loss scale).
  /// dlogits may alias logits (in place). No communication. Throws
  /// InvariantError when a size does not match.
  void backward(std::span<const float> logits, std::span<const std::int32_t> targets,
                const CrossEntropyForward& saved, float grad_scale,
                std::span<float> dlogits) const;

 private:
  Communicator& tp_;
  std::size_t vocab_;
  Slice slice_;
};

}  // namespace zeroshard::parallel
