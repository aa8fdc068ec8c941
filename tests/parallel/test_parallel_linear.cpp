// ColumnParallelLinear and RowParallelLinear against the unsplit layer (an
// fp64 reference computed on every rank from the same seeded data), forward
// and backward (dX, dW, db), for every (dp, tp) factorisation of the world:
// tp = 1..world size, and at world 4 also 2 x 2, where each tensor-parallel
// group runs on its own data (seeded by its dp_rank). Odd sizes (1, 3, 7,
// 57, 257, 300) give uneven splits and, at tp = 4, ranks with empty slices.
// Values are checked with the bound of [Note: tensor-parallel test
// tolerance]; counts of bad elements are checked after every collective.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/mesh.h"
#include "core/error.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/partition.h"
#include "parallel/row_parallel_linear.h"
#include "parallel_test_util.h"

namespace zeroshard::parallel {
namespace {

using tptest::count_outside;
using tptest::random_floats;
using tptest::Ref;
using tptest::ref_cols;
using tptest::ref_rows;

struct LinearCase {
  std::size_t tokens, in, out;
  bool bias;
};

// tokens 0 (an empty batch) and sizes that tp = 2, 3, 4 split unevenly;
// out = 1 and in = 3 leave ranks without rows or columns at tp = 4.
const std::vector<LinearCase> kLinearCases = {
    {5, 7, 57, true}, {3, 57, 7, true}, {9, 300, 257, true}, {4, 257, 300, false},
    {0, 7, 57, true}, {6, 3, 1, true},  {1, 1, 2, true},
};

// The unsplit layer's data, the same on every rank of a tensor-parallel group.
struct LinearData {
  std::vector<float> x, w, b, dy, dw0, db0;
};

LinearData make_data(const LinearCase& c, std::uint32_t seed) {
  LinearData d;
  d.x = random_floats(c.tokens * c.in, seed + 1);
  d.w = random_floats(c.out * c.in, seed + 2, 0.5f);
  d.b = c.bias ? random_floats(c.out, seed + 3) : std::vector<float>{};
  d.dy = random_floats(c.tokens * c.out, seed + 4);
  // Gradients already present: backward must add to them.
  d.dw0 = random_floats(c.out * c.in, seed + 5, 0.25f);
  d.db0 = c.bias ? random_floats(c.out, seed + 6, 0.25f) : std::vector<float>{};
  return d;
}

// Y = X W^T + b, dX = dY W, dW = dW0 + dY^T X, db = db0 + sum_t dY, in fp64.
struct LinearRef {
  Ref y, dx, dw, db;
};

LinearRef reference(const LinearCase& c, const LinearData& d) {
  const std::size_t T = c.tokens, I = c.in, O = c.out;
  LinearRef r{Ref(T * O), Ref(T * I), Ref(O * I), Ref(c.bias ? O : 0)};
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t o = 0; o < O; ++o) {
      double s = c.bias ? d.b[o] : 0.0, m = c.bias ? std::fabs(d.b[o]) : 0.0;
      for (std::size_t i = 0; i < I; ++i) {
        const double p = static_cast<double>(d.x[t * I + i]) * d.w[o * I + i];
        s += p;
        m += std::fabs(p);
      }
      r.y.value[t * O + o] = s;
      r.y.mag[t * O + o] = m;
    }
    for (std::size_t i = 0; i < I; ++i) {
      double s = 0, m = 0;
      for (std::size_t o = 0; o < O; ++o) {
        const double p = static_cast<double>(d.dy[t * O + o]) * d.w[o * I + i];
        s += p;
        m += std::fabs(p);
      }
      r.dx.value[t * I + i] = s;
      r.dx.mag[t * I + i] = m;
    }
  }
  for (std::size_t o = 0; o < O; ++o) {
    for (std::size_t i = 0; i < I; ++i) {
      double s = d.dw0[o * I + i], m = std::fabs(d.dw0[o * I + i]);
      for (std::size_t t = 0; t < T; ++t) {
        const double p = static_cast<double>(d.dy[t * O + o]) * d.x[t * I + i];
        s += p;
        m += std::fabs(p);
      }
      r.dw.value[o * I + i] = s;
      r.dw.mag[o * I + i] = m;
    }
    if (c.bias) {
      double s = d.db0[o], m = std::fabs(d.db0[o]);
      for (std::size_t t = 0; t < T; ++t) {
        s += d.dy[t * O + o];
        m += std::fabs(d.dy[t * O + o]);
      }
      r.db.value[o] = s;
      r.db.mag[o] = m;
    }
  }
  return r;
}

std::vector<float> sub(const std::vector<float>& v, Slice s) {
  return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(s.begin),
                            v.begin() + static_cast<std::ptrdiff_t>(s.end()));
}

std::string label(const char* layer, const Mesh& mesh, const LinearCase& c) {
  return fmt::format("{} dp={} tp={} (dp_rank {} tp_rank {}) tokens={} in={} out={}{}", layer,
                     mesh.dp_size(), mesh.tp_size(), mesh.dp_rank(), mesh.tp_rank(), c.tokens,
                     c.in, c.out, c.bias ? "" : " no bias");
}

TEST_CASE("ColumnParallelLinear matches the unsplit layer, forward and backward") {
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    const std::size_t tp = static_cast<std::size_t>(shape.tp);
    for (std::size_t k = 0; k < kLinearCases.size(); ++k) {
      const LinearCase& c = kLinearCases[k];
      const std::string what = label("column", mesh, c);
      const auto seed = static_cast<std::uint32_t>(1000 * k + 100 * mesh.dp_rank());
      const LinearData d = make_data(c, seed);
      const LinearRef r = reference(c, d);

      ColumnParallelLinear lin(mesh.tp_group(), c.in, c.out, c.bias);
      const Slice s = lin.out_slice();
      CHECK(s == split_slice(c.out, shape.tp, mesh.tp_rank()));
      CHECK(lin.weight_elements() == s.size * c.in);
      CHECK(lin.bias_elements() == (c.bias ? s.size : 0));
      const std::vector<float> w = take_rows(d.w, c.out, c.in, s);
      const std::vector<float> b = c.bias ? sub(d.b, s) : std::vector<float>{};
      std::vector<float> y(c.tokens * s.size, -1.0f);
      lin.forward(d.x, c.tokens, w, b, y);

      const std::vector<float> dy = take_cols(d.dy, c.tokens, c.out, s);
      std::vector<float> dx(c.tokens * c.in, -1.0f);
      std::vector<float> dw = take_rows(d.dw0, c.out, c.in, s);
      std::vector<float> db = c.bias ? sub(d.db0, s) : std::vector<float>{};
      lin.backward(d.x, dy, c.tokens, w, dx, dw, db);

      CHECK(count_outside(y, ref_cols(r.y, c.tokens, c.out, s.begin, s.size), c.in + tp + 2,
                          what + " y") == 0);
      CHECK(count_outside(dx, r.dx, c.out + tp + 2, what + " dx") == 0);
      CHECK(count_outside(dw, ref_rows(r.dw, c.in, s.begin, s.size), c.tokens + tp + 2,
                          what + " dw") == 0);
      if (c.bias) {
        CHECK(count_outside(db, ref_rows(r.db, 1, s.begin, s.size), c.tokens + tp + 2,
                            what + " db") == 0);
      }
    }
  }
}

TEST_CASE("RowParallelLinear matches the unsplit layer, forward and backward") {
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    const std::size_t tp = static_cast<std::size_t>(shape.tp);
    for (std::size_t k = 0; k < kLinearCases.size(); ++k) {
      const LinearCase& c = kLinearCases[k];
      const std::string what = label("row", mesh, c);
      const auto seed = static_cast<std::uint32_t>(500 + 1000 * k + 100 * mesh.dp_rank());
      const LinearData d = make_data(c, seed);
      const LinearRef r = reference(c, d);

      RowParallelLinear lin(mesh.tp_group(), c.in, c.out, c.bias);
      const Slice s = lin.in_slice();
      CHECK(s == split_slice(c.in, shape.tp, mesh.tp_rank()));
      CHECK(lin.weight_elements() == c.out * s.size);
      CHECK(lin.bias_elements() == (c.bias ? c.out : 0));
      const std::vector<float> x = take_cols(d.x, c.tokens, c.in, s);
      const std::vector<float> w = take_cols(d.w, c.out, c.in, s);
      std::vector<float> y(c.tokens * c.out, -1.0f);
      lin.forward(x, c.tokens, w, d.b, y);

      std::vector<float> dx(c.tokens * s.size, -1.0f);
      std::vector<float> dw = take_cols(d.dw0, c.out, c.in, s);
      std::vector<float> db = d.db0;
      lin.backward(x, d.dy, c.tokens, w, dx, dw, db);

      CHECK(count_outside(y, r.y, c.in + tp + 2, what + " y") == 0);
      CHECK(count_outside(dx, ref_cols(r.dx, c.tokens, c.in, s.begin, s.size), c.out + tp + 2,
                          what + " dx") == 0);
      CHECK(count_outside(dw, ref_cols(r.dw, c.out, c.in, s.begin, s.size), c.tokens + tp + 2,
                          what + " dw") == 0);
      // The replicated bias gets the full gradient on every rank.
      if (c.bias) CHECK(count_outside(db, r.db, c.tokens + tp + 2, what + " db") == 0);
    }
  }
}

TEST_CASE("column-parallel then row-parallel (Megatron's MLP pairing) matches the unsplit pair") {
  // Y2 = (X W1^T + b1) W2^T + b2: the column layer's output slice is the row
  // layer's input slice, so only the row layer communicates in forward.
  const std::size_t T = 7, I = 57, H = 257, O = 7;
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    const auto seed = static_cast<std::uint32_t>(90000 + 100 * mesh.dp_rank());
    const std::vector<float> x = random_floats(T * I, seed + 1);
    const std::vector<float> w1 = random_floats(H * I, seed + 2, 0.5f);
    const std::vector<float> b1 = random_floats(H, seed + 3);
    const std::vector<float> w2 = random_floats(O * H, seed + 4, 0.5f);
    const std::vector<float> b2 = random_floats(O, seed + 5);

    ColumnParallelLinear fc1(mesh.tp_group(), I, H);
    RowParallelLinear fc2(mesh.tp_group(), H, O);
    CHECK(fc1.out_slice() == fc2.in_slice());
    const Slice s = fc1.out_slice();
    std::vector<float> h(T * s.size), y(T * O);
    fc1.forward(x, T, take_rows(w1, H, I, s), sub(b1, s), h);
    fc2.forward(h, T, take_cols(w2, O, H, s), b2, y);

    // Reference with magnitudes: |error of h| <= g1 * mag1 propagates into
    // y through |W2|, so mag2 = sum_j mag1 |W2| + |b2| covers both layers.
    Ref r(T * O);
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<double> hv(H), hm(H);
      for (std::size_t j = 0; j < H; ++j) {
        double v = b1[j], m = std::fabs(b1[j]);
        for (std::size_t i = 0; i < I; ++i) {
          v += static_cast<double>(x[t * I + i]) * w1[j * I + i];
          m += std::fabs(static_cast<double>(x[t * I + i]) * w1[j * I + i]);
        }
        hv[j] = v;
        hm[j] = m;
      }
      for (std::size_t o = 0; o < O; ++o) {
        double v = b2[o], m = std::fabs(b2[o]);
        for (std::size_t j = 0; j < H; ++j) {
          v += hv[j] * w2[o * H + j];
          m += hm[j] * std::fabs(w2[o * H + j]);
        }
        r.value[t * O + o] = v;
        r.mag[t * O + o] = m;
      }
    }
    const std::size_t tp = static_cast<std::size_t>(shape.tp);
    CHECK(count_outside(y, r, I + H + 2 * tp + 4,
                        fmt::format("mlp dp={} tp={}", shape.dp, shape.tp)) == 0);
  }
}

TEST_CASE("a granule keeps blocks of rows (columns) on one rank") {
  // 21 = 7 blocks of 3: tp = 4 gives 2, 2, 2, 1 blocks, i.e. 6, 6, 6, 3 rows.
  for (MeshShape shape : tptest::factorisations(tptest::world().world_size())) {
    Mesh mesh(tptest::world(), shape);
    const Slice blocks = split_slice(7, shape.tp, mesh.tp_rank());
    const Slice want{3 * blocks.begin, 3 * blocks.size};
    ColumnParallelLinear col(mesh.tp_group(), 5, 21, true, 3);
    RowParallelLinear row(mesh.tp_group(), 21, 5, true, 3);
    CHECK(col.out_slice() == want);
    CHECK(row.in_slice() == want);
    CHECK(col.weight_elements() == want.size * 5);
    CHECK(row.weight_elements() == 5 * want.size);
    // The layer computes the same Y on its block-aligned slice.
    const LinearCase c{4, 5, 21, true};
    const LinearData d = make_data(c, 777 + 100 * static_cast<std::uint32_t>(mesh.dp_rank()));
    const LinearRef r = reference(c, d);
    std::vector<float> y(c.tokens * want.size);
    col.forward(d.x, c.tokens, take_rows(d.w, 21, 5, want), sub(d.b, want), y);
    CHECK(count_outside(y, ref_cols(r.y, c.tokens, 21, want.begin, want.size),
                        5 + static_cast<std::size_t>(shape.tp) + 2, "granule y") == 0);
  }
  Communicator& w = tptest::world();
  CHECK_THROWS_AS(ColumnParallelLinear(w, 5, 21, true, 4), ConfigError);
  CHECK_THROWS_AS(ColumnParallelLinear(w, 5, 21, true, 0), ConfigError);
  CHECK_THROWS_AS(RowParallelLinear(w, 21, 5, true, 4), ConfigError);
}

TEST_CASE("parallel linear layers refuse a zero width and mismatched buffers") {
  Communicator& w = tptest::world();
  CHECK_THROWS_AS(ColumnParallelLinear(w, 0, 7), ConfigError);
  CHECK_THROWS_AS(ColumnParallelLinear(w, 7, 0), ConfigError);
  CHECK_THROWS_AS(RowParallelLinear(w, 0, 7), ConfigError);
  CHECK_THROWS_AS(RowParallelLinear(w, 7, 0), ConfigError);
  // Sizes are checked before any communication, on every rank alike.
  ColumnParallelLinear col(w, 7, 57);
  std::vector<float> x(2 * 7), wt(col.weight_elements()), b(col.bias_elements()),
      y(2 * col.local_out());
  std::vector<float> x_short(2 * 7 - 1);
  CHECK_THROWS_AS(col.forward(x_short, 2, wt, b, y), InvariantError);
  std::vector<float> b_long(col.bias_elements() + 1);
  CHECK_THROWS_AS(col.forward(x, 2, wt, b_long, y), InvariantError);
  RowParallelLinear row(w, 57, 7);
  std::vector<float> rx(2 * row.local_in()), rw(row.weight_elements()), rb(7), ry(2 * 7 + 1);
  CHECK_THROWS_AS(row.forward(rx, 2, rw, rb, ry), InvariantError);
}

}  // namespace
}  // namespace zeroshard::parallel
