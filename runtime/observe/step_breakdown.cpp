#include "runtime/observe/step_breakdown.h"

#include <algorithm>
#include <limits>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

const std::array<const char*, StepFigures::kFields>& StepFigures::names() {
  static const std::array<const char*, kFields> n = {"compute",    "comm_wait",    "optimizer",   "io_wait",
                                                     "checkpoint", "other",        "wall",        "hidden_comm",
                                                     "ps_push",    "ps_pull_wait", "ps_staleness"};
  return n;
}

std::array<double, StepFigures::kFields> StepFigures::as_array() const {
  return {compute, comm_wait,   optimizer, io_wait,      checkpoint,  other,
          wall,    hidden_comm, ps_push,   ps_pull_wait, ps_staleness};
}

StepFigures StepFigures::from_array(const std::array<double, kFields>& a) {
  return StepFigures{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]};
}

double StepFigures::overlap_fraction() const {
  const double total = hidden_comm + comm_wait;
  return total > 0 ? hidden_comm / total : 0.0;
}

namespace {

// Sorted, merged, non-empty intervals.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::erase_if(v, [](const Interval& i) { return i.second <= i.first; });
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

}  // namespace

std::int64_t overlap_ns(std::vector<Interval> a, std::vector<Interval> b) {
  const std::vector<Interval> x = merged(std::move(a)), y = merged(std::move(b));
  std::int64_t total = 0;
  std::size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const std::int64_t lo = std::max(x[i].first, y[j].first), hi = std::min(x[i].second, y[j].second);
    if (hi > lo) total += hi - lo;
    if (x[i].second < y[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

const FieldStats& BreakdownSummary::field(const std::string& name) const {
  const auto& n = StepFigures::names();
  for (std::size_t f = 0; f < n.size(); ++f) {
    if (name == n[f]) return fields[f];
  }
  throw InvariantError("step breakdown: no field \"" + name + "\"");
}

BreakdownSummary summarize(std::int64_t step, const std::vector<StepFigures>& per_rank) {
  if (per_rank.empty()) throw InvariantError("step breakdown: no ranks to summarize");
  BreakdownSummary s;
  s.step = step;
  for (std::size_t f = 0; f < StepFigures::kFields; ++f) {
    std::vector<double> v;
    FieldStats& st = s.fields[f];
    st.max = -std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      const double x = per_rank[r].as_array()[f];
      v.push_back(x);
      if (x > st.max) {
        st.max = x;
        st.max_rank = static_cast<int>(r);
      }
    }
    std::sort(v.begin(), v.end());
    st.min = v.front();
    const std::size_t n = v.size();
    st.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  s.slowest_rank = s.field("wall").max_rank;
  return s;
}

std::string format_breakdown(const BreakdownSummary& s) {
  std::string out = fmt::format("{:<30}{:>9}{:>9}{:>9}  {}\n", fmt::format("step {} breakdown, ms", s.step), "min",
                                "median", "max", "(rank of max)");
  const auto& n = StepFigures::names();
  const bool servers = s.field("ps_push").max > 0;
  for (std::size_t f = 0; f < n.size(); ++f) {
    const FieldStats& st = s.fields[f];
    const bool ps_row = std::string_view(n[f]).starts_with("ps_");
    if (ps_row && !servers) continue;
    const std::string label = std::string(n[f]) + (std::string_view(n[f]) == "ps_staleness" ? " (steps)" : "");
    out += fmt::format("  {:<28}{:>9.2f}{:>9.2f}{:>9.2f}  ({})\n", label, st.min, st.median, st.max, st.max_rank);
  }
  const double hidden = s.field("hidden_comm").median, exposed = s.field("comm_wait").median;
  out += fmt::format("  overlap (hidden / all comm, median rank) {:.2f}; slowest rank {}\n",
                     hidden + exposed > 0 ? hidden / (hidden + exposed) : 0.0, s.slowest_rank);
  return out;
}

StragglerStep analyze_arrivals(const std::vector<std::vector<std::int64_t>>& arrivals_ns) {
  if (arrivals_ns.empty()) throw InvariantError("straggler view: no ranks");
  const std::size_t ranks = arrivals_ns.size();
  StragglerStep s;
  s.late_ms.assign(ranks, 0.0);
  s.last_count.assign(ranks, 0);
  std::size_t k_min = arrivals_ns[0].size();
  for (const auto& a : arrivals_ns) {
    s.counts_differ |= a.size() != arrivals_ns[0].size();
    k_min = std::min(k_min, a.size());
  }
  s.collectives = static_cast<int>(k_min);
  if (ranks < 2) return s;
  for (std::size_t k = 0; k < k_min; ++k) {
    std::size_t last = 0;
    std::int64_t first_t = arrivals_ns[0][k];
    for (std::size_t r = 0; r < ranks; ++r) {
      if (arrivals_ns[r][k] > arrivals_ns[last][k]) last = r;
      first_t = std::min(first_t, arrivals_ns[r][k]);
    }
    const double late = static_cast<double>(arrivals_ns[last][k] - first_t) / 1e6;
    s.late_ms[last] += late;
    ++s.last_count[last];
    s.worst_ms = std::max(s.worst_ms, late);
  }
  if (k_min > 0) {
    s.straggler = static_cast<int>(std::max_element(s.late_ms.begin(), s.late_ms.end()) - s.late_ms.begin());
  }
  return s;
}

void StragglerTotals::add(const StragglerStep& step) {
  const std::size_t n = step.late_ms.size();
  late_ms.resize(std::max(late_ms.size(), n), 0.0);
  last_count.resize(late_ms.size(), 0);
  straggler_steps.resize(late_ms.size(), 0);
  for (std::size_t r = 0; r < n; ++r) {
    late_ms[r] += step.late_ms[r];
    last_count[r] += step.last_count[r];
  }
  if (step.straggler >= 0) ++straggler_steps[static_cast<std::size_t>(step.straggler)];
  ++steps;
}

std::string StragglerTotals::describe() const {
  std::vector<std::size_t> order(late_ms.size());
  for (std::size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return late_ms[a] > late_ms[b]; });
  std::string out;
  for (const std::size_t r : order) {
    if (late_ms[r] <= 0) continue;
    out += fmt::format("{}rank {} made the others wait {:.1f} ms over {} steps (straggler in {} of them, last at {} collectives)",
                       out.empty() ? "" : "; ", r, late_ms[r], steps, straggler_steps[r], last_count[r]);
  }
  return out.empty() ? "no rank made the others wait" : out;
}

std::string format_straggler(const StragglerStep& s) {
  if (s.straggler < 0) return "straggler: no collectives compared";
  const auto r = static_cast<std::size_t>(s.straggler);
  return fmt::format("straggler: rank {} arrived last at {} of {} collectives, {:.1f} ms late in all (worst {:.1f} ms){}",
                     r, s.last_count[r], s.collectives, s.late_ms[r], s.worst_ms,
                     s.counts_differ ? "; ranks issued different numbers of collectives" : "");
}

}  // namespace zeroshard
