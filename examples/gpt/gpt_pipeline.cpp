// The GPT of gpt_model.h through its pipeline stages ([Note: GPT pipeline
// stages]): a training cycle's micro-batches under a pipeline schedule,
// forward-only passes stage to stage (evaluation and sampling), and the
// single micro-batch step at pp = 1.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "examples/gpt/gpt_micro_batch.h"
#include "examples/gpt/gpt_model.h"

namespace zeroshard::examples {

namespace {

void check_tokens(std::span<const std::int32_t> tokens, int batch, int seq, int context) {
  if (batch < 1 || seq < 1 || seq > context) {
    throw InvariantError(
        fmt::format("gpt: batch {} and sequence length {} must be >= 1, the length at most context {}", batch, seq,
                    context));
  }
  if (tokens.size() != static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq + 1)) {
    throw InvariantError(fmt::format("gpt: {} tokens for batch {} x (seq {} + 1)", tokens.size(), batch, seq));
  }
}

}  // namespace

double Gpt::train_micro_batch(std::span<const std::int32_t> tokens, int batch, int seq, double loss_scale) {
  if (mesh_.pp_size() > 1) {
    throw InvariantError(fmt::format("gpt: train_micro_batch() runs one stage only; with {} pipeline stages use "
                                     "train_batch()",
                                     mesh_.pp_size()));
  }
  check_tokens(tokens, batch, seq, shape_.context);
  MicroBatch mb;
  mb.set_tokens(tokens, batch, seq);
  mb.loss_scale = loss_scale;
  forward(mb, nullptr, nullptr, true);
  const double loss = mb.loss;
  backward(mb, nullptr, nullptr);
  return loss;
}

double Gpt::train_batch(std::span<const std::vector<std::int32_t>> micro_batches, int batch, int seq,
                        PipelineScheduleKind kind, double loss_scale) {
  const int m = static_cast<int>(micro_batches.size());
  if (m != engine_.config().gradient_accumulation_steps) {
    throw InvariantError(fmt::format("gpt: train_batch() with {} micro-batches; the engine's "
                                     "gradient_accumulation_steps is {}",
                                     m, engine_.config().gradient_accumulation_steps));
  }
  for (const auto& tokens : micro_batches) check_tokens(tokens, batch, seq, shape_.context);
  const std::size_t n = activation_count(batch, seq);
  if (!executor_ || executor_count_ != n) {
    PipelineStageFunctions f;
    f.dtype = DType::f32;
    f.input_count = first_pipeline_stage() ? 0 : n;
    f.output_count = last_pipeline_stage() ? 0 : n;
    f.forward = [this](int i, const void* in, void* out) {
      MicroBatch& mb = *micro_batches_[static_cast<std::size_t>(i)];
      forward(mb, static_cast<const float*>(in), static_cast<float*>(out), true);
      losses_[static_cast<std::size_t>(i)] = mb.loss;  // backward clears mb
    };
    // Every micro-batch but the last ends with engine.step() (the
    // gradient-accumulation step: reductions finished, no optimizer); the
    // last one's step is the caller's, after every stage is done.
    f.backward = [this](int i, const void* grad_out, void* grad_in) {
      backward(*micro_batches_[static_cast<std::size_t>(i)], static_cast<const float*>(grad_out),
               static_cast<float*>(grad_in));
      if (static_cast<std::size_t>(i) + 1 < micro_batches_.size()) engine_.step();
    };
    executor_.reset();
    executor_ = std::make_unique<PipelineExecutor>(engine_.pp_communicator(), std::move(f));
    executor_count_ = n;
  }
  micro_batches_.clear();
  for (const auto& tokens : micro_batches) {
    auto mb = std::make_unique<MicroBatch>();
    mb->set_tokens(tokens, batch, seq);
    mb->loss_scale = loss_scale;
    micro_batches_.push_back(std::move(mb));
  }
  losses_.assign(static_cast<std::size_t>(m), 0.0);
  timeline_ = executor_->run(make_pipeline_table(kind, mesh_.pp_size(), m));
  double loss = 0;
  if (last_pipeline_stage()) {
    for (double l : losses_) loss += l;
    loss /= m;
  }
  return from_last_pipeline_stage(loss);
}

double Gpt::from_last_pipeline_stage(double value) {
  if (mesh_.pp_size() > 1) engine_.pp_communicator().broadcast(&value, 1, DType::f64, mesh_.pp_size() - 1);
  return value;
}

double Gpt::forward_only(std::span<const std::int32_t> tokens, int batch, int seq, std::vector<float>* last_logits) {
  check_tokens(tokens, batch, seq, shape_.context);
  MicroBatch mb;
  mb.set_tokens(tokens, batch, seq);
  const std::size_t n = activation_count(batch, seq);
  std::vector<float> in(first_pipeline_stage() ? 0 : n), out(last_pipeline_stage() ? 0 : n);
  Communicator& pp = engine_.pp_communicator();
  // A chain: each stage receives, computes, sends (blocking; nothing waits
  // on a later stage).
  if (!first_pipeline_stage()) {
    pp.set_label("activation");
    pp.recv(in.data(), n, DType::f32, mesh_.pp_rank() - 1);
  }
  forward(mb, in.data(), out.data(), false);
  if (!last_pipeline_stage()) {
    pp.set_label("activation");
    pp.send(out.data(), n, DType::f32, mesh_.pp_rank() + 1);
  }
  pp.set_label("");
  if (last_pipeline_stage() && last_logits != nullptr) *last_logits = std::move(mb.logits);
  return last_pipeline_stage() ? mb.loss : 0.0;
}

double Gpt::evaluate(std::span<const std::int32_t> tokens, int batch, int seq) {
  return from_last_pipeline_stage(forward_only(tokens, batch, seq, nullptr));
}

std::string Gpt::sample(const std::string& prompt, int n, double temperature, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  const std::size_t V = static_cast<std::size_t>(shape_.vocab), Vl = head_.local_out();
  const std::size_t context = static_cast<std::size_t>(shape_.context);
  for (int i = 0; i < n; ++i) {
    const std::size_t start = text.size() > context ? text.size() - context : 0;
    const int seq = static_cast<int>(text.size() - start);
    std::vector<std::int32_t> tokens;
    for (std::size_t j = start; j < text.size(); ++j) tokens.push_back(static_cast<unsigned char>(text[j]));
    tokens.push_back(0);  // forward reads seq + 1 tokens; the last one is a target the sample never uses
    std::vector<float> logits;
    forward_only(tokens, 1, seq, &logits);
    // The last stage draws: the last position's logits, gathered over the
    // tensor-parallel group; the byte then goes to every stage.
    double byte = 0;
    if (last_pipeline_stage()) {
      std::vector<float> last(Vl), full(V);
      std::copy_n(logits.data() + (static_cast<std::size_t>(seq) - 1) * Vl, Vl, last.data());
      engine_.tp_communicator().all_gather(last.data(), full.data(), Vl, DType::f32);
      const double m = *std::max_element(full.begin(), full.end());
      std::vector<double> w(V);
      for (std::size_t v = 0; v < V; ++v) w[v] = std::exp((full[v] - m) / std::max(temperature, 1e-3));
      std::discrete_distribution<int> pick(w.begin(), w.end());
      byte = pick(gen);
    }
    text.push_back(static_cast<char>(static_cast<int>(from_last_pipeline_stage(byte))));
  }
  return text;
}

}  // namespace zeroshard::examples
