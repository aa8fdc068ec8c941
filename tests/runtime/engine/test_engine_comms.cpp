// EngineComms (runtime/engine/engine_comms.h) alone, at world sizes 1-4:
//   - without a mesh: one wrapper when the host communicator is the device
//     one, two ("dp", "dp.host") when it is another; norm() is the host
//     wrapper, raw_world() the unwrapped host communicator, and the mesh
//     accessors are empty (tp 1 / 0, pp 1 / 0);
//   - on every dp x tp x pp factorisation of the world: the dp, world, tp
//     and pp wrappers over the mesh's groups (sizes and ranks as the
//     mesh's), norm() the world, raw_world() the unwrapped world, the mesh
//     position as the checkpoint folders need it;
//   - tracing: each collective advances its own wrapper's sequence number
//     and no other's; with records on, take_step_records returns every
//     wrapper's collectives but pp's, and dp's issue times as arrivals,
//     then nothing until the next collective; the comms log sees them;
//   - agreed_over_world: f()'s result on every rank, or on a mesh the same
//     AgreedError on every rank when one rank's f() throws.
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "comm/collective_error.h"
#include "comm/mesh.h"
#include "core/error.h"
#include "core/tracer.h"
#include "runtime/engine/engine_comms.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

std::vector<MeshShape> mesh_shapes(int n) {
  std::vector<MeshShape> out;
  for (int pp = 1; pp <= n; ++pp) {
    for (int tp = 1; tp * pp <= n; ++tp) {
      if (n % (pp * tp) == 0) out.push_back(MeshShape{n / (pp * tp), tp, pp});
    }
  }
  return out;
}

// The sequence numbers of every wrapper, in traced() order.
std::vector<std::int64_t> seqs(const EngineComms& c) {
  std::vector<std::int64_t> out;
  for (TracedCommunicator* t : c.traced()) out.push_back(t->last_seq());
  return out;
}

}  // namespace

TEST_CASE("EngineComms without a mesh: one wrapper when host is the device communicator") {
  Communicator& w = world();
  EngineComms c(w, w, nullptr, ObserveConfig{}, nullptr);
  REQUIRE(c.traced().size() == 1);
  CHECK(c.traced()[0]->name() == "dp");
  CHECK(&c.dp() == c.traced()[0]);
  CHECK(&c.host() == &c.dp());
  CHECK(&c.norm() == &c.host());
  CHECK(&c.raw_world() == &w);
  CHECK_FALSE(c.on_mesh());
  CHECK(c.world() == nullptr);
  CHECK(c.tp() == nullptr);
  CHECK(c.pp() == nullptr);
  CHECK(c.tp_size() == 1);
  CHECK(c.tp_rank() == 0);
  CHECK(c.pp_size() == 1);
  CHECK(c.pp_rank() == 0);
  const MeshPosition at = c.mesh_position();
  CHECK(at.dp == w.world_size());
  CHECK(at.tp == 1);
  CHECK(at.pp == 1);
  CHECK(c.log() == nullptr);
  // A collective on dp numbers dp's wrapper: the host is the same one.
  double x = 1.0;
  c.host().all_reduce(&x, 1, DType::f64, ReduceOp::sum);
  CHECK(x == w.world_size());
  CHECK(seqs(c) == std::vector<std::int64_t>{1});
  // f() as is, without a mesh.
  CHECK(c.agreed_over_world([] { return 7; }) == 7);
  CHECK_THROWS_AS(c.agreed_over_world([]() -> int { throw IoError("local"); }), IoError);
}

TEST_CASE("EngineComms without a mesh: a separate host communicator gets its own wrapper") {
  Communicator& w = world();
  const std::unique_ptr<Communicator> host = w.split(0, w.rank());  // the same ranks, another communicator
  EngineComms c(w, *host, nullptr, ObserveConfig{}, nullptr);
  REQUIRE(c.traced().size() == 2);
  CHECK(c.traced()[0]->name() == "dp");
  CHECK(c.traced()[1]->name() == "dp.host");
  CHECK(&c.host() == c.traced()[1]);
  CHECK(&c.host() != &c.dp());
  CHECK(&c.norm() == &c.host());
  CHECK(&c.raw_world() == host.get());
  // Each collective advances its own wrapper only.
  double x = 1.0;
  c.dp().all_reduce(&x, 1, DType::f64, ReduceOp::sum);
  CHECK(seqs(c) == std::vector<std::int64_t>{1, 0});
  c.host().all_reduce(&x, 1, DType::f64, ReduceOp::sum);
  c.host().broadcast(&x, 1, DType::f64, 0);
  CHECK(seqs(c) == std::vector<std::int64_t>{1, 2});
  CHECK(x == static_cast<double>(w.world_size()) * w.world_size());
}

TEST_CASE("EngineComms on every mesh of the world: wrappers over the mesh's groups") {
  Communicator& w = world();
  for (MeshShape shape : mesh_shapes(w.world_size())) {
    CAPTURE(shape.dp);
    CAPTURE(shape.tp);
    CAPTURE(shape.pp);
    Mesh mesh(w, shape);
    EngineComms c(mesh.dp_group(), mesh.dp_group(), &mesh, ObserveConfig{}, nullptr);
    REQUIRE(c.traced().size() == 4);
    CHECK(c.traced()[0]->name() == "dp");
    CHECK(c.traced()[1]->name() == "world");
    CHECK(c.traced()[2]->name() == "tp");
    CHECK(c.traced()[3]->name() == "pp");
    CHECK(c.on_mesh());
    CHECK(&c.norm() == c.world());
    CHECK(&c.raw_world() == &mesh.world());
    CHECK(c.dp().world_size() == shape.dp);
    CHECK(c.tp_size() == shape.tp);
    CHECK(c.tp_rank() == mesh.tp_rank());
    CHECK(c.pp_size() == shape.pp);
    CHECK(c.pp_rank() == mesh.pp_rank());
    const MeshPosition at = c.mesh_position();
    CHECK(at.dp == shape.dp);
    CHECK(at.tp == shape.tp);
    CHECK(at.tp_rank == mesh.tp_rank());
    CHECK(at.pp == shape.pp);
    CHECK(at.pp_rank == mesh.pp_rank());
    // The tp group sums its own ranks: one per tp rank.
    double one = 1.0;
    c.tp()->all_reduce(&one, 1, DType::f64, ReduceOp::sum);
    CHECK(one == shape.tp);
    double all = 1.0;
    c.norm().all_reduce(&all, 1, DType::f64, ReduceOp::sum);
    CHECK(all == w.world_size());
    CHECK(seqs(c) == std::vector<std::int64_t>{0, 1, 1, 0});

    // On a mesh a failure of one rank is every rank's.
    CHECK(c.agreed_over_world([] { return 3; }) == 3);
    bool agreed = false;
    try {
      c.agreed_over_world([&]() -> int {
        if (w.rank() == w.world_size() - 1) throw IoError("disk full on the last rank");
        return 0;
      });
    } catch (const AgreedIoError& e) {
      agreed = std::string(e.what()).find("disk full on the last rank") != std::string::npos;
    }
    CHECK(agreed);
  }
}

TEST_CASE("EngineComms with records on: the step's collectives, pp left out, and the comms log") {
  Communicator& w = world();
  ObserveConfig observe;
  observe.wall_clock_breakdown = true;  // records on
  observe.comms_logger.enabled = true;
  Tracer tracer;
  for (MeshShape shape : mesh_shapes(w.world_size())) {
    CAPTURE(shape.tp);
    CAPTURE(shape.pp);
    Mesh mesh(w, shape);
    EngineComms c(mesh.dp_group(), mesh.dp_group(), &mesh, observe, &tracer);
    REQUIRE(c.log() != nullptr);
    float v[3] = {1, 2, 3};
    c.dp().all_reduce(v, 3, DType::f32, ReduceOp::sum);
    c.dp().all_reduce(v, 3, DType::f32, ReduceOp::sum);
    c.world()->barrier();
    c.tp()->barrier();
    c.pp()->barrier();
    std::vector<Interval> intervals;
    std::vector<std::int64_t> arrivals;
    c.take_step_records(intervals, arrivals);
    CHECK(intervals.size() == 4);  // dp x 2, world, tp; not pp
    CHECK(arrivals.size() == 2);   // dp's
    for (const Interval& i : intervals) CHECK(i.first <= i.second);
    intervals.clear();
    arrivals.clear();
    c.take_step_records(intervals, arrivals);
    CHECK(intervals.empty());
    CHECK(arrivals.empty());
    // forget_records drops what came before.
    c.dp().barrier();
    c.forget_records();
    c.take_step_records(intervals, arrivals);
    CHECK(intervals.empty());
    std::uint64_t logged = 0;
    for (const CommsLogRow& r : c.log()->rows()) logged += r.count;
    CHECK(logged == 6);  // every wrapper's collectives, pp's barrier included
  }
}
