// ReduceOrder: see runtime/engine/reduce_order.h, [Note: reduce order check].
#include "runtime/engine/reduce_order.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zeroshard {

namespace {

// Reductions shown before and after the first difference.
constexpr std::size_t kBefore = 2, kAfter = 4;

// Rank r's units [a, b) of `all` (world rows of `width`), by name, with "..."
// where the micro-batch [lo, hi) goes on beyond the window.
std::string window(const std::vector<double>& all, std::size_t width, int r, std::size_t lo, std::size_t a,
                   std::size_t b, std::size_t hi, const FlatLayout& layout) {
  std::vector<std::string> names;
  if (a > lo) names.emplace_back("...");
  for (std::size_t k = a; k < b; ++k) {
    const double u = all[static_cast<std::size_t>(r) * width + k];
    if (u < 0) break;  // this rank reduced fewer units
    names.push_back(fmt::format("\"{}\"", layout.unit(static_cast<UnitId>(u)).name));
  }
  if (b < hi) names.emplace_back("...");
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::string ReduceOrder::mismatch_message(Communicator& dp, const FlatLayout& layout, std::int64_t step) const {
  const int world = dp.world_size();
  const auto ranks = static_cast<std::size_t>(world);
  const double mine = static_cast<double>(calls_.size());
  std::vector<double> counts(ranks);
  dp.all_gather(&mine, counts.data(), 1, DType::f64);
  const auto width = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end()));
  std::vector<double> row(width, -1.0), all(width * ranks);
  std::copy(calls_.begin(), calls_.end(), row.begin());
  if (width > 0) dp.all_gather(row.data(), all.data(), width, DType::f64);

  // Rank 0's order is the reference: the first differing rank and place.
  std::vector<int> differ;
  int first = -1;
  std::size_t at = width;
  for (int r = 1; r < world; ++r) {
    for (std::size_t k = 0; k < width; ++k) {
      if (all[static_cast<std::size_t>(r) * width + k] != all[k]) {
        differ.push_back(r);
        if (first < 0) {
          first = r;
          at = k;
        }
        break;
      }
    }
  }
  if (first < 0) return "";
  // The micro-batch of position `at` (every rank ends as many micro-batches
  // with as many reductions each: every unit once).
  std::size_t m = 0, lo = 0;
  while (m < micro_batch_ends_.size() && micro_batch_ends_[m] <= at) lo = micro_batch_ends_[m++];
  const std::size_t hi = m < micro_batch_ends_.size() ? micro_batch_ends_[m] : width;
  const std::size_t a = std::max(lo, at >= kBefore ? at - kBefore : 0), b = std::min(hi, at + kAfter + 1);
  return fmt::format(
      "reduce_gradients order differs between data-parallel ranks in step {}, micro-batch {}: from its "
      "reduction {} of that micro-batch on, rank 0 reduced units {} and rank {} reduced {} (ranks whose order "
      "differs from rank 0's: {}); a reduction sums the gradients the ranks packed in the same place, so they "
      "would have summed different units: every rank must call reduce_gradients for its units in the same order "
      "(or leave them to step(), which reduces in unit order). No parameter was updated",
      step, m + 1, at - lo + 1, window(all, width, 0, lo, a, b, hi, layout), first,
      window(all, width, first, lo, a, b, hi, layout), fmt::join(differ, ", "));
}

}  // namespace zeroshard
