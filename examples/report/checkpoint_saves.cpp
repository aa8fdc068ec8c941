// CheckpointSaves: see examples/report/checkpoint_saves.h.
#include "examples/report/checkpoint_saves.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

namespace zeroshard::examples {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

std::string CheckpointSaves::save(Engine& engine, const std::string& dir, const nlohmann::json& client, int keep_last,
                                  const std::string& tag_in) {
  async_ = engine.config().checkpoint.async;
  const auto t0 = std::chrono::steady_clock::now();
  std::string tag;
  if (async_) {
    if (engine.checkpoint_in_flight()) ++waited_;
    handles_.push_back(engine.save_checkpoint_async(dir, client, keep_last, tag_in));
    tag = handles_.back().tag();
  } else {
    tag = engine.save_checkpoint(dir, client, keep_last, tag_in);
  }
  stalls_.push_back(since(t0));
  last_dir_ = dir + "/" + tag;
  return tag;
}

void CheckpointSaves::step(bool writing, double seconds) {
  if (steps_seen_++ == 0) return;  // the first step: warm-up (allocations, page faults)
  (writing ? steps_writing_ : steps_other_).push_back(seconds);
}

void CheckpointSaves::finish(Engine& engine) {
  const auto t0 = std::chrono::steady_clock::now();
  engine.wait_for_checkpoints();
  final_wait_ = since(t0);
  for (const CheckpointHandle& h : handles_) writes_.push_back(h.write_seconds());
  bytes_ = 0;
  std::error_code ec;
  if (!last_dir_.empty()) {
    for (const auto& f : std::filesystem::recursive_directory_iterator(last_dir_, ec)) {
      if (f.is_regular_file(ec)) bytes_ += f.file_size(ec);
    }
  }
}

nlohmann::json CheckpointSaves::figures() const {
  return {{"async", async_},
          {"saves", stalls_.size()},
          {"stall_s", stalls_},
          {"saves_waiting", waited_},
          {"median_stall_s", median(stalls_)},
          {"median_write_s", median(writes_)},
          {"final_wait_s", final_wait_},
          {"checkpoint_bytes", bytes_},
          {"median_step_s_writing", median(steps_writing_)},
          {"steps_writing", steps_writing_.size()},
          {"median_step_s_other", median(steps_other_)}};
}

std::string CheckpointSaves::line(const nlohmann::json& f) {
  if (!f.is_object() || !f.contains("saves") || f.at("saves").get<std::size_t>() == 0) return "";
  const double other = f.at("median_step_s_other").get<double>();
  std::string out = fmt::format("checkpoints: {} {} saves of {} bytes, median stall {:.4f} s",
                                f.at("saves").get<std::size_t>(), f.at("async").get<bool>() ? "async" : "synchronous",
                                f.at("checkpoint_bytes").get<std::uint64_t>(), f.at("median_stall_s").get<double>());
  if (f.at("async").get<bool>()) {
    out += fmt::format(" (snapshot), background write {:.4f} s (rank 0)", f.at("median_write_s").get<double>());
    if (const auto waited = f.value("saves_waiting", std::size_t{0}); waited > 0) {
      out += fmt::format("; {} of the saves waited for the previous one's write", waited);
    }
    if (f.at("steps_writing").get<std::size_t>() > 0 && other > 0) {
      out += fmt::format("; steps during writes {:.4f} s (median of {}), {:.2f}x the others' {:.4f} s",
                         f.at("median_step_s_writing").get<double>(), f.at("steps_writing").get<std::size_t>(),
                         f.at("median_step_s_writing").get<double>() / other, other);
    }
  }
  return out + "\n";
}

}  // namespace zeroshard::examples
