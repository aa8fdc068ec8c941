// Muon owner assignment ([Note: Muon owner assignment]): deterministic,
// every matrix owned once, the most loaded rank within one matrix's cost of
// the ideal, at world sizes 1-5 over GPT-like and random shapes; a small
// case by hand; bad input refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/error.h"
#include "optimizer/muon_owners.h"

using namespace zeroshard;

TEST_CASE("muon owners: by hand, 4 matrices on 2 ranks") {
  // Costs 8x8x8 = 512, 4x16x4 = 256, 16x4x4 = 256, 2x2x2 = 8.
  const std::vector<MuonMatrix> m = {{4, 16}, {8, 8}, {2, 2}, {16, 4}};
  CHECK(newton_schulz_cost(m[0]) == 256);
  CHECK(newton_schulz_cost(m[1]) == 512);
  // 512 -> rank 0; 256 (index 0) -> rank 1; 256 (index 3) -> rank 1 (256 < 512); 8 -> rank 0 (512 = 512, lower rank).
  CHECK(assign_muon_owners(m, 2) == std::vector<int>{1, 0, 0, 1});
  CHECK(assign_muon_owners(m, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(assign_muon_owners({}, 3).empty());
}

TEST_CASE("muon owners: deterministic and within one matrix's cost of the ideal") {
  std::mt19937_64 rng(11);
  std::vector<MuonMatrix> gpt;  // 12 blocks: c_attn 3D x D, c_proj D x D, c_fc 4D x D, mlp c_proj D x 4D
  for (int b = 0; b < 12; ++b) {
    gpt.push_back({384, 128});
    gpt.push_back({128, 128});
    gpt.push_back({512, 128});
    gpt.push_back({128, 512});
  }
  std::vector<MuonMatrix> random;
  for (int i = 0; i < 57; ++i) random.push_back({1 + rng() % 300, 1 + rng() % 300});
  for (const auto* set : {&gpt, &random}) {
    for (int n = 1; n <= 5; ++n) {
      CAPTURE(n);
      const auto owners = assign_muon_owners(*set, n);
      CHECK(owners == assign_muon_owners(*set, n));
      std::vector<std::uint64_t> load(static_cast<std::size_t>(n), 0);
      std::uint64_t total = 0, largest = 0;
      for (std::size_t i = 0; i < set->size(); ++i) {
        REQUIRE(owners[i] >= 0);
        REQUIRE(owners[i] < n);
        const std::uint64_t c = newton_schulz_cost((*set)[i]);
        load[static_cast<std::size_t>(owners[i])] += c;
        total += c;
        largest = std::max(largest, c);
      }
      const double ideal = static_cast<double>(total) / n;
      CHECK(static_cast<double>(*std::max_element(load.begin(), load.end())) <= ideal + static_cast<double>(largest));
    }
  }
}

TEST_CASE("muon owners: a zero dimension, an overflowing cost or world size 0 is refused") {
  CHECK_THROWS_AS(newton_schulz_cost({0, 5}), InvariantError);
  CHECK_THROWS_AS(newton_schulz_cost({std::size_t{1} << 32, std::size_t{1} << 32}), InvariantError);
  CHECK_THROWS_AS(assign_muon_owners({{2, 2}}, 0), InvariantError);
}
