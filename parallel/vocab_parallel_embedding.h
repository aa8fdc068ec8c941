// Vocabulary-parallel embedding (Shoeybi et al., 2019, "Megatron-LM",
// section 3, "input embedding"): out[t] = E[ids[t]], as torch.nn.Embedding,
// with the rows of E [vocab, dim] split across the tensor-parallel group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {

/// Embedding lookup with E [vocab, dim] split by rows: tp rank t holds rows
/// vocab_slice() = split_slice(vocab, tp, t) of E as its weight
/// [local_vocab, dim] (parallel/partition.h, [Note: uneven split]). The
/// slice is the one a ColumnParallelLinear of `vocab` outputs (no bias) over
/// the same group holds, so the same weight serves a tied LM head
/// (logits = H E^T, vocabulary-split; see vocab_parallel_cross_entropy.h).
/// Token ids are int32 in [0, vocab), the same on every rank of the group.
///
/// Communication: forward one all-reduce (sum) of the output, tokens x dim
/// fp32 elements, over the tensor-parallel group; backward none. Exactly one
/// rank contributes a non-zero row per token and the others add +0.0, so the
/// forward output equals the unsplit lookup bit for bit. See [Note:
/// tensor-parallel layer conventions] in column_parallel_linear.h.
class VocabParallelEmbedding {
 public:
  /// An embedding of `vocab` rows of `dim` features split over `tp_group`
  /// (kept by reference; must outlive the layer). Throws ConfigError when
  /// vocab or dim is 0 or vocab exceeds the int32 id range.
  VocabParallelEmbedding(Communicator& tp_group, std::size_t vocab, std::size_t dim);

  std::size_t vocab() const { return vocab_; }
  std::size_t dim() const { return dim_; }
  /// This rank's rows of E.
  Slice vocab_slice() const { return slice_; }
  std::size_t local_vocab() const { return slice_.size; }
  /// Elements of this rank's weight: local_vocab x dim.
  std::size_t weight_elements() const { return slice_.size * dim_; }

  /// out [tokens, dim] (tokens = ids.size()) = the rows of E for ids: each
  /// rank writes the rows of the ids in its slice, zeros elsewhere, and the
  /// all-reduce sums them. Throws InvariantError naming the position and the
  /// id when an id is outside [0, vocab) (every rank sees the same ids, so
  /// every rank throws, before communicating) or a span's size does not
  /// match; CommError from the all-reduce.
  void forward(std::span<const std::int32_t> ids, std::span<const float> weight,
               std::span<float> out) const;

  /// dweight [local_vocab, dim] += the rows of dout [tokens, dim] scattered
  /// to the ids in this rank's slice (rows of other ranks' ids are skipped;
  /// repeated ids add up, in token order). No communication. Throws
  /// InvariantError as forward.
  void backward(std::span<const std::int32_t> ids, std::span<const float> dout,
                std::span<float> dweight) const;

 private:
  Communicator& tp_;
  std::size_t vocab_;
  std::size_t dim_;
  Slice slice_;
};

}  // namespace zeroshard::parallel
