// ParameterServerRoles: see runtime/ps/ps_roles.h.
#include "runtime/ps/ps_roles.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "comm/node_groups.h"
#include "core/error.h"

namespace zeroshard {

namespace {

// The world ranks that serve: parameter_server.placement's hosts taken in
// turn, each giving its next unused rank (rank order), until S are chosen;
// without placement the last S ranks. `on_host` is rank r's flags, one
// per placement host, at r * hosts.
std::vector<int> choose_servers(const ParameterServerConfig& c, int world, const std::vector<std::uint8_t>& on_host,
                                const std::string& source) {
  const int S = world - ps_training_ranks(c.servers, world, source);
  std::vector<int> out;
  if (c.placement.empty()) {
    for (int r = world - S; r < world; ++r) out.push_back(r);
    return out;
  }
  const std::size_t hosts = c.placement.size();
  std::vector<std::vector<int>> ranks(hosts);
  for (int r = 0; r < world; ++r) {
    for (std::size_t h = 0; h < hosts; ++h) {
      if (on_host[static_cast<std::size_t>(r) * hosts + h] != 0) ranks[h].push_back(r);
    }
  }
  for (std::size_t h = 0; h < hosts; ++h) {
    if (ranks[h].empty()) {
      throw ConfigError(
          fmt::format("{}: \"parameter_server.placement\"[{}] = \"{}\": no rank of the job runs on that "
                      "host",
                      source, h, c.placement[h]));
    }
  }
  std::vector<std::size_t> next(hosts, 0);
  for (bool took = true; took && static_cast<int>(out.size()) < S;) {
    took = false;
    for (std::size_t h = 0; h < hosts && static_cast<int>(out.size()) < S; ++h) {
      while (next[h] < ranks[h].size() && std::find(out.begin(), out.end(), ranks[h][next[h]]) != out.end()) {
        ++next[h];  // two placement entries may name one host
      }
      if (next[h] < ranks[h].size()) {
        out.push_back(ranks[h][next[h]++]);
        took = true;
      }
    }
  }
  if (static_cast<int>(out.size()) < S) {
    throw ConfigError(
        fmt::format("{}: \"parameter_server.placement\": its hosts run {} ranks, fewer than "
                    "parameter_server.servers = {}",
                    source, out.size(), S));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ParameterServerRoles::ParameterServerRoles(Communicator& world, const ParameterServerConfig& config,
                                           const std::string& source)
    : world_(world), direct_(config.push == PsPushMode::direct) {
  ZS_CHECK(config.enabled(), "ParameterServerRoles without parameter_server.servers");
  const std::size_t hosts = config.placement.size();
  std::vector<std::uint8_t> on_host(hosts * static_cast<std::size_t>(world.world_size()), 0);
  if (hosts > 0) {
    const std::string me = this_host_id();
    std::vector<std::uint8_t> mine(hosts, 0);
    for (std::size_t h = 0; h < hosts; ++h) mine[h] = config.placement[h] == me ? 1 : 0;
    world.all_gather(mine.data(), on_host.data(), hosts, DType::u8);
  }
  // The same inputs on every rank: the same servers or the same error.
  server_ranks_ = choose_servers(config, world.world_size(), on_host, source);
  for (int r = 0; r < world.world_size(); ++r) {
    if (!std::binary_search(server_ranks_.begin(), server_ranks_.end(), r)) worker_ranks_.push_back(r);
  }
  const int me = world.rank();
  server_ = std::binary_search(server_ranks_.begin(), server_ranks_.end(), me);
  const std::vector<int>& mine = server_ ? server_ranks_ : worker_ranks_;
  index_ = static_cast<int>(std::lower_bound(mine.begin(), mine.end(), me) - mine.begin());
  group_ = world.split(server_ ? 1 : 0, index_);
  if (direct_ && !server_) solo_ = group_->split(index_, 0);
}

void ParameterServerRoles::check_push_grad_dtype(DType grad_dtype) const {
  ZS_CHECK(grad_dtype == DType::f32 || (grad_dtype == DType::bf16 && direct_),
           "pushed gradients as {} (\"direct\" pushes take fp32 or bf16, \"reduce\" fp32)", dtype_name(grad_dtype));
}

std::vector<int> ParameterServerRoles::hosted_workers(int s) const {
  if (direct_) {
    std::vector<int> all;
    for (int w = 0; s >= 0 && s < servers() && w < workers(); ++w) all.push_back(w);
    return all;
  }
  return ps_hosted_workers(workers(), servers(), s);
}

}  // namespace zeroshard
