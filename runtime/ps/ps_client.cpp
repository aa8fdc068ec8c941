// ParameterServerClient: see runtime/ps/ps_client.h.
#include "runtime/ps/ps_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace zeroshard {

// One step's reply in flight: its status and shards, with the receives
// posted at the push.
struct ParameterServerClient::Pull {
  std::int64_t step = 0;
  std::vector<PsStatus> status;            // per link
  std::vector<std::vector<float>> shards;  // per link and unit: [link * units + u] (empty: no elements)
  std::vector<CommWork> works;             // per link, the status's, then each shard's
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ParameterServerClient::ParameterServerClient(const ParameterServerRoles& roles, const FlatLayout& layout,
                                             ArrayStore& store, int stage, std::int64_t staleness, DType grad_dtype,
                                             Tracer* tracer)
    : roles_(roles), layout_(layout),
      server_layout_(roles.direct() ? std::make_unique<FlatLayout>(ps_relaid_layout(layout, roles.servers()))
                                    : nullptr),
      wire_(server_layout_ ? *server_layout_ : layout), store_(store), stage_(stage), staleness_(staleness),
      grad_dtype_(grad_dtype), tracer_(tracer) {
  roles.check_push_grad_dtype(grad_dtype);
  ZS_CHECK(!roles.is_server(), "ParameterServerClient on server {}", roles.index());
  ZS_CHECK(stage >= 1 && stage <= 3, "ParameterServerClient at stage {}", stage);
  ZS_CHECK(store.device_ops().host_addressable(), "ParameterServerClient needs host-addressable arrays");
  ZS_CHECK(!roles.direct() || layout.world_size() == 1, "a direct worker's layout is for {} ranks, not 1",
           layout.world_size());
  if (roles.direct()) {
    for (int s = 0; s < roles.servers(); ++s) peers_.push_back(roles.server_rank(s));
  } else {
    peers_.push_back(roles.server_rank(roles.server_of(roles.index())));
  }
}

ParameterServerClient::~ParameterServerClient() {
  if (!connected_) return;
  try {
    // The server sends every pull in flight before it reads the goodbye.
    for (auto& p : pending_) {
      for (CommWork& w : p->works) w.wait();
    }
    pending_.clear();
    const PsPush bye{.kind = PsKind::goodbye};
    for (int peer : peers_) roles_.world().send(&bye, sizeof bye, DType::u8, peer);
  } catch (...) {
    // The server is gone; nothing is left to tell it.
  }
}

void ParameterServerClient::connect() {
  Communicator& world = roles_.world();
  const PsHello hello{.layout_hash = ps_layout_hash(wire_),
                      .worker = roles_.index(),
                      .grad_dtype = static_cast<std::int64_t>(grad_dtype_)};
  for (int peer : peers_) world.send(&hello, sizeof hello, DType::u8, peer);
  connected_ = true;
  // Every server's answer, so that none is left for a later receive.
  std::optional<PsStatus> failed;
  for (int peer : peers_) {
    PsStatus status;
    world.recv(&status, sizeof status, DType::u8, peer);
    if (status.ok == 0 && !failed) failed = status;
  }
  if (failed) {
    failed->text[kPsErrorBytes - 1] = '\0';
    throw Error(failed->text);
  }
}

float* ParameterServerClient::window(UnitId u, ArrayKind kind) {
  // Parameters are full at stages 1/2, gradients at stage 1: window w
  // ("direct": the whole array, the layout being for one rank).
  const bool full = !server_layout_ && (kind == ArrayKind::params ? stage_ < 3 : stage_ < 2);
  auto* base = reinterpret_cast<float*>(store_.resident(u, {kind}));
  ZS_CHECK(base != nullptr, "unit \"{}\": its {} are not in memory", layout_.unit(u).name,
           kind == ArrayKind::params ? "parameters" : "gradients");
  return full ? base + static_cast<std::size_t>(roles_.index()) * layout_.unit(u).shard : base;
}

void ParameterServerClient::push_array(std::size_t link, ArrayKind kind) {
  Communicator& world = roles_.world();
  std::vector<float> padded;
  std::vector<std::uint16_t> wire16;  // bf16 gradients
  for (UnitId u = 0; u < static_cast<UnitId>(units()); ++u) {
    const std::size_t n = wire_.unit(u).shard;
    if (n == 0) continue;
    HostBuffer holder;
    // A stage 3 parameter shard may be on the host or nvme tier.
    const void* src = kind == ArrayKind::params && stage_ == 3 ? store_.read(u, {kind}, holder) : window(u, kind);
    if (server_layout_) {
      // Window `link` of the full array; the servers' padding past it is zeros.
      const std::size_t full = layout_.unit(u).shard, begin = link * n;
      const float* base = static_cast<const float*>(src) + std::min(begin, full);
      const std::size_t have = begin < full ? std::min(n, full - begin) : 0;
      src = base;
      if (have < n) {
        padded.assign(n, 0.0f);
        std::copy_n(base, have, padded.begin());
        src = padded.data();
      }
    }
    if (kind == ArrayKind::grad && grad_dtype_ == DType::bf16) {
      wire16.resize(n);
      kernels::f32_to_bf16(static_cast<const float*>(src), wire16.data(), n);  // round to nearest even
      world.send(wire16.data(), n, DType::bf16, peers_[link]);
      stats_.bytes_pushed += n * sizeof(std::uint16_t);
    } else {
      world.send(src, n, DType::f32, peers_[link]);
      stats_.bytes_pushed += n * sizeof(float);
    }
  }
}

bool ParameterServerClient::step(std::int64_t step, float grad_scale) {
  ZS_CHECK(connected_, "ParameterServerClient::step before connect()");
  Communicator& world = roles_.world();
  // The replies' receives first, so that no server's reply waits for this
  // worker's push to another server.
  auto p = std::make_unique<Pull>();
  p->step = step;
  p->status.resize(peers_.size());
  p->shards.resize(peers_.size() * units());
  for (std::size_t link = 0; link < peers_.size(); ++link) {
    p->works.push_back(world.irecv(&p->status[link], sizeof(PsStatus), DType::u8, peers_[link]));
    for (UnitId u = 0; u < static_cast<UnitId>(units()); ++u) {
      const std::size_t n = wire_.unit(u).shard;
      if (n == 0) continue;
      auto& shard = p->shards[link * units() + static_cast<std::size_t>(u)];
      shard.resize(n);
      p->works.push_back(world.irecv(shard.data(), n, DType::f32, peers_[link]));
    }
  }
  pending_.push_back(std::move(p));
  {
    const TraceScope span(tracer_, "ps_push", TraceThread::engine, TimeCategory::comm_wait);
    const auto t0 = std::chrono::steady_clock::now();
    const PsPush push{.kind = PsKind::step,
                      .step = step,
                      .grad_scale = grad_scale,
                      .has_params = params_dirty_ ? 1 : 0,
                      .version = version_};
    for (std::size_t link = 0; link < peers_.size(); ++link) {
      world.send(&push, sizeof push, DType::u8, peers_[link]);
      if (params_dirty_) push_array(link, ArrayKind::params);
      push_array(link, ArrayKind::grad);
    }
    params_dirty_ = false;
    ++stats_.pushes;
    stats_.push_s += seconds_since(t0);
  }
  pushed_ = step;
  // The pulls due (steps up to step - staleness) and, with "direct", every
  // later one that has arrived, so that the worker trains on the freshest
  // parameters it has (at most s steps old): the newest of them is
  // installed, the ones before it only checked.
  std::size_t retire = 0;
  while (retire < pending_.size() && pending_[retire]->step <= step - staleness_) ++retire;
  while (server_layout_ && retire < pending_.size() && arrived(*pending_[retire])) ++retire;
  if (retire == 0) return false;
  for (std::size_t i = 0; i + 1 < retire; ++i) settle(*pending_[i]);
  install(*pending_[retire - 1], step);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(retire));
  return true;
}

bool ParameterServerClient::arrived(Pull& p) {
  return std::all_of(p.works.begin(), p.works.end(), [](CommWork& w) { return w.test(); });
}

bool ParameterServerClient::drain() {
  const bool changed = !pending_.empty();
  const std::int64_t at = pending_.empty() ? version_ : pending_.back()->step;
  while (!pending_.empty()) {
    install(*pending_.front(), at);
    pending_.pop_front();
  }
  return changed;
}

void ParameterServerClient::settle(Pull& p) {
  {
    const TraceScope span(tracer_, "ps_pull_wait", TraceThread::engine, TimeCategory::comm_wait);
    const auto t0 = std::chrono::steady_clock::now();
    for (CommWork& w : p.works) w.wait();
    stats_.wait_s += seconds_since(t0);
  }
  for (PsStatus& status : p.status) {
    if (status.ok == 0) {
      status.text[kPsErrorBytes - 1] = '\0';
      throw Error(status.text);
    }
    if (status.step != p.step) {
      throw CommError(fmt::format("worker {}: the parameter server's reply is for step {}, not step {}", roles_.index(),
                                  status.step, p.step));
    }
  }
  std::int64_t updates = p.status.front().updates;
  for (const PsStatus& status : p.status) updates = std::min(updates, status.updates);
  stats_.server_updates = std::max(stats_.server_updates, updates);
  for (const std::vector<float>& shard : p.shards) stats_.bytes_pulled += shard.size() * sizeof(float);
}

void ParameterServerClient::install(Pull& p, std::int64_t at_step) {
  settle(p);
  if (server_layout_) {
    install_direct(p);
  } else {
    for (UnitId u = 0; u < static_cast<UnitId>(units()); ++u) {
      const std::vector<float>& shard = p.shards[static_cast<std::size_t>(u)];
      if (shard.empty()) continue;
      if (stage_ == 3) {
        store_.store(u, {ArrayKind::params}, shard.data());  // any tier
      } else {
        std::memcpy(window(u, ArrayKind::params), shard.data(), shard.size() * sizeof(float));
      }
    }
  }
  version_ = p.step;
  stats_.lags.push_back(at_step - p.step);
}

void ParameterServerClient::install_direct(const Pull& p) {
  std::vector<float> full;
  for (UnitId u = 0; u < static_cast<UnitId>(units()); ++u) {
    const std::size_t n = wire_.unit(u).shard, mine = layout_.unit(u).shard;
    if (n == 0) continue;
    // The servers' windows side by side, cut to this worker's array.
    full.resize(mine);
    for (std::size_t link = 0; link < peers_.size() && link * n < mine; ++link) {
      const std::vector<float>& shard = p.shards[link * units() + static_cast<std::size_t>(u)];
      std::copy_n(shard.begin(), std::min(n, mine - link * n), full.begin() + static_cast<std::ptrdiff_t>(link * n));
    }
    if (stage_ == 3) {
      store_.store(u, {ArrayKind::params}, full.data());  // any tier
    } else {
      std::memcpy(window(u, ArrayKind::params), full.data(), mine * sizeof(float));
    }
  }
}

void ParameterServerClient::fetch_state(const std::function<std::uint64_t(UnitId u, int k)>& expected,
                                        const StatePiece& use) {
  ZS_CHECK(connected_, "ParameterServerClient::fetch_state before connect()");
  ZS_CHECK(!server_layout_, "fetch_state with parameter_server.push \"direct\"");
  ZS_CHECK(pending_.empty(), "fetch_state with {} pulls in flight: drain() first", pending_.size());
  Communicator& world = roles_.world();
  const PsPush ask{.kind = PsKind::state};
  world.send(&ask, sizeof ask, DType::u8, peers_[0]);
  std::vector<std::byte> buf;
  std::exception_ptr failed;
  for (UnitId u = 0; u < static_cast<UnitId>(units()); ++u) {
    for (int k = -1; k < store_.states(u).arrays(); ++k) {
      const std::uint64_t bytes = ps_recv_piece(world, peers_[0], buf);
      if (bytes == kPsFailed) {
        PsStatus status;
        world.recv(&status, sizeof status, DType::u8, peers_[0]);
        status.text[kPsErrorBytes - 1] = '\0';
        throw Error(status.text);
      }
      stats_.bytes_pulled += bytes;
      // After a failure the stream is still read to its end, so that the
      // next message is the next reply.
      if (failed) continue;
      try {
        const std::uint64_t want = expected(u, k);
        if (bytes != want) {
          throw InvariantError(fmt::format("worker {}: unit \"{}\"'s {} from the parameter server has {} bytes, not {}",
                                           roles_.index(), layout_.unit(u).name,
                                           k < 0 ? std::string("parameter shard") : fmt::format("state array {}", k),
                                           bytes, want));
        }
        use(u, k, std::span<const std::byte>(buf.data(), buf.size()));
      } catch (...) {
        failed = std::current_exception();
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void ParameterServerClient::begin_put_state() {
  ZS_CHECK(connected_, "ParameterServerClient::begin_put_state before connect()");
  ZS_CHECK(!server_layout_, "begin_put_state with parameter_server.push \"direct\"");
  ZS_CHECK(pending_.empty(), "begin_put_state with {} pulls in flight: drain() first", pending_.size());
  const PsPush put{.kind = PsKind::put_state};
  roles_.world().send(&put, sizeof put, DType::u8, peers_[0]);
}

void ParameterServerClient::put_piece(std::span<const std::byte> bytes) {
  ps_send_piece(roles_.world(), peers_[0], bytes);
  stats_.bytes_pushed += bytes.size();
}

void ParameterServerClient::end_put_state(std::int64_t version) {
  PsStatus status;
  roles_.world().recv(&status, sizeof status, DType::u8, peers_[0]);
  params_dirty_ = false;  // the server holds the parameters just sent
  version_ = pushed_ = version;
  if (status.ok == 0) {
    status.text[kPsErrorBytes - 1] = '\0';
    throw Error(status.text);
  }
}

void ParameterServerClient::abort_put_state() noexcept {
  try {
    const std::uint64_t failed = kPsFailed;
    roles_.world().send(&failed, sizeof failed, DType::u8, peers_[0]);
    PsStatus status;
    roles_.world().recv(&status, sizeof status, DType::u8, peers_[0]);
  } catch (...) {
    // The server is gone; the caller's error stands.
  }
}

}  // namespace zeroshard
