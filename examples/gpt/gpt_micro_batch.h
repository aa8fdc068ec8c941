// A GPT micro-batch's forward state on one pipeline stage, kept for its
// backward (examples/gpt/gpt_model.h; private to gpt_model.cpp and
// gpt_pipeline.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "examples/gpt/gpt_model.h"
#include "runtime/activation/activation_store.h"

namespace zeroshard::examples {

// One forward's activations of a block (tokens T = batch x seq). With
// activation checkpointing only `checkpoint` (its input x, in the engine's
// ActivationStore) is kept between the forward and the backward, which
// recomputes the rest. f is the MLP's fc output until the GELU, which
// replaces it by gelu'(f): all the backward needs of it.
struct Gpt::Block {
  std::vector<float> x, h1, mean1, rstd1, x2, h2, mean2, rstd2, f, g;
  parallel::AttentionSaved attn;
  ActivationHandle checkpoint;       // valid: x is in the store, the rest empty
  std::size_t checkpoint_bytes = 0;  // what the store holds of it on this rank

  // Bytes of the vectors (the checkpoint aside).
  std::size_t bytes() const {
    auto v = [](const auto& a) { return a.size() * sizeof(a[0]); };
    return v(x) + v(h1) + v(mean1) + v(rstd1) + v(x2) + v(h2) + v(mean2) + v(rstd2) + v(f) + v(g) + v(attn.qkv) +
           v(attn.probs) + v(attn.context);
  }
};

// One micro-batch's forward state on this stage, kept for its backward.
struct Gpt::MicroBatch {
  int batch = 0, seq = 0;
  std::vector<std::int32_t> in, target;  // [batch x seq] each
  std::vector<Block> blocks;             // this stage's blocks
  std::vector<float> x;                  // last stage: the residual stream into ln_f
  std::vector<float> hf, meanf, rstdf, logits;
  parallel::CrossEntropyForward ce{};
  double loss = 0;         // last stage: the mean cross-entropy (nats)
  double loss_scale = 1;   // the loss gradient's factor
  std::size_t saved_bytes = 0;  // counted in Gpt::track_saved

  // Splits `tokens` ([b, s + 1] row-major) into inputs and targets.
  void set_tokens(std::span<const std::int32_t> tokens, int b, int s) {
    batch = b, seq = s;
    const std::size_t rows = static_cast<std::size_t>(b), len = static_cast<std::size_t>(s);
    in.resize(rows * len), target.resize(rows * len);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t t = 0; t < len; ++t) {
        in[r * len + t] = tokens[r * (len + 1) + t];
        target[r * len + t] = tokens[r * (len + 1) + t + 1];
      }
    }
  }
  // Bytes of the state kept for the backward.
  std::size_t bytes() const {
    auto v = [](const auto& a) { return a.size() * sizeof(a[0]); };
    std::size_t n = v(x) + v(hf) + v(meanf) + v(rstdf) + v(logits);
    for (const Block& k : blocks) n += k.bytes() + k.checkpoint_bytes;
    return n;
  }
};

}  // namespace zeroshard::examples
