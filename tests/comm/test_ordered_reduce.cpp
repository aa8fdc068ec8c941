// The rank-ordered reduce-scatter and all-reduce (comm/ordered_reduce.h)
// and the all-to-all under them, over make_world_communicator() at world
// sizes 1-4, counts 0, 1, 7, 57 and 10001: results compared bit for bit with
// a reference that adds the ranks' contributions left to right. The
// contributions mix magnitudes (1 and 1e-4 on alternate ranks, random
// mantissas) so that another summation order gives other bits; a check that
// the reversed order differs somewhere makes sure the data can tell.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "comm/ordered_reduce.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace zeroshard {
namespace {

using test::world;

// Rank r's contribution to element i (of the full buffer), exact in dtype t.
double contribution(DType t, int r, std::size_t i) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(r + 1) + i);
  const double mag = r % 2 == 0 ? 1.0 : 1e-4;
  const double v = mag * (std::uniform_real_distribution<double>(-1.0, 1.0)(rng));
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::bf16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::f16: return f16_to_float(float_to_f16(static_cast<float>(v)));
    case DType::f64: return v;
    case DType::u8: break;  // not a reduction dtype
  }
  return v;
}

// Raw bits of the sum over ranks `order` of element i, added left to right in
// dtype t (16-bit: rounded after every add, [Note: 16-bit reductions]).
std::uint64_t sum_bits(DType t, const std::vector<int>& order, std::size_t i) {
  switch (t) {
    case DType::f32: {
      float acc = static_cast<float>(contribution(t, order[0], i));
      for (std::size_t k = 1; k < order.size(); ++k) acc = acc + static_cast<float>(contribution(t, order[k], i));
      return float_bits(acc);
    }
    case DType::f64: {
      double acc = contribution(t, order[0], i);
      for (std::size_t k = 1; k < order.size(); ++k) acc = acc + contribution(t, order[k], i);
      std::uint64_t b;
      std::memcpy(&b, &acc, 8);
      return b;
    }
    case DType::bf16: {
      std::uint16_t acc = float_to_bf16(static_cast<float>(contribution(t, order[0], i)));
      for (std::size_t k = 1; k < order.size(); ++k) {
        acc = float_to_bf16(bf16_to_float(acc) + static_cast<float>(contribution(t, order[k], i)));
      }
      return acc;
    }
    case DType::f16: {
      std::uint16_t acc = float_to_f16(static_cast<float>(contribution(t, order[0], i)));
      for (std::size_t k = 1; k < order.size(); ++k) {
        acc = float_to_f16(f16_to_float(acc) + static_cast<float>(contribution(t, order[k], i)));
      }
      return acc;
    }
    case DType::u8: break;  // not a reduction dtype
  }
  return 0;
}

std::uint64_t bits_at(DType t, const test::Bytes& b, std::size_t i) {
  std::uint64_t v = 0;
  std::memcpy(&v, b.data() + i * dtype_size(t), dtype_size(t));
  return v;
}

void fill_contributions(DType t, test::Bytes& b, int rank, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) test::put(t, b.data(), i, contribution(t, rank, i));
}

std::vector<int> rank_order(int n, bool reversed) {
  std::vector<int> o(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) o[static_cast<std::size_t>(r)] = reversed ? n - 1 - r : r;
  return o;
}

const DType kReduceTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("all_to_all: block j of recv is rank j's block rank()") {
  Communicator& c = world();
  const std::size_t world_n = static_cast<std::size_t>(c.world_size());
  for (std::size_t count : test::kCounts) {
    CAPTURE(count);
    std::vector<float> send(count * world_n), recv(count * world_n, -1.0f);
    // Element k of the block for rank d: 1e6 * from + 1e3 * to + k (exact in fp32 for small k).
    for (std::size_t d = 0; d < world_n; ++d) {
      for (std::size_t k = 0; k < count; ++k) {
        send[d * count + k] = static_cast<float>(1e6 * c.rank() + 1e3 * static_cast<double>(d) + (k % 997));
      }
    }
    c.iall_to_all(send.data(), recv.data(), count, DType::f32).wait();
    std::size_t wrong = 0;
    for (std::size_t j = 0; j < world_n; ++j) {
      for (std::size_t k = 0; k < count; ++k) {
        const float want = static_cast<float>(1e6 * static_cast<double>(j) + 1e3 * c.rank() + (k % 997));
        wrong += recv[j * count + k] != want;
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("all_to_all refuses overlapping send and recv") {
  Communicator& c = world();
  std::vector<float> buf(8 * static_cast<std::size_t>(c.world_size()));
  CHECK_THROWS_AS(c.iall_to_all(buf.data(), buf.data() + 1, 4, DType::f32), InvariantError);
}

TEST_CASE("ordered reduce_scatter: every element is rank 0 + rank 1 + ... left to right, bitwise") {
  Communicator& c = world();
  const int n = c.world_size();
  const std::size_t world_n = static_cast<std::size_t>(n);
  std::size_t order_matters = 0;
  for (DType t : kReduceTypes) {
    for (std::size_t count : test::kCounts) {
      for (const bool recv_in_scratch : {false, true}) {
        const std::string dtype_s(dtype_name(t));
        CAPTURE(dtype_s);
        CAPTURE(count);
        CAPTURE(recv_in_scratch);
        // The full buffer has world * count elements; block r is rank r's part.
        test::Bytes send = test::make_bytes(t, count * world_n);
        fill_contributions(t, send, c.rank(), count * world_n);
        test::Bytes scratch = test::make_bytes(t, count * world_n), recv = test::make_bytes(t, count);
        void* out = recv_in_scratch ? scratch.data() : recv.data();
        OrderedReduction red =
            OrderedReduction::reduce_scatter(c, send.data(), scratch.data(), out, count, t, host_block_sum());
        test::poll_until_done(red);
        CHECK(!red.pending());
        const test::Bytes& got = recv_in_scratch ? scratch : recv;
        std::size_t wrong = 0;
        for (std::size_t k = 0; k < count; ++k) {
          const std::size_t i = static_cast<std::size_t>(c.rank()) * count + k;
          wrong += bits_at(t, got, k) != sum_bits(t, rank_order(n, false), i);
          order_matters += sum_bits(t, rank_order(n, false), i) != sum_bits(t, rank_order(n, true), i);
        }
        CHECK(wrong == 0);
      }
    }
  }
  // At 3 ranks and more the data must tell the orders apart somewhere.
  double seen = static_cast<double>(order_matters);
  c.all_reduce(&seen, 1, DType::f64, ReduceOp::sum);
  if (n >= 3) CHECK(seen > 0);
}

TEST_CASE("ordered all_reduce: every rank gets the rank-order sum of every element, bitwise") {
  Communicator& c = world();
  const int n = c.world_size();
  const std::size_t world_n = static_cast<std::size_t>(n);
  for (DType t : kReduceTypes) {
    for (std::size_t count : test::kCounts) {
      const std::string dtype_s(dtype_name(t));
      CAPTURE(dtype_s);
      CAPTURE(count);
      // count elements padded to world blocks; the padding holds garbage
      // that must not leak into the real elements.
      const std::size_t block = (count + world_n - 1) / world_n, total = block * world_n;
      test::Bytes buf = test::make_bytes(t, total, 0x3c);
      fill_contributions(t, buf, c.rank(), count);
      test::Bytes scratch = test::make_bytes(t, total);
      OrderedReduction red = OrderedReduction::all_reduce(c, buf.data(), scratch.data(), block, t, host_block_sum());
      CHECK(!red.test());  // never moves past the all-to-all by itself
      red.advance();
      CHECK(red.summed());
      red.wait();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += bits_at(t, buf, i) != sum_bits(t, rank_order(n, false), i);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("ordered reductions: in flight together, completed in issue order") {
  // Two all-reduces and a reduce-scatter outstanding at once, as the
  // gradient buckets keep them: the all-gathers are posted by advance() in
  // the same order on every rank.
  Communicator& c = world();
  const std::size_t world_n = static_cast<std::size_t>(c.world_size());
  const std::size_t block = 57;
  std::vector<float> a(block * world_n), b(block * world_n), sa(a.size()), sb(b.size()), rs(block * world_n),
      rsx(block * world_n);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(contribution(DType::f32, c.rank(), i));
    b[i] = static_cast<float>(contribution(DType::f32, c.rank(), i + 7));
    rs[i] = a[i];
  }
  OrderedReduction ra = OrderedReduction::all_reduce(c, a.data(), sa.data(), block, DType::f32, host_block_sum());
  OrderedReduction rb = OrderedReduction::all_reduce(c, b.data(), sb.data(), block, DType::f32, host_block_sum());
  OrderedReduction rr =
      OrderedReduction::reduce_scatter(c, rs.data(), rsx.data(), rsx.data(), block, DType::f32, host_block_sum());
  ra.advance();
  rb.advance();
  rr.wait();
  rb.wait();
  ra.wait();
  std::size_t wrong = 0;
  const auto order = rank_order(c.world_size(), false);
  for (std::size_t i = 0; i < a.size(); ++i) {
    wrong += float_bits(a[i]) != sum_bits(DType::f32, order, i);
    wrong += float_bits(b[i]) != sum_bits(DType::f32, order, i + 7);
  }
  for (std::size_t k = 0; k < block; ++k) {
    wrong += float_bits(rsx[k]) != sum_bits(DType::f32, order, static_cast<std::size_t>(c.rank()) * block + k);
  }
  CHECK(wrong == 0);
}

}  // namespace zeroshard
