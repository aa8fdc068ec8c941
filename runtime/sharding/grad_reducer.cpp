// GradReducer: bucketed gradient reduction and post-step all-gather; see
// runtime/sharding/grad_reducer.h, [Note: gradient buckets].
#include "runtime/sharding/grad_reducer.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

std::byte* elem(void* p, std::size_t i, DType t) { return static_cast<std::byte*>(p) + i * dtype_size(t); }

}  // namespace

std::uint64_t error_feedback_bytes(const FlatLayout& layout, const GradReducerOptions& options) {
  if (!options.quantized || !options.error_feedback || options.stage < 2 || layout.world_size() <= 1) return 0;
  return static_cast<std::uint64_t>(layout.total_padded()) * sizeof(float);
}

namespace {

// Why a node layout cannot carry qgZ ("" when it can): nodes of one size,
// rank r on node r / ranks_per_node.
std::string layout_problem(const NodeGroups& g, int world) {
  if (static_cast<int>(g.node_of_rank.size()) != world) return "no host of every rank";
  const int per_node = world / g.num_nodes;
  if (per_node * g.num_nodes != world) {
    return fmt::format("{} ranks do not split evenly over {} nodes", world, g.num_nodes);
  }
  for (int r = 0; r < world; ++r) {
    if (g.node_of_rank[static_cast<std::size_t>(r)] != r / per_node) {
      return fmt::format("the ranks are not placed node by node (rank {} is on node {}, not {})", r,
                         g.node_of_rank[static_cast<std::size_t>(r)], r / per_node);
    }
  }
  return "";
}

}  // namespace

GradReducer::GradReducer(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
                         GradReducerOptions options, GradTarget& target, const NodeGroups* nodes)
    : comm_(comm), layout_(layout), ops_(ops), pool_(pool), o_(options), target_(target),
      micro_(layout.units().size()) {
  ZS_CHECK(layout.world_size() == comm.world_size(), "GradReducer: layout for {} ranks, communicator of {}",
           layout.world_size(), comm.world_size());
  ZS_CHECK(o_.stage >= 0 && o_.stage <= 3, "GradReducer: stage {}", o_.stage);
  ZS_CHECK(o_.reduce_bucket_size > 0 && o_.allgather_bucket_size > 0, "GradReducer: bucket sizes must be > 0");
  if (!o_.quantized || o_.stage < 2) return;
  kernels::check_sym_quant_format(*o_.quantized, "GradReducer");
  const int world = comm.world_size();
  const std::string format = fmt::format("{} blocks of {}", kernels::quant_bits_name(o_.quantized->bits),
                                         o_.quantized->block);
  if (world == 1) {
    note_ = "qgZ: world size 1, nothing to reduce: gradients stay as they are";
    return;
  }
  ZS_CHECK(nodes != nullptr && nodes->local && nodes->cross, "GradReducer: qgZ needs the node groups");
  const std::string problem = layout_problem(*nodes, world);
  if (!problem.empty()) {
    note_ = fmt::format("qgZ: {}: gradients use the plain reduce-scatter", problem);
    return;
  }
  hierarchical_ = true;
  nodes_ = NodeLayout{.local = nodes->local.get(), .cross = nodes->cross.get(), .nodes = nodes->num_nodes,
                      .ranks_per_node = world / nodes->num_nodes};
  note_ = fmt::format("qgZ: {} nodes x {} ranks, {} all-to-all inside the nodes, then across{}", nodes_.nodes,
                      nodes_.ranks_per_node, format, o_.error_feedback ? ", with error feedback" : "");
  if (!o_.error_feedback) return;
  residual_.resize(layout.units().size());
  for (std::size_t u = 0; u < residual_.size(); ++u) {
    residual_[u] = pool_.acquire(layout.units()[u].padded, DType::f32, true, MemCategory::residual);
  }
}

float* GradReducer::residual(UnitId u) {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < micro_.size(), "unknown unit id {}", u);
  return residual_.empty() ? nullptr : residual_[static_cast<std::size_t>(u)].as<float>();
}

void GradReducer::reset_residuals() {
  for (PoolLease& l : residual_) ops_.zero(l.data(), l.numel() * sizeof(float));
}

// qgZ: b's reduce-scatter of `send` (world blocks of b.fill) into b.recv
// (fp32), with each piece's error-feedback residual gathered into the
// bucket's shape and back (a whole-unit bucket uses the unit's own).
void GradReducer::start_quantized(Bucket& b, const void* send) {
  const std::size_t world = static_cast<std::size_t>(comm_.world_size());
  b.recv = pool_.acquire(b.fill, DType::f32, false);
  float* residual = nullptr;
  PoolLease shaped;
  const BucketPiece& first = b.pieces.front();
  const bool whole = b.pieces.size() == 1 && first.offset == 0 && first.n == layout_.unit(first.unit).shard;
  if (!residual_.empty() && whole) {
    residual = this->residual(first.unit);
  } else if (!residual_.empty()) {
    shaped = pool_.acquire(world * b.fill, DType::f32, false);
    residual = shaped.as<float>();
    for (const BucketPiece& p : b.pieces) {
      const std::size_t shard = layout_.unit(p.unit).shard;
      for (std::size_t r = 0; r < world; ++r) {
        ops_.move(residual + r * b.fill + p.pos, this->residual(p.unit) + r * shard + p.offset, p.n * sizeof(float));
      }
    }
  }
  b.quantized = QuantizedReduceScatter::start(nodes_, ops_, pool_, send, bucket_dtype(b), b.fill, *o_.quantized,
                                              residual, b.recv.as<float>());
  if (!shaped.valid()) return;
  for (const BucketPiece& p : b.pieces) {
    const std::size_t shard = layout_.unit(p.unit).shard;
    for (std::size_t r = 0; r < world; ++r) {
      ops_.move(this->residual(p.unit) + r * shard + p.offset, residual + r * b.fill + p.pos, p.n * sizeof(float));
    }
  }
}

// dst[0..n) = src[0..n) converted from src_type to dst_type, times scale,
// on the compute device (a plain copy when nothing changes: bitwise what a
// cast gives).
void GradReducer::convert(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) {
  if (n == 0) return;
  if (dst_type == src_type && scale == 1.0f) {
    ops_.move(dst, src, n * dtype_size(dst_type));
  } else {
    ops_.cast(dst, dst_type, src, src_type, n, scale);
  }
}

// Most elements a bucket of `kind` holds (per rank block for reduce-scatter
// and all-gather): the configured size (divided among the ranks for the
// blocked kinds, at least 1), but never more than the whole model needs.
std::size_t GradReducer::capacity(BucketKind kind) const {
  std::size_t total = 0;
  for (const UnitInfo& u : layout_.units()) total += kind == BucketKind::all_reduce ? u.padded : u.shard;
  const std::size_t configured = kind == BucketKind::all_gather ? o_.allgather_bucket_size : o_.reduce_bucket_size;
  const std::size_t world = static_cast<std::size_t>(comm_.world_size());
  const std::size_t per = kind == BucketKind::all_reduce ? configured : std::max<std::size_t>(1, configured / world);
  const std::size_t c = std::max<std::size_t>(1, std::min(per, total));
  // A rank-ordered all-reduce cuts its bucket into world blocks: a whole
  // bucket (reduced in place in a gradient buffer) must divide evenly.
  if (kind == BucketKind::all_reduce && ordered()) return std::max(world, c / world * world);
  return c;
}

BlockSum GradReducer::block_sum() {
  DeviceOps& ops = ops_;
  return [&ops](void* dst, const void* src, std::size_t blocks, std::size_t count, DType dtype) {
    ops.sum_blocks(dst, src, blocks, count, dtype);
  };
}

// Dtype a bucket's buffers hold: gradients travel in the communication
// dtype, parameters in the compute dtype.
DType GradReducer::bucket_dtype(const Bucket& b) const {
  return b.kind == BucketKind::all_gather ? o_.compute_dtype : o_.comm_dtype;
}

// Makes b an empty packed bucket of `kind` with a send buffer for `capacity`
// elements per block.
void GradReducer::open_packed(Bucket& b, BucketKind kind, std::size_t capacity) {
  b = Bucket{};
  b.kind = kind;
  b.capacity = capacity;
  const std::size_t blocks = kind == BucketKind::reduce_scatter ? static_cast<std::size_t>(comm_.world_size()) : 1;
  b.send = pool_.acquire(blocks * capacity, bucket_dtype(b), false);
}

// Starts b's collective over its `fill` elements (per block).
void GradReducer::start_collective(Bucket& b) {
  // One rank: its buffer already is the sum and the gathered whole (every
  // path below would only copy it, bitwise unchanged: a sum of one block
  // is the block). finish_collective reads the result from `send`.
  if (comm_.world_size() == 1) return;
  const DType t = bucket_dtype(b);
  // The bucket's units name its collectives in logs and traces.
  if (!b.pieces.empty()) {
    std::string label = layout_.unit(b.pieces.front().unit).name;
    if (b.pieces.back().unit != b.pieces.front().unit) label += ".." + layout_.unit(b.pieces.back().unit).name;
    comm_.set_label(std::move(label));
  }
  const std::size_t world = static_cast<std::size_t>(comm_.world_size());
  switch (b.kind) {
    case BucketKind::all_reduce: {
      void* buf = b.in_place != nullptr ? b.in_place : b.send.data();
      if (!ordered()) {
        b.work = comm_.iall_reduce(buf, b.fill, t, ReduceOp::sum);
        break;
      }
      // world blocks; the zeroed padding (packed buckets only: a whole
      // in-place bucket divides evenly) is summed only with padding.
      const std::size_t padded = (b.fill + world - 1) / world * world;
      if (padded > b.fill) ops_.zero(elem(buf, b.fill, t), (padded - b.fill) * dtype_size(t));
      b.scratch = pool_.acquire(padded, t, false);
      b.ordered = OrderedReduction::all_reduce(comm_, buf, b.scratch.data(), padded / world, t, block_sum());
      break;
    }
    case BucketKind::reduce_scatter:
      if (b.in_place == nullptr && b.fill < b.capacity) {
        // Blocks were packed at stride `capacity`: close the gaps (left moves, in rank order).
        for (std::size_t r = 1; r < world; ++r) {
          ops_.move(elem(b.send.data(), r * b.fill, t), elem(b.send.data(), r * b.capacity, t),
                    b.fill * dtype_size(t));
        }
      }
      if (hierarchical_) {
        start_quantized(b, b.send.data());
        break;
      }
      if (!ordered()) {
        b.recv = pool_.acquire(b.fill, t, false);
        b.work = comm_.ireduce_scatter(b.send.data(), b.recv.data(), b.fill, t, ReduceOp::sum);
        break;
      }
      // recv receives the world blocks; their rank-ordered sum replaces block 0.
      b.recv = pool_.acquire(world * b.fill, t, false);
      b.ordered = OrderedReduction::reduce_scatter(comm_, b.send.data(), b.recv.data(), b.recv.data(), b.fill, t,
                                                   block_sum());
      break;
    case BucketKind::all_gather:
      if (b.in_place != nullptr) {
        const std::size_t n = b.pieces[0].n;
        b.work = comm_.iall_gather(elem(b.in_place, static_cast<std::size_t>(comm_.rank()) * n, t), b.in_place, n, t);
      } else {
        b.recv = pool_.acquire(world * b.fill, t, false);
        b.work = comm_.iall_gather(b.send.data(), b.recv.data(), b.fill, t);
      }
      break;
  }
}

// Waits for b's collective and moves its results where they belong.
void GradReducer::finish_collective(Bucket& b) {
  b.work.wait();
  b.ordered.wait();
  b.quantized.wait();
  const DType t = bucket_dtype(b);
  // Where the collective left its result (at world size 1 none ran: `send`).
  const PoolLease& result = b.recv.valid() ? b.recv : b.send;
  switch (b.kind) {
    case BucketKind::all_reduce:
      for (const BucketPiece& p : b.pieces) {
        void* dst = elem(target_.full_grad(p.unit), p.offset, o_.grad_dtype);
        const void* src = b.in_place != nullptr ? dst : b.send.at(p.pos);
        if (b.in_place == nullptr || o_.stored_scale != 1.0f) {
          convert(dst, o_.grad_dtype, src, t, p.n, o_.stored_scale);
        }
      }
      break;
    case BucketKind::reduce_scatter:
      // The sum is in the bucket's dtype, or fp32 from qgZ.
      for (const BucketPiece& p : b.pieces) {
        target_.accumulate_shard(p.unit, p.offset, result.at(p.pos), result.dtype(), p.n, o_.stored_scale);
      }
      break;
    case BucketKind::all_gather:
      if (b.in_place != nullptr) break;
      for (const BucketPiece& p : b.pieces) {
        const UnitInfo& info = layout_.unit(p.unit);
        void* dst = gather_dst_[static_cast<std::size_t>(p.unit)];
        for (std::size_t r = 0; r < static_cast<std::size_t>(comm_.world_size()); ++r) {
          ops_.move(elem(dst, r * info.shard + p.offset, t), result.at(r * b.fill + p.pos), p.n * dtype_size(t));
        }
      }
      break;
  }
  b.send.release();
  b.recv.release();
  b.scratch.release();
}

// Starts `b` (moved into `flight`); with overlap, retires finished buckets
// and keeps at most kMaxBucketsInFlight; without, completes it now.
void GradReducer::launch(Bucket& b, std::deque<Bucket>& flight) {
  flight.push_back(std::move(b));
  b = Bucket{};
  start_collective(flight.back());
  // Earlier rank-ordered all-reduces post their all-gathers now, at the
  // same point on every rank ([Note: gradient buckets]).
  for (std::size_t i = 0; i + 1 < flight.size(); ++i) {
    if (flight[i].kind == BucketKind::all_reduce) flight[i].ordered.advance();
    if (flight[i].kind == BucketKind::reduce_scatter) flight[i].quantized.advance();
  }
  // With overlap a bucket is retired only when kMaxBucketsInFlight newer
  // ones are in flight (or in complete()), never because a test succeeded:
  // the leases, hence the ledger's peak, follow the call sequence alone,
  // the same on every rank and in every run, which the memory estimate
  // replays (runtime/plan/memory_estimate.h). The oldest bucket is still tested
  // here, which drives the backend's progress.
  if (o_.overlap && !flight.empty()) {
    flight.front().work.test();
    flight.front().ordered.test();
    flight.front().quantized.test();
  }
  while (!flight.empty() && (!o_.overlap || flight.size() > kMaxBucketsInFlight)) {
    finish_collective(flight.front());
    flight.pop_front();
  }
}

void GradReducer::drain(std::deque<Bucket>& flight) {
  while (!flight.empty()) {
    finish_collective(flight.front());
    flight.pop_front();
  }
}

// Stages 0/1: unit u's padded full gradient, in runs of the bucket.
void GradReducer::pack_all_reduce(UnitId u) {
  const std::size_t padded = layout_.unit(u).padded, cap = capacity(BucketKind::all_reduce);
  const DType ct = o_.comm_dtype, dt = o_.grad_dtype;
  void* grads = target_.full_grad(u);
  for (std::size_t a = 0; a < padded;) {
    if (ct == dt) {
      // Already in the communication dtype: reduce it where it is, a
      // bucket's worth at a time (padded and cap are multiples of the world
      // size, so is every run): no copy in, none out.
      const std::size_t n = std::min(cap, padded - a);
      Bucket b;
      b.kind = BucketKind::all_reduce;
      b.capacity = b.fill = n;
      b.in_place = elem(grads, a, dt);
      b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = 0});
      a += n;
      launch(b, in_flight_);
      continue;
    }
    Bucket& b = open_;
    if (b.pieces.empty()) open_packed(b, BucketKind::all_reduce, cap);
    const std::size_t n = std::min(b.capacity - b.fill, padded - a);
    convert(b.send.at(b.fill), ct, elem(grads, a, dt), dt, n);
    b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
    b.fill += n;
    a += n;
    if (b.fill == b.capacity) launch(b, in_flight_);
  }
}

// Stages 2/3: unit u's micro-batch gradient, shard range by shard range.
void GradReducer::pack_reduce_scatter(UnitId u) {
  const UnitInfo& info = layout_.unit(u);
  const std::size_t cap = capacity(BucketKind::reduce_scatter), world = static_cast<std::size_t>(comm_.world_size());
  const DType ct = o_.comm_dtype, dt = o_.compute_dtype;
  micro_batch_grad(u);
  PoolLease& grad = micro_[static_cast<std::size_t>(u)];
  for (std::size_t a = 0; a < info.shard;) {
    Bucket& b = open_;
    if (ct == dt && info.shard <= cap) {
      // The unit's shards fit one bucket and are in the communication
      // dtype: its gradient buffer (world blocks of `shard` elements) is
      // the send buffer itself, no packing copy.
      Bucket whole;
      whole.kind = BucketKind::reduce_scatter;
      whole.capacity = whole.fill = info.shard;
      whole.pieces.push_back(BucketPiece{.unit = u, .offset = 0, .n = info.shard, .pos = 0});
      whole.send = std::move(grad);
      whole.in_place = whole.send.data();
      a = info.shard;
      launch(whole, in_flight_);
      continue;
    }
    if (b.pieces.empty()) open_packed(b, BucketKind::reduce_scatter, cap);
    const std::size_t n = std::min(b.capacity - b.fill, info.shard - a);
    for (std::size_t r = 0; r < world; ++r) {
      convert(b.send.at(r * b.capacity + b.fill), ct, grad.at(r * info.shard + a), dt, n);
    }
    b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
    b.fill += n;
    a += n;
    if (b.fill == b.capacity) launch(b, in_flight_);
  }
  grad.release();
}

void* GradReducer::micro_batch_grad(UnitId u) {
  ZS_CHECK(o_.stage >= 2, "micro_batch_grad at stage {}", o_.stage);
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < micro_.size(), "unknown unit id {}", u);
  PoolLease& l = micro_[static_cast<std::size_t>(u)];
  if (!l.valid()) l = pool_.acquire(layout_.unit(u).padded, o_.compute_dtype, true);
  return l.data();
}

void GradReducer::reduce(UnitId u) {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < micro_.size(), "unknown unit id {}", u);
  if (o_.stage >= 2) {
    pack_reduce_scatter(u);
  } else {
    pack_all_reduce(u);
  }
}

void GradReducer::complete() {
  if (!open_.pieces.empty()) launch(open_, in_flight_);
  drain(in_flight_);
}

void GradReducer::discard() noexcept {
  in_flight_.clear();  // each bucket's CommWork waits quietly before its leases go
  open_ = Bucket{};
  for (PoolLease& l : micro_) l.release();
}

void GradReducer::all_gather_shards(const std::function<void*(UnitId)>& full_params) {
  ZS_CHECK(o_.stage == 1 || o_.stage == 2, "bucketed parameter all-gather at stage {}", o_.stage);
  const std::size_t cap = capacity(BucketKind::all_gather), rank = static_cast<std::size_t>(comm_.rank());
  const DType dt = o_.compute_dtype;
  const UnitId units = static_cast<UnitId>(layout_.units().size());
  gather_dst_.assign(static_cast<std::size_t>(units), nullptr);
  for (UnitId u = 0; u < units; ++u) gather_dst_[static_cast<std::size_t>(u)] = full_params(u);
  std::deque<Bucket> flight;
  Bucket b;
  for (UnitId u = 0; u < units; ++u) {
    const std::size_t shard = layout_.unit(u).shard;
    void* full = gather_dst_[static_cast<std::size_t>(u)];
    for (std::size_t a = 0; a < shard;) {
      if (a == 0 && b.pieces.empty() && shard == cap) {
        // The unit is exactly one bucket (none of it packed yet): gather in place.
        b = Bucket{};
        b.kind = BucketKind::all_gather;
        b.capacity = b.fill = cap;
        b.in_place = full;
        b.pieces.push_back(BucketPiece{.unit = u, .offset = 0, .n = cap, .pos = 0});
        a = cap;
        launch(b, flight);
        continue;
      }
      if (b.pieces.empty()) open_packed(b, BucketKind::all_gather, cap);
      const std::size_t n = std::min(b.capacity - b.fill, shard - a);
      ops_.move(b.send.at(b.fill), elem(full, rank * shard + a, dt), n * dtype_size(dt));
      b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
      b.fill += n;
      a += n;
      if (b.fill == b.capacity) launch(b, flight);
    }
  }
  if (!b.pieces.empty()) launch(b, flight);
  drain(flight);
}

}  // namespace zeroshard
