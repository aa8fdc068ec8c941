// PipelineExecutor; see parallel/pipeline_executor.h and [Note: pipeline
// deadlock freedom] there.
#include "parallel/pipeline_executor.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/tracer.h"

namespace zeroshard {

std::int64_t PipelineTimeline::compute_ns() const {
  std::int64_t total = 0;
  for (const PipelineEvent& e : events) {
    if (e.action.op == PipelineOp::forward || e.action.op == PipelineOp::backward) {
      total += e.end_ns - e.begin_ns;
    }
  }
  return total;
}

std::int64_t PipelineTimeline::idle_ns() const { return (end_ns - begin_ns) - compute_ns(); }

double PipelineTimeline::idle_fraction() const {
  const std::int64_t wall = end_ns - begin_ns;
  return wall > 0 ? static_cast<double>(idle_ns()) / static_cast<double>(wall) : 0.0;
}

// One message in flight: its buffer and handle.
struct Transfer {
  int micro_batch = -1;
  bool input_sized = false;  // which pool the buffer returns to
  TypedBuffer buf;
  CommWork work;
};

// A run's buffers and messages. Kept by the executor between runs (the
// pools), or given up whole when a run fails (see give_up).
struct PipelineExecutor::Run {
  std::vector<TypedBuffer> free_input;   // input_count elements each
  std::vector<TypedBuffer> free_output;  // output_count elements each
  std::optional<Transfer> activation_recv;  // the receive posted ahead
  std::optional<Transfer> gradient_recv;
  std::map<int, TypedBuffer> inputs;        // received, not yet forwarded
  std::map<int, TypedBuffer> outputs;       // forwarded, not yet sent
  std::map<int, TypedBuffer> grad_outputs;  // received, not yet backwarded
  std::map<int, TypedBuffer> grad_inputs;   // backwarded, not yet sent
  std::vector<Transfer> sends;              // posted, not known complete
};

namespace {

// Runs that failed: their messages may still complete into these buffers,
// so they live (reachable, not leaked) until the process ends.
void give_up(std::unique_ptr<PipelineExecutor::Run>& run) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<PipelineExecutor::Run>>;
  const std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(run));
}

}  // namespace

PipelineExecutor::PipelineExecutor(Communicator& pp_group, PipelineStageFunctions functions)
    : comm_(pp_group), fn_(std::move(functions)), pp_rank_(pp_group.rank()),
      pp_size_(pp_group.world_size()), run_(std::make_unique<Run>()) {
  // Every stage's description, checked the same way on every stage.
  constexpr std::size_t kFields = 5;
  const std::array<double, kFields> mine = {
      static_cast<double>(fn_.input_count), static_cast<double>(fn_.output_count),
      static_cast<double>(fn_.dtype), fn_.forward && fn_.backward ? 1.0 : 0.0,
      comm_.backend() == "nccl" ? 1.0 : 0.0};
  std::vector<double> all(kFields * static_cast<std::size_t>(pp_size_));
  comm_.all_gather(mine.data(), all.data(), kFields, DType::f64);
  std::string problems;
  const auto add = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  const auto field = [&](int s, std::size_t f) {
    return all[static_cast<std::size_t>(s) * kFields + f];
  };
  for (int s = 0; s < pp_size_; ++s) {
    const auto in = static_cast<std::size_t>(field(s, 0));
    const auto out = static_cast<std::size_t>(field(s, 1));
    if (s == 0 && in != 0) add(fmt::format("stage 0 has input_count {} (the first stage receives nothing: 0)", in));
    if (s == pp_size_ - 1 && out != 0) {
      add(fmt::format("stage {} (the last) has output_count {} (it sends nothing: 0)", s, out));
    }
    if (s + 1 < pp_size_ && out != static_cast<std::size_t>(field(s + 1, 0))) {
      add(fmt::format("stage {} sends output_count {} elements but stage {} expects input_count {}", s,
                      out, s + 1, static_cast<std::size_t>(field(s + 1, 0))));
    }
    if (field(s, 2) != field(0, 2)) {
      add(fmt::format("stage {} uses dtype {} but stage 0 uses {}", s,
                      dtype_name(static_cast<DType>(static_cast<int>(field(s, 2)))),
                      dtype_name(static_cast<DType>(static_cast<int>(field(0, 2))))));
    }
    if (field(s, 3) == 0.0) add(fmt::format("stage {} has no forward or no backward function", s));
    if (field(s, 4) != 0.0) {
      add(fmt::format("stage {} runs on an NCCL communicator; the pipeline executor moves host buffers "
                      "and needs non-blocking sends (use the MPI group)",
                      s));
    }
  }
  if (!problems.empty()) {
    throw ConfigError(fmt::format("pipeline executor over {} stages: {}", pp_size_, problems));
  }
}

PipelineExecutor::~PipelineExecutor() = default;

namespace {

TypedBuffer take(std::vector<TypedBuffer>& pool, std::size_t count, DType dtype) {
  if (pool.empty()) return TypedBuffer(count, dtype);
  TypedBuffer b = std::move(pool.back());
  pool.pop_back();
  return b;
}

// The buffer of micro-batch i in `m`, removed from it.
TypedBuffer pop(std::map<int, TypedBuffer>& m, int i, const char* what, int pp_rank) {
  auto it = m.find(i);
  ZS_CHECK(it != m.end(), "pipeline stage {}: no {} for micro-batch {}", pp_rank, what, i);
  TypedBuffer b = std::move(it->second);
  m.erase(it);
  return b;
}

// The micro-batches of `op` in `actions`, in order.
std::vector<int> order_of(const std::vector<PipelineAction>& actions, PipelineOp op) {
  std::vector<int> out;
  for (const PipelineAction& a : actions) {
    if (a.op == op) out.push_back(a.micro_batch);
  }
  return out;
}

}  // namespace

PipelineTimeline PipelineExecutor::run(const PipelineTable& table) {
  ZS_CHECK(table.pipeline_stages == pp_size_,
           "pipeline executor: the table has {} stages but the pipeline group has {} ranks",
           table.pipeline_stages, pp_size_);
  validate_pipeline_table(table);
  const std::vector<PipelineAction>& actions = table.actions[static_cast<std::size_t>(pp_rank_)];
  const std::vector<int> activation_order = order_of(actions, PipelineOp::recv_activation);
  const std::vector<int> gradient_order = order_of(actions, PipelineOp::recv_gradient);
  std::size_t next_activation = 0, next_gradient = 0;
  const DType dtype = fn_.dtype;
  const std::size_t in_count = fn_.input_count, out_count = fn_.output_count;
  const int prev = pp_rank_ - 1, next = pp_rank_ + 1;
  Run& r = *run_;

  PipelineTimeline timeline;
  timeline.pp_rank = pp_rank_;
  timeline.events.reserve(actions.size());
  timeline.begin_ns = Tracer::now_ns();

  // Posts the next receive of its kind, if any is left.
  const auto post_activation = [&] {
    if (next_activation == activation_order.size()) return;
    const int i = activation_order[next_activation++];
    Transfer t{i, true, take(r.free_input, in_count, dtype), {}};
    comm_.set_label(fmt::format("activation {}", i));
    t.work = comm_.irecv(t.buf.data(), in_count, dtype, prev);
    r.activation_recv = std::move(t);
  };
  const auto post_gradient = [&] {
    if (next_gradient == gradient_order.size()) return;
    const int i = gradient_order[next_gradient++];
    Transfer t{i, false, take(r.free_output, out_count, dtype), {}};
    comm_.set_label(fmt::format("gradient {}", i));
    t.work = comm_.irecv(t.buf.data(), out_count, dtype, next);
    r.gradient_recv = std::move(t);
  };
  // Returns the buffers of completed sends to their pools.
  const auto reap = [&] {
    for (std::size_t k = 0; k < r.sends.size();) {
      if (r.sends[k].work.test()) {
        (r.sends[k].input_sized ? r.free_input : r.free_output).push_back(std::move(r.sends[k].buf));
        r.sends[k] = std::move(r.sends.back());
        r.sends.pop_back();
      } else {
        ++k;
      }
    }
  };
  // Waits for the receive posted ahead, which must be micro-batch i's.
  const auto arrive = [&](std::optional<Transfer>& slot, int i, const char* what) {
    ZS_CHECK(slot.has_value() && slot->micro_batch == i,
             "pipeline stage {}: the {} receive posted ahead is for micro-batch {}, the table "
             "receives {} now",
             pp_rank_, what, slot ? slot->micro_batch : -1, i);
    slot->work.wait();
    TypedBuffer b = std::move(slot->buf);
    slot.reset();
    return b;
  };

  try {
    post_activation();
    post_gradient();
    for (const PipelineAction& a : actions) {
      const int i = a.micro_batch;
      PipelineEvent ev{a, Tracer::now_ns(), 0};
      switch (a.op) {
        case PipelineOp::recv_activation:
          r.inputs.emplace(i, arrive(r.activation_recv, i, "activation"));
          post_activation();
          break;
        case PipelineOp::forward: {
          TypedBuffer in;
          if (pp_rank_ > 0) in = pop(r.inputs, i, "received activation", pp_rank_);
          TypedBuffer out = pp_rank_ < pp_size_ - 1 ? take(r.free_output, out_count, dtype) : TypedBuffer();
          ev.begin_ns = Tracer::now_ns();
          fn_.forward(i, pp_rank_ > 0 ? in.data() : nullptr, pp_rank_ < pp_size_ - 1 ? out.data() : nullptr);
          ev.end_ns = Tracer::now_ns();
          if (pp_rank_ > 0) r.free_input.push_back(std::move(in));
          if (pp_rank_ < pp_size_ - 1) r.outputs.emplace(i, std::move(out));
          break;
        }
        case PipelineOp::send_activation: {
          Transfer t{i, false, pop(r.outputs, i, "forward output", pp_rank_), {}};
          comm_.set_label(fmt::format("activation {}", i));
          t.work = comm_.isend(t.buf.data(), out_count, dtype, next);
          r.sends.push_back(std::move(t));
          break;
        }
        case PipelineOp::recv_gradient:
          r.grad_outputs.emplace(i, arrive(r.gradient_recv, i, "gradient"));
          post_gradient();
          break;
        case PipelineOp::backward: {
          TypedBuffer g;
          if (pp_rank_ < pp_size_ - 1) g = pop(r.grad_outputs, i, "received gradient", pp_rank_);
          TypedBuffer gin = pp_rank_ > 0 ? take(r.free_input, in_count, dtype) : TypedBuffer();
          ev.begin_ns = Tracer::now_ns();
          fn_.backward(i, pp_rank_ < pp_size_ - 1 ? g.data() : nullptr, pp_rank_ > 0 ? gin.data() : nullptr);
          ev.end_ns = Tracer::now_ns();
          if (pp_rank_ < pp_size_ - 1) r.free_output.push_back(std::move(g));
          if (pp_rank_ > 0) r.grad_inputs.emplace(i, std::move(gin));
          break;
        }
        case PipelineOp::send_gradient: {
          Transfer t{i, true, pop(r.grad_inputs, i, "input gradient", pp_rank_), {}};
          comm_.set_label(fmt::format("gradient {}", i));
          t.work = comm_.isend(t.buf.data(), in_count, dtype, prev);
          r.sends.push_back(std::move(t));
          break;
        }
      }
      if (a.op != PipelineOp::forward && a.op != PipelineOp::backward) ev.end_ns = Tracer::now_ns();
      timeline.events.push_back(ev);
      reap();
    }
    for (Transfer& t : r.sends) t.work.wait();
    reap();
  } catch (...) {
    // Pending messages may never complete: keep them (and their buffers)
    // without waiting, so that unwinding does not block; see the file comment.
    comm_.set_label("");
    give_up(run_);
    run_ = std::make_unique<Run>();
    throw;
  }
  comm_.set_label("");
  timeline.end_ns = Tracer::now_ns();
  return timeline;
}

}  // namespace zeroshard
