#include "runtime/observe/step_observer.h"

#include <algorithm>
#include <ostream>

namespace zeroshard {

StepObserver::StepObserver(const ObserveConfig& config, std::int64_t steps_per_print)
    : config_(config), steps_per_print_(std::max<std::int64_t>(1, steps_per_print)) {
  tracer_.set_spans(config_.trace);
  tracer_.set_accounting(config_.records());
}

void StepObserver::start(Communicator& gather_comm, std::int64_t offset_ns, std::int64_t bound_ns,
                         std::int64_t origin_ns) {
  comm_ = &gather_comm;
  offset_ns_ = offset_ns;
  bound_ns_ = bound_ns;
  origin_ns_ = origin_ns;
}

void StepObserver::note_parameter_server(double push_s_total, double wait_s_total, std::int64_t staleness) {
  ps_push_s_ = push_s_total;
  ps_wait_s_ = wait_s_total;
  ps_staleness_ = staleness;
  if (tracer_.spans_on()) {
    tracer_.add_counter(
        TraceCounter{"parameter server", Tracer::now_ns(), {{"staleness (steps)", static_cast<double>(staleness)}}});
  }
}

void StepObserver::end_step(std::int64_t step, const std::vector<Interval>& collectives,
                            const std::vector<std::int64_t>& arrivals_ns, std::ostream& out) {
  if (!gathering()) return;
  const StepTimes t = tracer_.take_step(Tracer::now_ns());
  if (comm_ == nullptr) return;
  const auto ms = [](std::int64_t ns) { return static_cast<double>(ns) / 1e6; };
  StepFigures f;
  f.compute = ms(t[TimeCategory::compute]);
  f.comm_wait = ms(t[TimeCategory::comm_wait]);
  f.optimizer = ms(t[TimeCategory::optimizer]);
  f.io_wait = ms(t[TimeCategory::io_wait]);
  f.checkpoint = ms(t[TimeCategory::checkpoint]);
  f.other = ms(t[TimeCategory::other]);
  f.wall = ms(t.wall_ns);
  f.hidden_comm = ms(overlap_ns(collectives, t.compute_intervals));
  f.ps_push = (ps_push_s_ - ps_push_taken_s_) * 1e3;
  f.ps_pull_wait = (ps_wait_s_ - ps_wait_taken_s_) * 1e3;
  f.ps_staleness = static_cast<double>(ps_staleness_);
  ps_push_taken_s_ = ps_push_s_;
  ps_wait_taken_s_ = ps_wait_s_;
  last_ = f;

  // Figures plus this rank's collective count, from every rank.
  const int n = comm_->world_size();
  std::vector<double> mine(StepFigures::kFields + 1);
  const auto a = f.as_array();
  std::copy(a.begin(), a.end(), mine.begin());
  mine.back() = static_cast<double>(arrivals_ns.size());
  std::vector<double> all(mine.size() * static_cast<std::size_t>(n));
  comm_->all_gather(mine.data(), all.data(), mine.size(), DType::f64);
  std::vector<StepFigures> per_rank(static_cast<std::size_t>(n));
  std::size_t k_max = 0;
  sums_.resize(per_rank.size());
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    std::array<double, StepFigures::kFields> v{};
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()), v.size(), v.begin());
    per_rank[r] = StepFigures::from_array(v);
    for (std::size_t i = 0; i < v.size(); ++i) sums_[r][i] += v[i];
    k_max = std::max(k_max, static_cast<std::size_t>(all[r * mine.size() + StepFigures::kFields]));
  }
  ++gathered_steps_;

  // Arrivals on rank 0's clock, relative to the origin (ms fit a double
  // exactly enough); ranks with fewer collectives pad with NaN.
  std::vector<double> arr(k_max + 1, -1.0);
  arr[0] = static_cast<double>(arrivals_ns.size());
  for (std::size_t k = 0; k < arrivals_ns.size(); ++k) {
    arr[k + 1] = static_cast<double>(arrivals_ns[k] + offset_ns_ - origin_ns_);
  }
  std::vector<double> arr_all(arr.size() * static_cast<std::size_t>(n));
  comm_->all_gather(arr.data(), arr_all.data(), arr.size(), DType::f64);
  std::vector<std::vector<std::int64_t>> arrivals(per_rank.size());
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const double* p = arr_all.data() + r * arr.size();
    const auto count = static_cast<std::size_t>(p[0]);
    for (std::size_t k = 0; k < count; ++k) arrivals[r].push_back(static_cast<std::int64_t>(p[k + 1]));
  }
  const StragglerStep st = analyze_arrivals(arrivals);
  straggler_.add(st);
  const BreakdownSummary s = summarize(step, per_rank);
  summaries_.assign(1, s);
  if (config_.wall_clock_breakdown && comm_->rank() == 0 && step % steps_per_print_ == 0) {
    out << format_breakdown(s) << "  " << format_straggler(st) << '\n';
    out.flush();
  }
}

std::vector<StepFigures> StepObserver::mean_per_rank() const {
  std::vector<StepFigures> out;
  for (const auto& s : sums_) {
    std::array<double, StepFigures::kFields> m{};
    for (std::size_t i = 0; i < m.size(); ++i) {
      m[i] = gathered_steps_ > 0 ? s[i] / static_cast<double>(gathered_steps_) : 0.0;
    }
    out.push_back(StepFigures::from_array(m));
  }
  return out;
}

nlohmann::json StepObserver::report() const {
  nlohmann::json j;
  j["steps"] = gathered_steps_;
  nlohmann::json ranks = nlohmann::json::array();
  double hidden = 0, exposed = 0, slowest_wall = -1;
  int slowest = 0, r = 0;
  for (const StepFigures& f : mean_per_rank()) {
    nlohmann::json row;
    const auto a = f.as_array();
    for (std::size_t i = 0; i < a.size(); ++i) row[StepFigures::names()[i]] = a[i];
    ranks.push_back(row);
    hidden += f.hidden_comm;
    exposed += f.comm_wait;
    if (f.wall > slowest_wall) {
      slowest_wall = f.wall;
      slowest = r;
    }
    ++r;
  }
  j["per_rank_mean_ms"] = ranks;
  j["overlap_fraction"] = hidden + exposed > 0 ? hidden / (hidden + exposed) : 0.0;
  j["slowest_rank"] = slowest;
  j["straggler"] = {{"late_ms", straggler_.late_ms},
                    {"last_count", straggler_.last_count},
                    {"straggler_steps", straggler_.straggler_steps},
                    {"text", straggler_.describe()}};
  j["clock"] = {{"offset_ns", offset_ns_}, {"bound_ns", bound_ns_}};
  return j;
}

}  // namespace zeroshard
