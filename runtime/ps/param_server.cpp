// ParameterServer: see runtime/ps/param_server.h.
#include "runtime/ps/param_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <zlib.h>

#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace zeroshard {

struct ParameterServer::Hosted {
  int worker = 0;
  int peer = 0;  // the worker's world rank
  // The store and update the worker's pushes go to: its own ("reduce"),
  // the server's one, shared by every worker ("direct").
  ArrayStore* store = nullptr;
  ShardOptimizer* optimizer = nullptr;
  int layout_rank = 0;  // the store's rank in the layout
  bool said_hello = false;
  bool done = false;
  std::string error;           // the first failed update's, answered to every later push
  std::int64_t last_step = 0;  // the step of the last push applied
  std::int64_t last_version = 0;                // the version that push was computed on
  std::int64_t heard_count = 0;                 // the server's message count at its last message
  // "direct": the step of each reply sent and the updates it held, from
  // the one the worker's last push was computed on (its version) on.
  std::deque<std::pair<std::int64_t, std::int64_t>> replied;
  std::chrono::steady_clock::time_point heard;  // when its last message arrived
  PsHello hello;                                // receive buffers of the message posted
  PsPush push;
  CommWork posted;
  // The last push's reply, sent without blocking: a copy of the shards
  // (the next update, another worker's in "direct", rewrites the store)
  // and the sends of it still in flight, declared after the buffers they
  // read so that they are destroyed (waited for) first.
  PsStatus reply_status;
  std::vector<float> reply;
  std::vector<CommWork> replying;
  // Completes (progresses) the reply in flight; true when none is left.
  // Throws CommError when the worker cannot be reached.
  bool reply_sent() {
    std::erase_if(replying, [](CommWork& w) { return w.test(); });
    return replying.empty();
  }
};

ParameterServer::ParameterServer(const ParameterServerRoles& roles, const FlatLayout& layout, DeviceOps& ops,
                                 MemoryLedger& ledger, const ParameterServerOptions& options, Tracer* tracer)
    : roles_(roles), layout_(layout), layout_hash_(ps_layout_hash(layout)), left_after_s_(options.left_after_s),
      grad_dtype_(options.push_grad_dtype), staleness_aware_lr_(options.staleness_aware_lr), tracer_(tracer) {
  ZS_CHECK(!staleness_aware_lr_ || roles.direct(), "staleness_aware_lr with a \"reduce\" push");
  roles.check_push_grad_dtype(grad_dtype_);
  ZS_CHECK(roles.is_server(), "ParameterServer on worker {}", roles.index());
  ZS_CHECK(layout.world_size() == (roles.direct() ? roles.servers() : roles.workers()),
           "a server's layout is for {} ranks", layout.world_size());
  // One store and update per rank of the layout this server holds: each
  // hosted worker's ("reduce"), or the server's own window ("direct").
  auto add_rank = [&](int rank) {
    ArrayStoreOptions so = options.store;
    so.rank = rank;
    stores_.push_back(std::make_unique<ArrayStore>(layout, ops, ledger, so));
    stores_.back()->set_tracer(tracer);
    ShardOptimizerOptions oo = options.optimizer;
    oo.stage = 3;
    oo.rank = rank;
    auto optimizer = std::make_unique<ShardOptimizer>(layout, ops, oo);
    for (const ParamGroup& g : options.groups) {
      optimizer->add_group(g.name, ParamGroupOptions{.lr = g.lr, .weight_decay = g.weight_decay});
    }
    optimizer->finalize();
    optimizer->set_tracer(tracer);
    optimizers_.push_back(std::move(optimizer));
  };
  if (roles.direct()) add_rank(roles.index());
  for (int w : roles.hosted_workers(roles.index())) {
    auto h = std::make_unique<Hosted>();
    h->worker = w;
    h->peer = roles.worker_rank(w);
    if (!roles.direct()) add_rank(w);
    h->store = stores_.back().get();
    h->optimizer = optimizers_.back().get();
    h->layout_rank = roles.direct() ? roles.index() : w;
    hosted_.push_back(std::move(h));
  }
}

ParameterServer::~ParameterServer() = default;

ArrayStore& ParameterServer::store_of(int w) {
  for (auto& h : hosted_) {
    if (h->worker == w) return *h->store;  // "direct": every worker's is the one store
  }
  throw InvariantError(fmt::format("server {} does not hold worker {}'s shards", roles_.index(), w));
}

void ParameterServer::serve() {
  Communicator& world = roles_.world();
  const auto start = std::chrono::steady_clock::now();
  for (auto& h : hosted_) {
    h->posted = world.irecv(&h->hello, sizeof(PsHello), DType::u8, h->peer);
    h->heard = start;
  }
  std::size_t open = hosted_.size();
  auto last_goodbye = start;  // when the last worker said goodbye
  auto last_scan = start;     // when the departures were last looked for
  std::int64_t messages = 0;  // messages received from all workers
  int idle = 0;
  while (open > 0) {
    bool any = false;
    for (auto& hp : hosted_) {
      Hosted& h = *hp;
      if (h.done) continue;
      try {
        h.reply_sent();  // progress
        if (!h.posted.test()) continue;
        any = true;
        h.heard = std::chrono::steady_clock::now();
        h.heard_count = ++messages;
        if (!h.said_hello) {
          answer_hello(h);
        } else if (h.push.kind == PsKind::state) {
          answer_state(h);
        } else if (h.push.kind == PsKind::put_state) {
          answer_put_state(h);
        } else if (h.push.kind == PsKind::goodbye) {
          for (CommWork& w : h.replying) w.wait();  // the worker waited for its pulls
          h.done = true;
          last_goodbye = h.heard;
          --open;
          continue;
        } else {
          answer_push(h, h.push);
        }
        h.posted = world.irecv(&h.push, sizeof(PsPush), DType::u8, h.peer);
      } catch (const CommError& e) {
        // "direct": a worker that cannot be reached has left; the others go on.
        if (!roles_.direct()) throw;
        leave(h, e.what());
        --open;
      }
    }
    // Nothing arrived: spin briefly, then yield the core to the workers.
    if (any) {
      idle = 0;
    } else if (++idle > 64) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // A silent worker has left when the others went on meanwhile
    // (kPsLeftAfterMessages each) or are all done (the timeout ago): a
    // pause of all of them (an evaluation), or of the only one, is no
    // one's departure. Looked at every 100 ms, busy or not.
    const auto now = std::chrono::steady_clock::now();
    if (!roles_.direct() || left_after_s_ <= 0 || now - last_scan < std::chrono::milliseconds(100)) continue;
    last_scan = now;
    const auto silent_s = [&](const Hosted& h) { return std::chrono::duration<double>(now - h.heard).count(); };
    for (auto& hp : hosted_) {
      Hosted& h = *hp;
      if (h.done || silent_s(h) <= left_after_s_) continue;
      // Every message since h's last is another worker's.
      const bool others_go_on =
          hosted_.size() > 1 &&
          messages - h.heard_count >= kPsLeftAfterMessages * static_cast<std::int64_t>(hosted_.size() - 1);
      // All others done, and this one silent for the timeout since.
      const bool others_done =
          hosted_.size() > 1 && std::chrono::duration<double>(now - last_goodbye).count() > left_after_s_ &&
          std::all_of(hosted_.begin(), hosted_.end(), [&](const auto& o) { return o.get() == &h || o->done; });
      if (!others_go_on && !others_done) continue;
      const double silent = silent_s(h);
      leave(h, fmt::format("no message for {:.0f} s (zeroshard.collective_timeout_s)", silent));
      --open;
    }
  }
}

void ParameterServer::leave(Hosted& h, const std::string& why) {
  h.done = true;
  // Its next message will not come. A reply still in flight to it is
  // waited for at destruction: the transport fails it once the worker is
  // gone (a live worker taken for gone takes it in at its next call).
  h.posted.cancel();
  stats_.left.push_back({.worker = h.worker, .step = h.last_step, .version = h.last_version, .updates = updates_});
  fmt::print(stderr,
             "zeroshard: parameter server {} (rank {}): worker {} (rank {}) left after step {} (computed on version "
             "{}): {}; serving the other workers\n",
             roles_.index(), roles_.world().rank(), h.worker, h.peer, h.last_step, h.last_version, why);
  std::fflush(stderr);
}

void ParameterServer::answer_hello(Hosted& h) {
  h.said_hello = true;
  Communicator& world = roles_.world();
  // A refusal here; h.error may already hold a shared update's failure
  // ("direct"), which the worker hears at its first push, not at hello.
  std::string refusal;
  if (h.hello.layout_hash != layout_hash_ || h.hello.worker != h.worker) {
    refusal = fmt::format(
        "parameter server {} (rank {}): worker {} (rank {}) declared another model than the server's (layout hash "
        "{:016x}, the server's {:016x}): every rank must declare the same units and parameters",
        roles_.index(), world.rank(), h.worker, h.peer, h.hello.layout_hash, layout_hash_);
  } else if (h.hello.grad_dtype != static_cast<std::int64_t>(grad_dtype_)) {
    refusal = fmt::format(
        "parameter server {} (rank {}): worker {} (rank {}) pushes gradients as {}, the server reads {}: every rank "
        "must read the same communication_data_type",
        roles_.index(), world.rank(), h.worker, h.peer, dtype_name(static_cast<DType>(h.hello.grad_dtype)),
        dtype_name(grad_dtype_));
  }
  if (!refusal.empty()) h.error = refusal;
  const PsStatus status = refusal.empty() ? PsStatus{} : ps_error(0, refusal);
  world.send(&status, sizeof status, DType::u8, h.peer);
}

void ParameterServer::answer_push(Hosted& h, const PsPush& push) {
  Communicator& world = roles_.world();
  ArrayStore& store = *h.store;
  const UnitId units = static_cast<UnitId>(layout_.units().size());
  std::vector<float> buf;
  std::vector<std::uint16_t> wire16;  // bf16 gradients as they arrive
  // Receive everything the push carries, whatever happens to the update.
  std::string error = h.error;
  bool state_failed = false;  // the store or the update failed (not the protocol)
  uLong params_crc = crc32(0L, Z_NULL, 0);  // of the pushed parameters, in unit order
  bool params_stored = false;               // they replaced the server's
  auto receive_into = [&](ArrayKind kind, bool keep) {
    for (UnitId u = 0; u < units; ++u) {
      const std::size_t n = layout_.unit(u).shard;
      if (n == 0) continue;
      buf.resize(n);
      if (kind == ArrayKind::grad && grad_dtype_ == DType::bf16) {
        wire16.resize(n);
        world.recv(wire16.data(), n, DType::bf16, h.peer);
        kernels::bf16_to_f32(wire16.data(), buf.data(), n);  // exact
        stats_.bytes_received += n * sizeof(std::uint16_t);
      } else {
        world.recv(buf.data(), n, DType::f32, h.peer);
        stats_.bytes_received += n * sizeof(float);
      }
      if (kind == ArrayKind::params && roles_.direct()) {
        params_crc = crc32_z(params_crc, reinterpret_cast<const Bytef*>(buf.data()), n * sizeof(float));
      }
      if (!keep || !error.empty()) continue;
      try {
        store.store(u, {kind}, buf.data());
      } catch (const std::exception& e) {
        error = e.what();
        state_failed = true;
      }
    }
  };
  const auto received_from = std::chrono::steady_clock::now();
  {
    const TraceScope span(tracer_, "ps_receive", TraceThread::engine, TimeCategory::comm_wait);
    // "direct": the first parameters pushed are the servers'; every other
    // worker's (its first push) must be the same (checked below).
    const bool keep_params = !roles_.direct() || !first_params_;
    if (push.has_params != 0) receive_into(ArrayKind::params, keep_params);
    params_stored = push.has_params != 0 && keep_params && error.empty();
    receive_into(ArrayKind::grad, true);
  }
  const auto updated_from = std::chrono::steady_clock::now();
  stats_.receive_s += std::chrono::duration<double>(updated_from - received_from).count();
  if (roles_.direct() && push.has_params != 0) {
    if (!first_params_) {
      if (params_stored) first_params_ = FirstParams{.worker = h.worker, .crc32 = params_crc};
    } else if (first_params_->crc32 != params_crc && error.empty()) {
      error = fmt::format(
          "its parameters (CRC-32 {:08x} of this server's window) differ from worker {}'s ({:08x}), which the "
          "servers hold: with \"parameter_server.push\" = \"direct\" every worker must start from the same "
          "parameters (set_parameters on one worker after another's first push is not applied)",
          params_crc, first_params_->worker, first_params_->crc32);
    }
  }
  if (error.empty() && push.step <= h.last_step) {
    error = fmt::format("a push for step {} after one for step {}: steps must increase", push.step, h.last_step);
  }
  // "direct": the updates the push's parameters missed (tau), from the
  // reply they came from (version 0: the parameters before any update).
  std::int64_t lag = 0;
  if (roles_.direct() && error.empty()) {
    while (!h.replied.empty() && h.replied.front().first < push.version) h.replied.pop_front();
    if (push.version == 0) {
      lag = updates_;
    } else if (!h.replied.empty() && h.replied.front().first == push.version) {
      lag = updates_ - h.replied.front().second;
    } else {
      error = fmt::format("its push of step {} was computed on the reply to step {}, which this server did not send",
                          push.step, push.version);
    }
  }
  if (error.empty()) {
    // "direct": every push is the next update of the one shared state.
    const std::int64_t update = roles_.direct() ? updates_ + 1 : push.step;
    const double lr_scale = staleness_aware_lr_ ? 1.0 / static_cast<double>(std::max<std::int64_t>(1, lag)) : 1.0;
    const TraceScope span(tracer_, "optimizer", TraceThread::engine, TimeCategory::optimizer,
                          roles_.direct()
                              ? fmt::format("worker {}, step {}, version {}, update {}, lag {}, lr x {:.3g}", h.worker,
                                            push.step, push.version, update, lag, lr_scale)
                              : fmt::format("worker {}, step {}, version {}", h.worker, push.step, push.version));
    try {
      h.optimizer->set_lr_scale(lr_scale);
      h.optimizer->step(store, update, static_cast<float>(push.grad_scale));
      updates_ = update;
      ++stats_.pushes;
      h.last_step = push.step;
      h.last_version = push.version;
      stats_.max_lag = std::max(stats_.max_lag, push.step - 1 - push.version);
      stats_.max_update_lag = std::max(stats_.max_update_lag, lag);
      stats_.update_lag_sum += lag;
      stats_.lr_scale_sum += lr_scale;
    } catch (const std::exception& e) {
      error = e.what();
      state_failed = true;
    }
  }
  if (!error.empty()) {
    if (h.error.empty()) {
      h.error = fmt::format("parameter server {} (rank {}), worker {}'s step {}: {}", roles_.index(), world.rank(),
                            h.worker, push.step, error);
    }
    // "direct": the state every worker updates is partly written.
    if (roles_.direct() && state_failed) {
      for (auto& o : hosted_) {
        if (o->error.empty()) o->error = h.error;
      }
    }
  }
  // The reply goes out without blocking: a worker computing its next
  // steps (staleness > 0) takes it in at its next call into the
  // communicator, and the server serves the other workers meanwhile.
  const auto sent_from = std::chrono::steady_clock::now();
  stats_.update_s += std::chrono::duration<double>(sent_from - updated_from).count();
  const TraceScope span(tracer_, "ps_send", TraceThread::engine, TimeCategory::comm_wait);
  for (CommWork& w : h.replying) w.wait();  // the previous reply reads the buffers
  h.replying.clear();
  std::size_t total = 0;
  for (UnitId u = 0; u < units; ++u) total += layout_.unit(u).shard;
  h.reply.resize(total);
  // The shards follow whatever the status (zeros after an error), so that
  // the worker could post every receive at its push.
  std::size_t offset = 0;
  for (UnitId u = 0; u < units; ++u) {
    const std::size_t n = layout_.unit(u).shard;
    float* dst = h.reply.data() + offset;
    offset += n;
    if (n == 0) continue;
    bool read = false;
    if (h.error.empty()) {
      try {
        HostBuffer holder;
        std::memcpy(dst, store.read(u, {ArrayKind::params}, holder), n * sizeof(float));
        read = true;
      } catch (const std::exception& e) {
        h.error = fmt::format("parameter server {} (rank {}), worker {}'s step {}: {}", roles_.index(), world.rank(),
                              h.worker, push.step, e.what());
      }
    }
    if (!read) std::fill_n(dst, n, 0.0f);
  }
  if (roles_.direct()) h.replied.emplace_back(push.step, updates_);
  h.reply_status =
      h.error.empty() ? PsStatus{.ok = 1, .step = push.step, .updates = stats_.pushes} : ps_error(push.step, h.error);
  h.replying.push_back(world.isend(&h.reply_status, sizeof h.reply_status, DType::u8, h.peer));
  offset = 0;
  for (UnitId u = 0; u < units; ++u) {
    const std::size_t n = layout_.unit(u).shard;
    if (n > 0) h.replying.push_back(world.isend(h.reply.data() + offset, n, DType::f32, h.peer));
    offset += n;
    stats_.bytes_sent += n * sizeof(float);
  }
  stats_.send_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - sent_from).count();
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
            store, u, k, h.layout_rank, [&](std::span<const std::byte> bytes) { piece(bytes.data(), bytes.size()); });
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
