// ParameterServer: see runtime/ps/param_server.h.
#include "runtime/ps/param_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

struct ParameterServer::Hosted {
  int worker = 0;
  int peer = 0;  // the worker's world rank
  std::unique_ptr<ArrayStore> store;
  std::unique_ptr<ShardOptimizer> optimizer;
  bool said_hello = false;
  bool done = false;
  std::string error;  // the first failed update's, answered to every later push
  std::int64_t last_step = 0;  // the step of the last push applied
  PsHello hello;      // receive buffers of the message posted
  PsPush push;
  CommWork posted;
};

ParameterServer::ParameterServer(const ParameterServerRoles& roles, const FlatLayout& layout, DeviceOps& ops,
                                 MemoryLedger& ledger, const ParameterServerOptions& options, Tracer* tracer)
    : roles_(roles), layout_(layout), layout_hash_(ps_layout_hash(layout)), tracer_(tracer) {
  ZS_CHECK(roles.is_server(), "ParameterServer on worker {}", roles.index());
  for (int w : roles.hosted_workers(roles.index())) {
    auto h = std::make_unique<Hosted>();
    h->worker = w;
    h->peer = roles.worker_rank(w);
    ArrayStoreOptions so = options.store;
    so.rank = w;
    h->store = std::make_unique<ArrayStore>(layout, ops, ledger, so);
    h->store->set_tracer(tracer);
    ShardOptimizerOptions oo = options.optimizer;
    oo.stage = 3;
    oo.rank = w;
    h->optimizer = std::make_unique<ShardOptimizer>(layout, ops, oo);
    for (const ParamGroup& g : options.groups) {
      h->optimizer->add_group(g.name, ParamGroupOptions{.lr = g.lr, .weight_decay = g.weight_decay});
    }
    h->optimizer->finalize();
    h->optimizer->set_tracer(tracer);
    hosted_.push_back(std::move(h));
  }
}

ParameterServer::~ParameterServer() = default;

ArrayStore& ParameterServer::store_of(int w) {
  for (auto& h : hosted_) {
    if (h->worker == w) return *h->store;
  }
  throw InvariantError(fmt::format("server {} does not hold worker {}'s shards", roles_.index(), w));
}

void ParameterServer::serve() {
  Communicator& world = roles_.world();
  for (auto& h : hosted_) h->posted = world.irecv(&h->hello, sizeof(PsHello), DType::u8, h->peer);
  std::size_t open = hosted_.size();
  int idle = 0;
  while (open > 0) {
    bool any = false;
    for (auto& hp : hosted_) {
      Hosted& h = *hp;
      if (h.done || !h.posted.test()) continue;
      any = true;
      if (!h.said_hello) {
        answer_hello(h);
      } else if (h.push.kind == PsKind::state) {
        answer_state(h);
      } else if (h.push.kind == PsKind::put_state) {
        answer_put_state(h);
      } else if (h.push.kind == PsKind::goodbye) {
        h.done = true;
        --open;
        continue;
      } else {
        answer_push(h, h.push);
      }
      h.posted = world.irecv(&h.push, sizeof(PsPush), DType::u8, h.peer);
    }
    // Nothing arrived: spin briefly, then yield the core to the workers.
    if (any) {
      idle = 0;
    } else if (++idle > 64) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void ParameterServer::answer_hello(Hosted& h) {
  h.said_hello = true;
  Communicator& world = roles_.world();
  if (h.hello.layout_hash != layout_hash_ || h.hello.worker != h.worker) {
    h.error = fmt::format(
        "parameter server {} (rank {}): worker {} (rank {}) declared another model than the server's (layout hash "
        "{:016x}, the server's {:016x}): every rank must declare the same units and parameters",
        roles_.index(), world.rank(), h.worker, h.peer, h.hello.layout_hash, layout_hash_);
    const PsStatus status = ps_error(0, h.error);
    world.send(&status, sizeof status, DType::u8, h.peer);
    return;
  }
  const PsStatus ok{};
  world.send(&ok, sizeof ok, DType::u8, h.peer);
}

void ParameterServer::answer_push(Hosted& h, const PsPush& push) {
  Communicator& world = roles_.world();
  ArrayStore& store = *h.store;
  const UnitId units = static_cast<UnitId>(layout_.units().size());
  std::vector<float> buf;
  // Receive everything the push carries, whatever happens to the update.
  std::string error = h.error;
  auto receive_into = [&](ArrayKind kind) {
    for (UnitId u = 0; u < units; ++u) {
      const std::size_t n = layout_.unit(u).shard;
      if (n == 0) continue;
      buf.resize(n);
      world.recv(buf.data(), n, DType::f32, h.peer);
      stats_.bytes_received += n * sizeof(float);
      if (!error.empty()) continue;
      try {
        store.store(u, {kind}, buf.data());
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  };
  {
    const TraceScope span(tracer_, "ps_receive", TraceThread::engine, TimeCategory::comm_wait);
    if (push.has_params != 0) receive_into(ArrayKind::params);
    receive_into(ArrayKind::grad);
  }
  if (error.empty() && push.step <= h.last_step) {
    error = fmt::format("a push for step {} after one for step {}: steps must increase", push.step, h.last_step);
  }
  if (error.empty()) {
    const TraceScope span(tracer_, "optimizer", TraceThread::engine, TimeCategory::optimizer,
                          fmt::format("worker {}, step {}, version {}", h.worker, push.step, push.version));
    try {
      h.optimizer->step(store, push.step, static_cast<float>(push.grad_scale));
      ++stats_.pushes;
      h.last_step = push.step;
      stats_.max_lag = std::max(stats_.max_lag, push.step - 1 - push.version);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!error.empty()) {
    if (h.error.empty()) {
      h.error = fmt::format("parameter server {} (rank {}), worker {}'s step {}: {}", roles_.index(), world.rank(),
                            h.worker, push.step, error);
    }
  }
  const TraceScope span(tracer_, "ps_send", TraceThread::engine, TimeCategory::comm_wait);
  const PsStatus status = h.error.empty() ? PsStatus{.ok = 1, .step = push.step} : ps_error(push.step, h.error);
  world.send(&status, sizeof status, DType::u8, h.peer);
  // The shards follow whatever the status (zeros after an error), so that
  // the worker could post every receive at its push.
  for (UnitId u = 0; u < units; ++u) {
    const std::size_t n = layout_.unit(u).shard;
    if (n == 0) continue;
    HostBuffer holder;
    const void* params = nullptr;
    if (h.error.empty()) {
      try {
        params = store.read(u, {ArrayKind::params}, holder);
      } catch (const std::exception& e) {
        h.error = fmt::format("parameter server {} (rank {}), worker {}'s step {}: {}", roles_.index(), world.rank(),
                              h.worker, push.step, e.what());
      }
    }
    if (params == nullptr) {
      buf.assign(n, 0.0f);
      params = buf.data();
    }
    world.send(params, n, DType::f32, h.peer);
    stats_.bytes_sent += n * sizeof(float);
  }
}

void ParameterServer::answer_state(Hosted& h) {
  Communicator& world = roles_.world();
  ArrayStore& store = *h.store;
  auto piece = [&](const void* data, std::uint64_t bytes) {
    ps_send_piece(world, h.peer, std::span<const std::byte>(static_cast<const std::byte*>(data), bytes));
    stats_.bytes_sent += bytes;
  };
  try {
    if (!h.error.empty()) throw Error(h.error);
    for (UnitId u = 0; u < static_cast<UnitId>(layout_.units().size()); ++u) {
      HostBuffer holder;
      piece(store.read(u, {ArrayKind::params}, holder), layout_.unit(u).shard * sizeof(float));
      for (int k = 0; k < store.states(u).arrays(); ++k) {
        h.optimizer->with_state_array_window(
            store, u, k, h.worker, [&](std::span<const std::byte> bytes) { piece(bytes.data(), bytes.size()); });
      }
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    // A read failed: the worker learns it in place of the next piece.
    const std::uint64_t failed = kPsFailed;
    world.send(&failed, sizeof failed, DType::u8, h.peer);
    const PsStatus status = ps_error(0, fmt::format("parameter server {} (rank {}), worker {}'s optimizer state: {}",
                                                    roles_.index(), world.rank(), h.worker, e.what()));
    world.send(&status, sizeof status, DType::u8, h.peer);
  }
}

void ParameterServer::answer_put_state(Hosted& h) {
  Communicator& world = roles_.world();
  ArrayStore& store = *h.store;
  std::string error;
  std::vector<std::byte> buf;
  bool aborted = false;  // the worker's load failed: no more pieces come
  // Every piece is received whatever fails, so that the stream ends in step.
  auto piece = [&](UnitId u, ArrayRef a) {
    if (aborted) return;
    const std::uint64_t bytes = ps_recv_piece(world, h.peer, buf);
    if (bytes == kPsFailed) {
      aborted = true;
      if (error.empty()) error = "the worker's load failed before it sent all of its state";
      return;
    }
    stats_.bytes_received += bytes;
    if (!error.empty()) return;
    const std::uint64_t want = store.numel(u, a) * dtype_size(store.dtype(u, a));
    try {
      if (bytes != want) {
        throw InvariantError(
            fmt::format("unit \"{}\": {} bytes for an array of {}", layout_.unit(u).name, bytes, want));
      }
      store.store(u, a, buf.data());
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  for (UnitId u = 0; u < static_cast<UnitId>(layout_.units().size()); ++u) {
    piece(u, {ArrayKind::params});
    for (int k = 0; k < store.states(u).arrays(); ++k) piece(u, {ArrayKind::state, k});
  }
  if (error.empty()) {
    h.error.clear();  // the loaded state replaces what an update left partly written
    h.last_step = 0;  // the steps go on from the checkpoint's
    const PsStatus ok{};
    world.send(&ok, sizeof ok, DType::u8, h.peer);
    return;
  }
  h.error = fmt::format("parameter server {} (rank {}), worker {}'s loaded state: {}", roles_.index(), world.rank(),
                        h.worker, error);
  const PsStatus status = ps_error(0, h.error);
  world.send(&status, sizeof status, DType::u8, h.peer);
}

}  // namespace zeroshard
