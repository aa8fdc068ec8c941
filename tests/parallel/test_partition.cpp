// split_slice ([Note: uneven split] in parallel/partition.h) and the
// take_rows / take_cols helpers; no communication.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "core/error.h"
#include "parallel/partition.h"

namespace zeroshard::parallel {
namespace {

TEST_CASE("split_slice: the first n % p parts hold one more, contiguous, covering [0, n)") {
  for (std::size_t n : {0u, 1u, 3u, 7u, 57u, 257u, 10001u}) {
    for (int p = 1; p <= 5; ++p) {
      std::size_t next = 0;
      for (int i = 0; i < p; ++i) {
        const Slice s = split_slice(n, p, i);
        CHECK(s.begin == next);
        const std::size_t want = n / p + (static_cast<std::size_t>(i) < n % p ? 1 : 0);
        CHECK(s.size == want);
        next = s.end();
      }
      CHECK(next == n);
    }
  }
  CHECK(split_slice(7, 4, 0) == Slice{0, 2});
  CHECK(split_slice(7, 4, 3) == Slice{6, 1});
  CHECK(split_slice(1, 4, 2) == Slice{1, 0});
  CHECK_THROWS_AS(split_slice(7, 0, 0), ConfigError);
  CHECK_THROWS_AS(split_slice(7, 3, 3), ConfigError);
  CHECK_THROWS_AS(split_slice(7, 3, -1), ConfigError);
}

TEST_CASE("take_rows / take_cols cut a slice of a row-major matrix") {
  // [3, 4] with element (i, j) = 10 i + j.
  std::vector<float> m;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) m.push_back(static_cast<float>(10 * i + j));
  CHECK(take_rows(m, 3, 4, Slice{1, 2}) ==
        std::vector<float>{10, 11, 12, 13, 20, 21, 22, 23});
  CHECK(take_cols(m, 3, 4, Slice{1, 2}) == std::vector<float>{1, 2, 11, 12, 21, 22});
  CHECK(take_cols(m, 3, 4, Slice{4, 0}).empty());
  CHECK_THROWS_AS(take_rows(m, 3, 4, Slice{2, 2}), InvariantError);
  CHECK_THROWS_AS(take_cols(m, 3, 4, Slice{3, 2}), InvariantError);
  CHECK_THROWS_AS(take_rows(m, 4, 4, Slice{0, 1}), InvariantError);
}

}  // namespace
}  // namespace zeroshard::parallel
