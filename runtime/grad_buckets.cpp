// Bucketed gradient reduction and post-step all-gather; see
// runtime/grad_buckets.h, [Note: gradient buckets].
#include "runtime/grad_buckets.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/engine_state.h"

namespace zeroshard {

namespace {

std::byte* elem(void* p, std::size_t i, DType t) { return static_cast<std::byte*>(p) + i * dtype_size(t); }

// dst[0..n) = src[0..n) converted from src_type to dst_type, times scale,
// on the compute device (a plain copy when nothing changes: bitwise what a
// cast gives).
void convert(EngineState& s, void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
             float scale = 1.0f) {
  if (n == 0) return;
  if (dst_type == src_type && scale == 1.0f) {
    s.ops->move(dst, src, n * dtype_size(dst_type));
  } else {
    s.ops->cast(dst, dst_type, src, src_type, n, scale);
  }
}

// Most elements a bucket of `kind` holds (per rank block for reduce-scatter
// and all-gather): the configured size (divided among the ranks for the
// blocked kinds, at least 1), but never more than the whole model needs.
std::size_t bucket_capacity(const EngineState& s, BucketKind kind) {
  std::size_t total = 0;
  for (const UnitInfo& u : s.layout.units()) total += kind == BucketKind::all_reduce ? u.padded : u.shard;
  const auto configured = static_cast<std::size_t>(kind == BucketKind::all_gather ? s.config.zero.allgather_bucket_size
                                                                                  : s.config.zero.reduce_bucket_size);
  const std::size_t per = kind == BucketKind::all_reduce
                              ? configured
                              : std::max<std::size_t>(1, configured / static_cast<std::size_t>(s.world()));
  return std::max<std::size_t>(1, std::min(per, total));
}

// Dtype a bucket's buffers hold: gradients travel in the communication
// dtype, parameters in the compute dtype.
DType bucket_dtype(const EngineState& s, const Bucket& b) {
  return b.kind == BucketKind::all_gather ? s.dtype() : s.comm_dtype();
}

// Makes b an empty packed bucket of `kind` with a send buffer for `capacity`
// elements per block.
void open_packed(EngineState& s, Bucket& b, BucketKind kind, std::size_t capacity) {
  b = Bucket{};
  b.kind = kind;
  b.capacity = capacity;
  const std::size_t blocks = kind == BucketKind::reduce_scatter ? static_cast<std::size_t>(s.world()) : 1;
  b.send = s.pool.acquire(blocks * capacity, bucket_dtype(s, b), false);
}

// Starts b's collective over its `fill` elements (per block).
void start_collective(EngineState& s, Bucket& b) {
  const DType t = bucket_dtype(s, b);
  const std::size_t world = static_cast<std::size_t>(s.world());
  switch (b.kind) {
    case BucketKind::all_reduce: {
      void* buf = b.send.data();
      if (b.in_place) buf = elem(s.unit(b.pieces[0].unit).grad_full.data(), b.pieces[0].offset, t);
      b.work = s.comm.iall_reduce(buf, b.fill, t, ReduceOp::sum);
      break;
    }
    case BucketKind::reduce_scatter: {
      if (!b.in_place && b.fill < b.capacity) {
        // Blocks were packed at stride `capacity`: close the gaps (left moves, in rank order).
        for (std::size_t r = 1; r < world; ++r) {
          s.ops->move(elem(b.send.data(), r * b.fill, t), elem(b.send.data(), r * b.capacity, t),
                      b.fill * dtype_size(t));
        }
      }
      b.recv = s.pool.acquire(b.fill, t, false);
      b.work = s.comm.ireduce_scatter(b.send.data(), b.recv.data(), b.fill, t, ReduceOp::sum);
      break;
    }
    case BucketKind::all_gather: {
      if (b.in_place) {
        const BucketPiece& p = b.pieces[0];
        void* full = s.unit(p.unit).params.data();
        b.work = s.comm.iall_gather(elem(full, static_cast<std::size_t>(s.rank()) * p.n, t), full, p.n, t);
      } else {
        b.recv = s.pool.acquire(world * b.fill, t, false);
        b.work = s.comm.iall_gather(b.send.data(), b.recv.data(), b.fill, t);
      }
      break;
    }
  }
}

// Waits for b's collective and moves its results where they belong.
void finish_collective(EngineState& s, Bucket& b) {
  b.work.wait();
  const DType t = bucket_dtype(s, b);
  switch (b.kind) {
    case BucketKind::all_reduce:
      for (const BucketPiece& p : b.pieces) {
        void* dst = elem(s.unit(p.unit).grad_full.data(), p.offset, s.dtype());
        const void* src = b.in_place ? dst : b.send.at(p.pos);
        if (!b.in_place || s.stored_scale() != 1.0f) convert(s, dst, s.dtype(), src, t, p.n, s.stored_scale());
      }
      break;
    case BucketKind::reduce_scatter:
      for (const BucketPiece& p : b.pieces) {
        accumulate_grad_shard(s, p.unit, p.offset, b.recv.at(p.pos), t, p.n, s.stored_scale());
      }
      break;
    case BucketKind::all_gather:
      if (b.in_place) break;
      for (const BucketPiece& p : b.pieces) {
        const UnitInfo& info = s.info(p.unit);
        void* full = s.unit(p.unit).params.data();
        for (std::size_t r = 0; r < static_cast<std::size_t>(s.world()); ++r) {
          s.ops->move(elem(full, r * info.shard + p.offset, t), b.recv.at(r * b.fill + p.pos), p.n * dtype_size(t));
        }
      }
      break;
  }
  b.send.release();
  b.recv.release();
}

// Starts `b` (moved into `flight`); with overlap, retires finished buckets
// and keeps at most kMaxBucketsInFlight; without, completes it now.
void launch(EngineState& s, Bucket& b, std::deque<Bucket>& flight) {
  flight.push_back(std::move(b));
  b = Bucket{};
  start_collective(s, flight.back());
  const bool overlap = s.config.zero.overlap();
  while (!flight.empty() && (!overlap || flight.size() > kMaxBucketsInFlight || flight.front().work.test())) {
    finish_collective(s, flight.front());
    flight.pop_front();
  }
}

void drain(EngineState& s, std::deque<Bucket>& flight) {
  while (!flight.empty()) {
    finish_collective(s, flight.front());
    flight.pop_front();
  }
}

// Stages 0/1: unit u's padded full gradient, in runs of the bucket.
void pack_all_reduce(EngineState& s, UnitId u) {
  GradBuckets& gb = s.buckets;
  const std::size_t padded = s.info(u).padded, cap = bucket_capacity(s, BucketKind::all_reduce);
  const DType ct = s.comm_dtype(), dt = s.dtype();
  void* grads = s.unit(u).grad_full.data();
  for (std::size_t a = 0; a < padded;) {
    Bucket& b = gb.open;
    if (b.pieces.empty() && ct == dt && padded - a >= cap) {
      // A whole bucket of this unit alone: reduce it where it is.
      b = Bucket{};
      b.kind = BucketKind::all_reduce;
      b.capacity = b.fill = cap;
      b.in_place = true;
      b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = cap, .pos = 0});
      a += cap;
      launch(s, b, gb.in_flight);
      continue;
    }
    if (b.pieces.empty()) open_packed(s, b, BucketKind::all_reduce, cap);
    const std::size_t n = std::min(b.capacity - b.fill, padded - a);
    convert(s, b.send.at(b.fill), ct, elem(grads, a, dt), dt, n);
    b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
    b.fill += n;
    a += n;
    if (b.fill == b.capacity) launch(s, b, gb.in_flight);
  }
}

// Stages 2/3: unit u's micro-batch gradient, shard range by shard range.
void pack_reduce_scatter(EngineState& s, UnitId u) {
  GradBuckets& gb = s.buckets;
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  const std::size_t cap = bucket_capacity(s, BucketKind::reduce_scatter), world = static_cast<std::size_t>(s.world());
  const DType ct = s.comm_dtype(), dt = s.dtype();
  if (!us.grad_lease.valid()) us.grad_lease = s.pool.acquire(info.padded, dt, true);
  for (std::size_t a = 0; a < info.shard;) {
    Bucket& b = gb.open;
    if (b.pieces.empty() && ct == dt && info.shard == cap) {
      // The unit is exactly one bucket: send its gradient buffer itself.
      b = Bucket{};
      b.kind = BucketKind::reduce_scatter;
      b.capacity = b.fill = cap;
      b.in_place = true;
      b.pieces.push_back(BucketPiece{.unit = u, .offset = 0, .n = cap, .pos = 0});
      b.send = std::move(us.grad_lease);
      a = cap;
      launch(s, b, gb.in_flight);
      continue;
    }
    if (b.pieces.empty()) open_packed(s, b, BucketKind::reduce_scatter, cap);
    const std::size_t n = std::min(b.capacity - b.fill, info.shard - a);
    for (std::size_t r = 0; r < world; ++r) {
      convert(s, b.send.at(r * b.capacity + b.fill), ct, us.grad_lease.at(r * info.shard + a), dt, n);
    }
    b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
    b.fill += n;
    a += n;
    if (b.fill == b.capacity) launch(s, b, gb.in_flight);
  }
  us.grad_lease.release();
}

}  // namespace

void reduce_unit_in_buckets(EngineState& s, UnitId u) {
  if (s.stage() >= 2) {
    pack_reduce_scatter(s, u);
  } else {
    pack_all_reduce(s, u);
  }
}

void complete_reduce_buckets(EngineState& s) {
  GradBuckets& gb = s.buckets;
  if (!gb.open.pieces.empty()) launch(s, gb.open, gb.in_flight);
  drain(s, gb.in_flight);
}

void discard_reduce_buckets(EngineState& s) noexcept {
  s.buckets.in_flight.clear();  // each bucket's CommWork waits quietly before its leases go
  s.buckets.open = Bucket{};
}

void all_gather_params_in_buckets(EngineState& s) {
  ZS_CHECK(s.stage() == 1 || s.stage() == 2, "bucketed parameter all-gather at stage {}", s.stage());
  const std::size_t cap = bucket_capacity(s, BucketKind::all_gather), rank = static_cast<std::size_t>(s.rank());
  const DType dt = s.dtype();
  std::deque<Bucket> flight;
  Bucket b;
  for (UnitId u = 0; u < static_cast<UnitId>(s.units.size()); ++u) {
    const std::size_t shard = s.info(u).shard;
    void* full = s.unit(u).params.data();
    for (std::size_t a = 0; a < shard;) {
      if (b.pieces.empty() && shard == cap) {
        // The unit is exactly one bucket: gather in place.
        b = Bucket{};
        b.kind = BucketKind::all_gather;
        b.capacity = b.fill = cap;
        b.in_place = true;
        b.pieces.push_back(BucketPiece{.unit = u, .offset = 0, .n = cap, .pos = 0});
        a = cap;
        launch(s, b, flight);
        continue;
      }
      if (b.pieces.empty()) open_packed(s, b, BucketKind::all_gather, cap);
      const std::size_t n = std::min(b.capacity - b.fill, shard - a);
      s.ops->move(b.send.at(b.fill), elem(full, rank * shard + a, dt), n * dtype_size(dt));
      b.pieces.push_back(BucketPiece{.unit = u, .offset = a, .n = n, .pos = b.fill});
      b.fill += n;
      a += n;
      if (b.fill == b.capacity) launch(s, b, flight);
    }
  }
  if (!b.pieces.empty()) launch(s, b, flight);
  drain(s, flight);
}

}  // namespace zeroshard
