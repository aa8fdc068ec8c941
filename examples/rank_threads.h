// How many threads each rank's element-wise kernels use when ranks share a
// node's cores (the example programs). Header-only.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kernels/cpu/thread_pool.h"

namespace zeroshard::examples {

/// Gives the kernels' thread pool (kernels/cpu/thread_pool.h) this rank's
/// share of the node's hardware threads: max(1, hardware threads /
/// local_ranks), unless ZS_NUM_THREADS sets the count. With more ranks than
/// cores, a second thread per rank only wakes to wait for a core (4 ranks
/// on 2 cores: the small GPT at stage 3 ran at 1.07-1.12x the tokens/s
/// with one thread; torchrun sets OMP_NUM_THREADS=1 for the same reason).
/// Call before the first kernel runs. Thread safety: as
/// kernels::set_num_threads.
inline void share_cores_among_ranks(int local_ranks) {
  const char* env = std::getenv("ZS_NUM_THREADS");
  if (env != nullptr && *env != '\0') return;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_num_threads(std::max(1, hw / std::max(1, local_ranks)));
}

}  // namespace zeroshard::examples
