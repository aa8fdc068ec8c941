#include "core/tracer.h"

#include <chrono>

namespace zeroshard {

const char* to_string(TraceThread thread) {
  switch (thread) {
    case TraceThread::loop: return "loop";
    case TraceThread::engine: return "engine";
    case TraceThread::comm: return "comm";
    case TraceThread::io: return "io";
  }
  return "?";
}

const char* to_string(TimeCategory category) {
  switch (category) {
    case TimeCategory::compute: return "compute";
    case TimeCategory::comm_wait: return "comm_wait";
    case TimeCategory::optimizer: return "optimizer";
    case TimeCategory::io_wait: return "io_wait";
    case TimeCategory::checkpoint: return "checkpoint";
    case TimeCategory::other: return "other";
  }
  return "?";
}

std::int64_t Tracer::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Tracer::set_spans(bool on) { spans_ = on; }

void Tracer::set_accounting(bool on, std::int64_t now) {
  accounting_ = on;
  accounted_thread_ = std::this_thread::get_id();
  stack_.clear();
  current_ = StepTimes{};
  last_ns_ = step_begin_ns_ = now;
}

void Tracer::open(TimeCategory category, std::int64_t now) {
  if (!accounting_on() || std::this_thread::get_id() != accounted_thread_) return;
  // Time since the last event belongs to the region that was innermost.
  charge(now);
  stack_.emplace_back(category, now);
}

// Charges [last event, now) to the innermost open region (other when none);
// compute time is also kept as intervals, merged when contiguous.
void Tracer::charge(std::int64_t now) {
  const TimeCategory top = stack_.empty() ? TimeCategory::other : stack_.back().first;
  current_[top] += now - last_ns_;
  if (top == TimeCategory::compute && now > last_ns_) {
    auto& iv = current_.compute_intervals;
    if (!iv.empty() && iv.back().second == last_ns_) {
      iv.back().second = now;
    } else {
      iv.emplace_back(last_ns_, now);
    }
  }
  last_ns_ = now;
}

void Tracer::close(std::int64_t now) {
  if (!accounting_on() || std::this_thread::get_id() != accounted_thread_ || stack_.empty()) return;
  charge(now);
  stack_.pop_back();
}

StepTimes Tracer::take_step(std::int64_t now) {
  if (!accounting_on()) return {};
  charge(now);
  StepTimes out = std::move(current_);
  out.wall_ns = now - step_begin_ns_;
  std::int64_t rest = 0;
  for (std::size_t c = 0; c < kTimeCategories; ++c) {
    if (static_cast<TimeCategory>(c) != TimeCategory::other) rest += out.ns[c];
  }
  out[TimeCategory::other] = out.wall_ns - rest;
  current_ = StepTimes{};
  step_begin_ns_ = now;
  return out;
}

void Tracer::add_span(TraceSpan span) {
  if (!spans_on()) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  spans_kept_.push_back(std::move(span));
}

void Tracer::add_counter(TraceCounter counter) {
  if (!spans_on()) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  counters_kept_.push_back(std::move(counter));
}

std::pair<std::vector<TraceSpan>, std::vector<TraceCounter>> Tracer::take_all() {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto out = std::make_pair(std::move(spans_kept_), std::move(counters_kept_));
  spans_kept_.clear();
  counters_kept_.clear();
  return out;
}

std::size_t Tracer::span_count() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return spans_kept_.size();
}

TraceScope::TraceScope(Tracer* tracer, const char* name, TraceThread thread, TimeCategory category,
                       std::string unit, std::uint64_t bytes)
    : TraceScope(tracer, name, thread, std::move(unit), bytes) {
  if (tracer_ == nullptr) return;
  accounted_ = true;
  tracer_->open(category, begin_ns_);
}

TraceScope::TraceScope(Tracer* tracer, const char* name, TraceThread thread, std::string unit,
                       std::uint64_t bytes) {
  if (tracer == nullptr || !tracer->active()) return;
  tracer_ = tracer;
  name_ = name;
  thread_ = thread;
  unit_ = std::move(unit);
  bytes_ = bytes;
  begin_ns_ = Tracer::now_ns();
}

void TraceScope::end() {
  if (tracer_ == nullptr) return;
  const std::int64_t end = Tracer::now_ns();
  if (accounted_) tracer_->close(end);
  if (tracer_->spans_on()) {
    tracer_->add_span(TraceSpan{name_, thread_, std::move(unit_), bytes_, begin_ns_, end, -1});
  }
  tracer_ = nullptr;
}

}  // namespace zeroshard
