// Pipeline schedules; see parallel/pipeline_schedule.h.
#include "parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace zeroshard {

const char* to_string(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::gpipe: return "gpipe";
    case PipelineScheduleKind::one_f_one_b: return "1f1b";
  }
  return "?";
}

PipelineScheduleKind parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe") return PipelineScheduleKind::gpipe;
  if (name == "1f1b") return PipelineScheduleKind::one_f_one_b;
  throw ConfigError(fmt::format("pipeline schedule \"{}\" is unknown; use \"gpipe\" or \"1f1b\"", name));
}

const char* to_string(PipelineOp op) {
  switch (op) {
    case PipelineOp::recv_activation: return "recv_act";
    case PipelineOp::forward: return "fwd";
    case PipelineOp::send_activation: return "send_act";
    case PipelineOp::recv_gradient: return "recv_grad";
    case PipelineOp::backward: return "bwd";
    case PipelineOp::send_gradient: return "send_grad";
  }
  return "?";
}

std::string to_string(const PipelineAction& action) {
  return fmt::format("{} {}", to_string(action.op), action.micro_batch);
}

namespace {

// The forward of micro-batch i on stage s of p, with its communication.
void add_forward(std::vector<PipelineAction>& out, int p, int s, int i) {
  if (s > 0) out.push_back({PipelineOp::recv_activation, i});
  out.push_back({PipelineOp::forward, i});
  if (s < p - 1) out.push_back({PipelineOp::send_activation, i});
}

// The backward of micro-batch i on stage s of p, with its communication.
void add_backward(std::vector<PipelineAction>& out, int p, int s, int i) {
  if (s < p - 1) out.push_back({PipelineOp::recv_gradient, i});
  out.push_back({PipelineOp::backward, i});
  if (s > 0) out.push_back({PipelineOp::send_gradient, i});
}

void check_sizes(int pipeline_stages, int micro_batches) {
  if (pipeline_stages < 1 || micro_batches < 1) {
    throw ConfigError(fmt::format(
        "pipeline schedule: {} stages and {} micro-batches; both must be at least 1", pipeline_stages,
        micro_batches));
  }
}

}  // namespace

std::vector<PipelineAction> pipeline_stage_actions(PipelineScheduleKind kind, int pipeline_stages,
                                                   int pipeline_stage, int micro_batches) {
  check_sizes(pipeline_stages, micro_batches);
  if (pipeline_stage < 0 || pipeline_stage >= pipeline_stages) {
    throw ConfigError(fmt::format("pipeline schedule: stage {} is outside [0, {}) ({} stages)",
                                  pipeline_stage, pipeline_stages, pipeline_stages));
  }
  const int p = pipeline_stages, s = pipeline_stage, m = micro_batches;
  std::vector<PipelineAction> out;
  out.reserve(static_cast<std::size_t>(6 * m));
  if (kind == PipelineScheduleKind::gpipe) {
    for (int i = 0; i < m; ++i) add_forward(out, p, s, i);
    for (int i = 0; i < m; ++i) add_backward(out, p, s, i);
    return out;
  }
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) add_forward(out, p, s, i);
  for (int k = 0; k < m - warmup; ++k) {
    add_forward(out, p, s, warmup + k);
    add_backward(out, p, s, k);
  }
  for (int k = m - warmup; k < m; ++k) add_backward(out, p, s, k);
  return out;
}

PipelineTable make_pipeline_table(PipelineScheduleKind kind, int pipeline_stages, int micro_batches) {
  check_sizes(pipeline_stages, micro_batches);
  PipelineTable t;
  t.kind = kind;
  t.pipeline_stages = pipeline_stages;
  t.micro_batches = micro_batches;
  for (int s = 0; s < pipeline_stages; ++s) {
    t.actions.push_back(pipeline_stage_actions(kind, pipeline_stages, s, micro_batches));
  }
  return t;
}

std::string to_string(const PipelineTable& table) {
  std::string out = fmt::format("{}: {} stage{}, {} micro-batch{}\n", to_string(table.kind),
                                table.pipeline_stages, table.pipeline_stages == 1 ? "" : "s", table.micro_batches,
                                table.micro_batches == 1 ? "" : "es");
  for (std::size_t s = 0; s < table.actions.size(); ++s) {
    out += fmt::format("stage {}:", s);
    for (std::size_t k = 0; k < table.actions[s].size(); ++k) {
      out += (k == 0 ? " " : " | ") + to_string(table.actions[s][k]);
    }
    out += '\n';
  }
  return out;
}

std::string compute_order(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) {
    if (a.op != PipelineOp::forward && a.op != PipelineOp::backward) continue;
    if (!out.empty()) out += ' ';
    out += fmt::format("{}{}", a.op == PipelineOp::forward ? 'F' : 'B', a.micro_batch);
  }
  return out;
}

int max_in_flight(const std::vector<PipelineAction>& actions) {
  int now = 0, peak = 0;
  for (const PipelineAction& a : actions) {
    if (a.op == PipelineOp::forward) peak = std::max(peak, ++now);
    if (a.op == PipelineOp::backward) --now;
  }
  return peak;
}

double PipelineSimulation::bubble_fraction() const {
  if (makespan <= 0 || idle.empty()) return 0.0;
  std::int64_t total = 0;
  for (std::int64_t x : idle) total += x;
  return static_cast<double>(total) / (static_cast<double>(makespan) * static_cast<double>(idle.size()));
}

namespace {

// One direction between neighbours: the messages sent so far (micro-batch,
// send time) and how many the receiver has taken.
struct Channel {
  std::vector<std::pair<int, std::int64_t>> sent;
  std::size_t taken = 0;
};

}  // namespace

PipelineSimulation simulate_pipeline(const PipelineTable& table, std::int64_t forward_time,
                                     std::int64_t backward_time) {
  ZS_CHECK(forward_time >= 0 && backward_time >= 0,
           "simulate_pipeline: forward time {} and backward time {} must be >= 0", forward_time,
           backward_time);
  const int p = table.pipeline_stages;
  ZS_CHECK(p >= 1 && static_cast<int>(table.actions.size()) == p,
           "simulate_pipeline: the table has {} stages but {} action lists", p, table.actions.size());
  const auto P = static_cast<std::size_t>(p);
  PipelineSimulation sim;
  sim.start.resize(P);
  sim.end.resize(P);
  for (std::size_t s = 0; s < P; ++s) {
    sim.start[s].assign(table.actions[s].size(), 0);
    sim.end[s].assign(table.actions[s].size(), 0);
  }
  // forward_ch[s]: activations from s to s + 1; backward_ch[s]: gradients from s + 1 to s.
  std::vector<Channel> forward_ch(P), backward_ch(P);
  std::vector<std::size_t> cursor(P, 0);
  std::vector<std::int64_t> clock(P, 0), busy(P, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t s = 0; s < P; ++s) {
      const auto& acts = table.actions[s];
      while (cursor[s] < acts.size()) {
        const PipelineAction a = acts[cursor[s]];
        const std::size_t k = cursor[s];
        std::int64_t t = clock[s];
        sim.start[s][k] = t;
        if (a.op == PipelineOp::forward || a.op == PipelineOp::backward) {
          const std::int64_t d = a.op == PipelineOp::forward ? forward_time : backward_time;
          t += d;
          busy[s] += d;
        } else {
          const bool activation =
              a.op == PipelineOp::recv_activation || a.op == PipelineOp::send_activation;
          const bool sending =
              a.op == PipelineOp::send_activation || a.op == PipelineOp::send_gradient;
          // The neighbour on the other end, and the channel between them.
          const int peer = static_cast<int>(s) + ((activation == sending) ? 1 : -1);
          ZS_CHECK(peer >= 0 && peer < p, "pipeline table: stage {} action {} ({}) has no neighbour stage {}", s,
                   k, to_string(a), peer);
          const std::size_t lower = std::min(s, static_cast<std::size_t>(peer));
          Channel& ch = activation ? forward_ch[lower] : backward_ch[lower];
          if (sending) {
            ch.sent.emplace_back(a.micro_batch, t);
          } else {
            if (ch.taken == ch.sent.size()) break;  // blocked: not sent yet
            const auto [mb, when] = ch.sent[ch.taken++];
            ZS_CHECK(mb == a.micro_batch,
                     "pipeline table: stage {} action {} ({}) receives message {} from stage {}, "
                     "which stage {} sent for micro-batch {}: sends and receives are out of order",
                     s, k, to_string(a), ch.taken, peer, peer, mb);
            t = std::max(t, when);
          }
        }
        sim.end[s][k] = t;
        clock[s] = t;
        ++cursor[s];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (std::size_t s = 0; s < P; ++s) {
    if (cursor[s] < table.actions[s].size()) {
      blocked += fmt::format("{}stage {} waits in action {} ({})", blocked.empty() ? "" : "; ", s,
                             cursor[s], to_string(table.actions[s][cursor[s]]));
    }
  }
  ZS_CHECK(blocked.empty(), "pipeline table ({}, {} stages, {} micro-batches) deadlocks: {}",
           to_string(table.kind), p, table.micro_batches, blocked);
  for (std::size_t s = 0; s + 1 < P; ++s) {
    ZS_CHECK(forward_ch[s].taken == forward_ch[s].sent.size() &&
                 backward_ch[s].taken == backward_ch[s].sent.size(),
             "pipeline table: between stages {} and {}, {} activations sent and {} received, {} "
             "gradients sent and {} received",
             s, s + 1, forward_ch[s].sent.size(), forward_ch[s].taken, backward_ch[s].sent.size(),
             backward_ch[s].taken);
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  sim.idle.resize(P);
  for (std::size_t s = 0; s < P; ++s) sim.idle[s] = sim.makespan - busy[s];
  return sim;
}

void validate_pipeline_table(const PipelineTable& table) {
  const int p = table.pipeline_stages, m = table.micro_batches;
  ZS_CHECK(p >= 1 && m >= 1 && static_cast<int>(table.actions.size()) == p,
           "pipeline table: {} stages, {} micro-batches and {} action lists", p, m,
           table.actions.size());
  constexpr int kOps = 6;
  for (int s = 0; s < p; ++s) {
    const auto& acts = table.actions[static_cast<std::size_t>(s)];
    // position[op][i]: index of the action (op, i), -1 if none.
    std::vector<std::vector<int>> position(kOps, std::vector<int>(static_cast<std::size_t>(m), -1));
    for (std::size_t k = 0; k < acts.size(); ++k) {
      const PipelineAction a = acts[k];
      ZS_CHECK(a.micro_batch >= 0 && a.micro_batch < m,
               "pipeline table: stage {} action {} ({}) names a micro-batch outside [0, {})", s, k,
               to_string(a), m);
      int& at = position[static_cast<std::size_t>(a.op)][static_cast<std::size_t>(a.micro_batch)];
      ZS_CHECK(at < 0, "pipeline table: stage {} runs {} twice (actions {} and {})", s, to_string(a),
               at, k);
      at = static_cast<int>(k);
    }
    const auto pos = [&](PipelineOp op, int i) {
      return position[static_cast<std::size_t>(op)][static_cast<std::size_t>(i)];
    };
    for (int i = 0; i < m; ++i) {
      const int f = pos(PipelineOp::forward, i), b = pos(PipelineOp::backward, i);
      ZS_CHECK(f >= 0 && b >= 0 && f < b,
               "pipeline table: stage {} must forward micro-batch {} once and then backward it "
               "once (forward at action {}, backward at {})",
               s, i, f, b);
      const auto need = [&](PipelineOp op, bool wanted, bool before, int anchor) {
        const int at = pos(op, i);
        if (!wanted) {
          ZS_CHECK(at < 0, "pipeline table: stage {} of {} has {} at action {}, which it has no "
                   "neighbour for", s, p, to_string(PipelineAction{op, i}), at);
          return;
        }
        ZS_CHECK(at >= 0 && (before ? at < anchor : at > anchor),
                 "pipeline table: stage {} needs {} exactly once, {} action {} (found at {})", s,
                 to_string(PipelineAction{op, i}), before ? "before" : "after", anchor, at);
      };
      need(PipelineOp::recv_activation, s > 0, true, f);
      need(PipelineOp::send_activation, s < p - 1, false, f);
      need(PipelineOp::recv_gradient, s < p - 1, true, b);
      need(PipelineOp::send_gradient, s > 0, false, b);
    }
    const std::size_t want = static_cast<std::size_t>(m) *
                             (2 + (s > 0 ? 2 : 0) + (s < p - 1 ? 2 : 0));
    ZS_CHECK(acts.size() == want, "pipeline table: stage {} has {} actions, expected {}", s,
             acts.size(), want);
  }
  simulate_pipeline(table, 1, 1);  // order of messages and deadlock
}

}  // namespace zeroshard
