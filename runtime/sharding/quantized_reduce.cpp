// ZeRO++'s hierarchical quantized reduce-scatter; see
// runtime/sharding/quantized_reduce.h, [Note: hierarchical quantized
// reduce-scatter].
#include "runtime/sharding/quantized_reduce.h"

#include "core/error.h"

namespace zeroshard {

namespace {

const std::byte* byte_at(const void* p, std::size_t offset) { return static_cast<const std::byte*>(p) + offset; }
std::byte* byte_at(void* p, std::size_t offset) { return static_cast<std::byte*>(p) + offset; }

}  // namespace

QuantizedReduceScatter QuantizedReduceScatter::start(const NodeLayout& nodes, DeviceOps& ops, BufferPool& pool,
                                                     const void* send, DType dtype, std::size_t count,
                                                     kernels::SymQuantFormat f, float* residual, float* out) {
  ZS_CHECK(nodes.local != nullptr && nodes.cross != nullptr && nodes.nodes >= 1 && nodes.ranks_per_node >= 1,
           "quantized reduce-scatter: no node layout");
  ZS_CHECK(nodes.local->world_size() == nodes.ranks_per_node && nodes.cross->world_size() == nodes.nodes,
           "quantized reduce-scatter: a layout of {} nodes x {} ranks over communicators of {} and {} ranks",
           nodes.nodes, nodes.ranks_per_node, nodes.cross->world_size(), nodes.local->world_size());
  ZS_CHECK(count == 0 || (send != nullptr && out != nullptr), "quantized reduce-scatter: null buffer");
  QuantizedReduceScatter q;
  q.nodes_ = nodes;
  q.ops_ = &ops;
  q.pool_ = &pool;
  q.format_ = f;
  q.count_ = count;
  q.chunk_ = kernels::sym_quant_chunk_bytes(count, f);
  q.out_ = out;
  const auto H = static_cast<std::size_t>(nodes.nodes), L = static_cast<std::size_t>(nodes.ranks_per_node);
  const std::size_t elem = dtype_size(dtype);
  if (L == 1) {
    // One rank per node: no hop inside a node; the blocks go to hop 2 as they are.
    q.send2_ = pool.acquire(H * q.chunk_, DType::u8, false);
    for (std::size_t m = 0; m < H; ++m) {
      ops.quantize(byte_at(send, m * count * elem), dtype, count, f, residual != nullptr ? residual + m * count : nullptr,
                   byte_at(q.send2_.data(), m * q.chunk_));
    }
    q.post_hop2();
    return q;
  }
  // Step 1: block r into segment local(r), slot node(r).
  q.send1_ = pool.acquire(H * L * q.chunk_, DType::u8, false);
  for (std::size_t r = 0; r < H * L; ++r) {
    const std::size_t node = r / L, local = r % L;
    ops.quantize(byte_at(send, r * count * elem), dtype, count, f, residual != nullptr ? residual + r * count : nullptr,
                 byte_at(q.send1_.data(), (local * H + node) * q.chunk_));
  }
  q.recv1_ = pool.acquire(H * L * q.chunk_, DType::u8, false);
  q.work_ = nodes.local->iall_to_all(q.send1_.data(), q.recv1_.data(), H * q.chunk_, DType::u8);
  q.phase_ = Phase::hop1;
  return q;
}

// Step 3: the node's sums, into `out` when there is one node, else into
// `sums_` (one per node) for hop 2.
void QuantizedReduceScatter::sum_hop1() {
  const auto H = static_cast<std::size_t>(nodes_.nodes), L = static_cast<std::size_t>(nodes_.ranks_per_node);
  float* sums = out_;
  if (H > 1) {
    sums_ = pool_->acquire(H * count_, DType::f32, false);
    sums = sums_.as<float>();
  }
  for (std::size_t m = 0; m < H; ++m) {
    for (std::size_t j = 0; j < L; ++j) {
      ops_->dequantize(byte_at(recv1_.data(), (j * H + m) * chunk_), count_, format_, sums + m * count_, DType::f32,
                       j > 0);
    }
  }
  send1_.release();
  recv1_.release();
}

// Step 4's quantization (the sums, or with L = 1 the blocks, are in
// send2_'s slots already quantized) and hop 2.
void QuantizedReduceScatter::post_hop2() {
  const auto H = static_cast<std::size_t>(nodes_.nodes);
  if (!send2_.valid()) {
    send2_ = pool_->acquire(H * chunk_, DType::u8, false);
    for (std::size_t m = 0; m < H; ++m) {
      ops_->quantize(sums_.at(m * count_), DType::f32, count_, format_, nullptr, byte_at(send2_.data(), m * chunk_));
    }
    sums_.release();
  }
  recv2_ = pool_->acquire(H * chunk_, DType::u8, false);
  work_ = nodes_.cross->iall_to_all(send2_.data(), recv2_.data(), chunk_, DType::u8);
  phase_ = Phase::hop2;
}

// Step 5: the nodes' sums of this rank's part, in node order.
void QuantizedReduceScatter::sum_hop2() {
  const auto H = static_cast<std::size_t>(nodes_.nodes);
  for (std::size_t m = 0; m < H; ++m) {
    ops_->dequantize(byte_at(recv2_.data(), m * chunk_), count_, format_, out_, DType::f32, m > 0);
  }
  send2_.release();
  recv2_.release();
  phase_ = Phase::done;
}

void QuantizedReduceScatter::advance() {
  if (phase_ != Phase::hop1) return;
  work_.wait();
  sum_hop1();
  if (nodes_.nodes == 1) {
    phase_ = Phase::done;
    return;
  }
  post_hop2();
}

bool QuantizedReduceScatter::test() {
  // Drives the hop in flight, nothing more: the sums and the buffers'
  // release happen in advance() and wait() only, at the caller's fixed
  // points, so the leases follow the call sequence ([Note: step replay]).
  if (phase_ == Phase::done) return true;
  work_.test();
  return false;
}

void QuantizedReduceScatter::wait() {
  advance();
  if (phase_ != Phase::hop2) return;
  work_.wait();
  sum_hop2();
}

}  // namespace zeroshard
