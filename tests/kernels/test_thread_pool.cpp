// The kernels' persistent thread pool: chunking, concurrency, thread count
// configuration, and results that do not depend on the thread count.
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernels/cpu/grad_check.h"
#include "kernels/cpu/thread_pool.h"
#include "kernel_test_util.h"

using namespace zeroshard;
using namespace zeroshard::kernels;

TEST_CASE("parallel_for covers [0, n) once, in aligned contiguous chunks") {
  for (const int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (const std::size_t n : {1, 63, 64, 65, 1000, 100000, 1000003}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<std::atomic<int>> hits(n);
      std::vector<std::pair<std::size_t, std::size_t>> ranges(static_cast<std::size_t>(threads));
      std::atomic<int> calls{0};
      pool.parallel_for(n, 64, 1000, [&](std::size_t c, std::size_t b, std::size_t e) {
        ranges[c] = {b, e};
        calls.fetch_add(1);
        for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      const std::size_t chunks = pool.chunk_count(n, 1000);
      CHECK(calls.load() == static_cast<int>(chunks));
      for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i].load() == 1);
      for (std::size_t c = 0; c + 1 < chunks; ++c) {
        CHECK(ranges[c].second == ranges[c + 1].first);
        CHECK(ranges[c].second % 64 == 0);
      }
    }
  }
}

TEST_CASE("concurrent and nested callers all complete with correct results") {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  const auto work = [&] {
    for (int rep = 0; rep < 200; ++rep) {
      std::atomic<long> sum{0};
      pool.parallel_for(50000, 64, 1000, [&](std::size_t, std::size_t b, std::size_t e) {
        long s = 0;
        for (std::size_t i = b; i < e; ++i) s += static_cast<long>(i);
        // Nested use runs inline (the pool is busy) and must not deadlock.
        pool.parallel_for(10, 1, 1, [&](std::size_t, std::size_t, std::size_t) {});
        sum.fetch_add(s);
      });
      if (sum.load() == 50000L * 49999L / 2) total.fetch_add(1);
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  CHECK(total.load() == 400);
}

TEST_CASE("thread count: set_num_threads, ZS_NUM_THREADS, and resize") {
  set_num_threads(3);
  CHECK(num_threads() == 3);
  set_num_threads(1);
  CHECK(num_threads() == 1);
  ::setenv("ZS_NUM_THREADS", "2", 1);
  CHECK(default_num_threads() == 2);
  set_num_threads(0);
  CHECK(num_threads() == 2);
  for (const char* bad : {"0", "-1", "two", "3x", "100000"}) {
    ::setenv("ZS_NUM_THREADS", bad, 1);
    CHECK_THROWS_AS(default_num_threads(), ConfigError);
  }
  ::unsetenv("ZS_NUM_THREADS");
  CHECK(default_num_threads() >= 1);
  set_num_threads(0);
}

TEST_CASE("the sum of squares is the same bits for 1 to 4 threads") {
  const auto x = testing::test_floats(1234567, 9, 4.0f, 0);
  std::vector<double> sums;
  for (const int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    sums.push_back(check_gradients(x.data(), DType::f32, x.size(), 0.5f).sum_of_squares);
  }
  set_num_threads(0);
  const double ref =
      grad_check_reference(const_cast<float*>(x.data()), DType::f32, x.size(), 0.5f, false)
          .sum_of_squares;
  for (const double s : sums) testing::check_bitwise(&s, &ref, 1, "sum_of_squares", false);
}
