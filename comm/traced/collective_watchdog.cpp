// The collective watchdog; see [Note: collective watchdog] in
// comm/traced/collective_watchdog.h.
#include "comm/traced/collective_watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/side_channel.h"
#include "core/error.h"
#include "core/tracer.h"

namespace zeroshard {

// One communicator's state; guarded by the registry's mutex.
struct CollectiveWatchdog::Slot::State {
  std::string name;
  std::int64_t timeout_ns = 0;
  double timeout_s = 0;
  // The collective the calling thread is blocked in (blocked_seq > 0).
  std::int64_t blocked_seq = 0;
  CollectiveFingerprint blocked_fp;
  std::int64_t blocked_since_ns = 0;
  // The last collective completed (done_seq > 0).
  std::int64_t done_seq = 0;
  CollectiveFingerprint done_fp;
  std::int64_t done_ns = 0;
  // The inner collective threw (failed_seq > 0).
  std::int64_t failed_seq = 0;
  CollectiveFingerprint failed_fp;
  std::string failed_what;
};

namespace {

using State = CollectiveWatchdog::Slot::State;
constexpr char kSep = '\x1f';
constexpr const char* kVersion = "zsw1";

// The process-wide watchdog: slots, side channel and thread. Never
// destroyed (the thread may still run during static destruction).
struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<State*> slots;
  std::unique_ptr<SideChannel> channel;
  std::thread thread;
  bool stop = false;
  bool error_pending = false;
  // The first failure, kept here too: its slot may be gone (the caller
  // caught the error and destroyed its communicator) before the thread reports.
  std::unique_ptr<State> failure;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), kSep, ' ');
  return s;
}

// Why this rank reports.
struct Trigger {
  const char* reason = nullptr;  // "timeout", "error", "peer"; null: none
  double timeout_s = 0;
};

// This rank's status, fields joined by kSep: version, reason, timeout in
// seconds, state kind ("in", "idle", "failed"), description. Caller holds mu.
std::string encode_status(const Registry& reg, const Trigger& trigger) {
  const State* failed = nullptr;
  const State* blocked = nullptr;
  const State* done = nullptr;
  if (reg.failure) failed = reg.failure.get();
  for (const State* s : reg.slots) {
    if (s->failed_seq > 0 && failed == nullptr) failed = s;
    if (s->blocked_seq > 0 && (blocked == nullptr || s->blocked_since_ns < blocked->blocked_since_ns)) {
      blocked = s;
    }
    if (s->done_seq > 0 && (done == nullptr || s->done_ns > done->done_ns)) done = s;
  }
  std::string kind;
  std::string text;
  std::string error;  // a sixth field: what the inner communicator threw
  if (failed != nullptr) {
    kind = "failed";
    text = describe(failed->failed_fp, failed->failed_seq, failed->name);
    error = one_line(failed->failed_what);
  } else if (blocked != nullptr) {
    kind = "in";
    text = describe(blocked->blocked_fp, blocked->blocked_seq, blocked->name);
  } else {
    kind = "idle";
    if (done != nullptr) text = describe(done->done_fp, done->done_seq, done->name);
  }
  return fmt::format("{}{}{}{}{:g}{}{}{}{}{}{}", kVersion, kSep, trigger.reason, kSep,
                     trigger.timeout_s, kSep, kind, kSep, text, kSep, error);
}

std::vector<std::string> split_fields(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == kSep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

// Checks the slots for a timeout or a failure. Caller holds mu.
Trigger check_slots(Registry& reg, std::int64_t now) {
  Trigger t;
  if (reg.failure) return Trigger{"error", reg.failure->timeout_s};
  for (const State* s : reg.slots) {
    if (s->blocked_seq > 0 && now - s->blocked_since_ns > s->timeout_ns && t.reason == nullptr) {
      t = Trigger{"timeout", s->timeout_s};
    }
  }
  return t;
}

// Sends this rank's status, gathers the others', prints (lowest rank heard
// from) and ends the job. Never returns.
[[noreturn]] void report(Registry& reg, Trigger trigger,
                         std::vector<std::pair<int, std::string>> arrived) {
  SideChannel& channel = *reg.channel;
  const int n = channel.world_size();
  const int me = channel.rank();
  std::string mine;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    mine = encode_status(reg, trigger);
  }
  channel.post_to_all(mine);
  std::vector<std::string> statuses(static_cast<std::size_t>(n));
  statuses[static_cast<std::size_t>(me)] = mine;
  int heard = 1;
  const auto take = [&](std::vector<std::pair<int, std::string>>& msgs) {
    for (auto& [from, text] : msgs) {
      if (from >= 0 && from < n && statuses[static_cast<std::size_t>(from)].empty()) {
        statuses[static_cast<std::size_t>(from)] = std::move(text);
        ++heard;
      }
    }
  };
  take(arrived);
  const auto deadline = std::chrono::steady_clock::now() + CollectiveWatchdog::kGracePeriod;
  while (heard < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto msgs = channel.poll();
    take(msgs);
  }
  int lowest = me;
  for (int r = 0; r < n; ++r) {
    if (!statuses[static_cast<std::size_t>(r)].empty()) {
      lowest = r;
      break;
    }
  }
  if (lowest == me) {
    const std::string text = CollectiveWatchdog::format_report(statuses) + "\n";
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(CollectiveWatchdog::kGracePeriod);
  }
  channel.abort(kWatchdogExitCode);
  std::_Exit(kWatchdogExitCode);  // not reached: abort() does not return
}

void run(Registry& reg) {
  std::unique_lock<std::mutex> lock(reg.mu);
  for (;;) {
    reg.cv.wait_for(lock, CollectiveWatchdog::kPollInterval,
                    [&] { return reg.stop || reg.error_pending; });
    const Trigger trigger = check_slots(reg, Tracer::now_ns());
    lock.unlock();
    std::vector<std::pair<int, std::string>> msgs = reg.channel->poll();
    if (trigger.reason != nullptr || !msgs.empty()) {
      Trigger t = trigger;
      if (t.reason == nullptr) t.reason = "peer";
      report(reg, t, std::move(msgs));
    }
    lock.lock();
    if (reg.stop) return;
  }
}

}  // namespace

CollectiveWatchdog::Slot::Slot(std::string name, double timeout_s) : state_(std::make_unique<State>()) {
  state_->name = std::move(name);
  state_->timeout_s = timeout_s;
  state_->timeout_ns = static_cast<std::int64_t>(timeout_s * 1e9);
}

CollectiveWatchdog::Slot::~Slot() {
  Registry& reg = registry();
  std::unique_lock<std::mutex> lock(reg.mu);
  std::erase(reg.slots, state_.get());
  if (!reg.slots.empty() || !reg.thread.joinable()) return;
  reg.stop = true;
  reg.cv.notify_all();
  lock.unlock();
  reg.thread.join();  // a report in progress never returns: the job ends
  lock.lock();
  reg.stop = false;
  reg.channel.reset();
}

void CollectiveWatchdog::Slot::begin_wait(std::int64_t seq, const CollectiveFingerprint& fp,
                                          std::int64_t now_ns) {
  std::lock_guard<std::mutex> lock(registry().mu);
  state_->blocked_seq = seq;
  state_->blocked_fp = fp;
  state_->blocked_since_ns = now_ns;
}

void CollectiveWatchdog::Slot::end_wait(std::int64_t seq) {
  std::lock_guard<std::mutex> lock(registry().mu);
  if (state_->blocked_seq == seq) state_->blocked_seq = 0;
}

void CollectiveWatchdog::Slot::completed(std::int64_t seq, const CollectiveFingerprint& fp,
                                         std::int64_t now_ns) {
  std::lock_guard<std::mutex> lock(registry().mu);
  // Point-to-point messages are numbered per peer, so a number alone may
  // name a collective and a message: the fingerprint tells them apart.
  if (state_->blocked_seq == seq && state_->blocked_fp == fp) state_->blocked_seq = 0;
  state_->done_seq = seq;
  state_->done_fp = fp;
  state_->done_ns = now_ns;
}

void CollectiveWatchdog::Slot::failed(std::int64_t seq, const CollectiveFingerprint& fp,
                                      const std::string& what) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (state_->blocked_seq == seq && state_->blocked_fp == fp) state_->blocked_seq = 0;
  if (state_->failed_seq == 0) {
    state_->failed_seq = seq;
    state_->failed_fp = fp;
    state_->failed_what = what;
  }
  if (!reg.failure) reg.failure = std::make_unique<State>(*state_);
  reg.error_pending = true;
  reg.cv.notify_all();
}

std::unique_ptr<CollectiveWatchdog::Slot> CollectiveWatchdog::watch(Communicator& comm,
                                                                    std::string name,
                                                                    double timeout_s) {
  ZS_CHECK(timeout_s > 0, "collective watchdog: timeout must be > 0 s, got {}", timeout_s);
  std::unique_ptr<Slot> slot(new Slot(std::move(name), timeout_s));
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  // Collective over the job, bounded by the timeout: a process that never
  // gets here is a hang like any other, reported (by every rank that
  // waited: there is no channel yet to choose one) and ending the job.
  if (!reg.channel) {
    try {
      reg.channel = comm.make_side_channel(timeout_s);
    } catch (const SideChannelTimeout& e) {
      // Staggered by rank (at most 5 s), so that the lowest waiting rank
      // reports and aborts first, and aborts do not come all at once
      // (several at once crashed Open MPI 4.1's mpirun).
      std::this_thread::sleep_for(std::min(e.world_rank(), 20) * std::chrono::milliseconds(250));
      std::fprintf(stderr, "%s\n", e.what());
      std::fflush(stderr);
      comm.abort(kWatchdogExitCode);
    }
  }
  if (!reg.thread.joinable()) reg.thread = std::thread([&reg] { run(reg); });
  reg.slots.push_back(slot->state_.get());
  return slot;
}

std::string CollectiveWatchdog::format_report(const std::vector<std::string>& statuses) {
  // Header from the most telling reason: a timeout, else an error.
  std::string header = "zeroshard: collective watchdog report";
  bool have_timeout = false;
  for (const std::string& s : statuses) {
    const auto f = split_fields(s);
    if (f.size() < 5 || f[0] != kVersion) continue;
    if (f[1] == "timeout" && !have_timeout) {
      header = fmt::format("zeroshard: collective timeout after {} s", f[2]);
      have_timeout = true;
    } else if (f[1] == "error" && !have_timeout) {
      header = "zeroshard: collective error";
    }
  }
  // Group ranks by (state kind, description), in order of their lowest rank.
  // Ranks that failed alike are one group; the error text of its lowest rank is quoted.
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<int>>> groups;
  std::vector<std::string> group_error;
  std::vector<int> unreachable;
  for (std::size_t r = 0; r < statuses.size(); ++r) {
    const auto f = split_fields(statuses[r]);
    if (statuses[r].empty() || f.size() < 5 || f[0] != kVersion) {
      unreachable.push_back(static_cast<int>(r));
      continue;
    }
    const std::pair<std::string, std::string> key{f[3], f[4]};
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {static_cast<int>(r)}});
      group_error.push_back(f.size() > 5 ? f[5] : std::string());
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  std::vector<std::string> parts;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& [key, ranks] = groups[g];
    const bool one = ranks.size() == 1;
    const std::string& text = key.second;
    if (key.first == "in") {
      parts.push_back(fmt::format("{} {} in {}", rank_list(ranks), one ? "is" : "are", text));
    } else if (key.first == "failed") {
      parts.push_back(fmt::format("{} failed in {}{}{}", rank_list(ranks), text, group_error[g].empty() ? "" : ": ",
                                  group_error[g]));
    } else {
      parts.push_back(fmt::format("{} {} in no collective (last completed: {})", rank_list(ranks),
                                  one ? "is" : "are", text.empty() ? "none" : text));
    }
  }
  if (!unreachable.empty()) parts.push_back(rank_list(unreachable) + " unreachable");
  std::string out = header + ": ";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += "; ";
    out += parts[i];
  }
  return out;
}

}  // namespace zeroshard
