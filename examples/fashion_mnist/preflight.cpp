#include "examples/fashion_mnist/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/durable_file.h"
#include "comm/collective_error.h"

namespace zeroshard::examples {

namespace fs = std::filesystem;

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;  // unknown: no limit
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

namespace {

double parameters(const std::vector<std::int64_t>& sizes) {
  double n = 0;
  for (std::size_t l = 1; l < sizes.size(); ++l) {
    n += static_cast<double>(sizes[l - 1]) * static_cast<double>(sizes[l]) + static_cast<double>(sizes[l]);
  }
  return n;
}

double units(const std::vector<std::int64_t>& sizes) {
  double n = 0;
  for (std::int64_t s : sizes) n += static_cast<double>(s);
  return n;
}

std::string gib(double bytes) { return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

double training_bytes_estimate(const std::vector<std::int64_t>& sizes, std::uint64_t max_batch) {
  return 16.0 * parameters(sizes) + 8.0 * static_cast<double>(max_batch) * units(sizes);
}

void check_model_fits(const std::vector<std::int64_t>& sizes, const std::string& hidden_text, std::uint64_t micro_batch,
                      std::uint64_t eval_batch, std::uint64_t memory_bytes) {
  const double memory = static_cast<double>(memory_bytes);
  const double state = 16.0 * parameters(sizes);
  const std::uint64_t batch = std::max(micro_batch, eval_batch);
  const double total = training_bytes_estimate(sizes, batch);
  if (total <= memory) return;
  if (state > memory) {
    throw ConfigError(fmt::format("--hidden \"{}\": the model would have {:.4g} parameters, {} of model state per "
                                  "rank (16 bytes each), more than this machine's {} of memory; use smaller widths",
                                  hidden_text, parameters(sizes), gib(state), gib(memory)));
  }
  throw ConfigError(fmt::format("train_micro_batch_size_per_gpu {}: {} samples per forward pass need {} of "
                                "activations ({} with the model state), more than this machine's {} of memory; "
                                "use a smaller micro-batch",
                                micro_batch, batch, gib(total - state), gib(total), gib(memory)));
}

void check_save_dir(Communicator& comm, const std::string& save_dir) {
  auto tagged = [&](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw IoError(fmt::format("--save-dir {}: cannot save checkpoints there: {}", save_dir, e.what()));
    }
  };
  run_agreed(comm, [&] {
    if (comm.rank() == 0) tagged([&] { fs::create_directories(save_dir); });
  });
  run_agreed(comm, [&] {
    tagged([&] {
      const std::string probe = fmt::format("{}/.probe-rank-{:05d}", save_dir, comm.rank());
      DurableFileWriter w(probe);
      w.write("probe\n", 6);
      w.finish();
      fs::remove(probe);
    });
  });
}

}  // namespace zeroshard::examples
