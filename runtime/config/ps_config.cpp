// The "parameter_server" section's checks; see runtime/config/ps_config.h.
#include "runtime/config/ps_config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

void ParameterServerConfig::collect_problems(int stage, DType compute_dtype,
                                             std::optional<DType> communication_data_type, bool muon,
                                             bool overlap_optimizer_step, ConfigDiagnostics& d) const {
  auto bad = [&](const std::string& key, const std::string& value, const std::string& why) {
    d.problem(fmt::format("\"parameter_server.{}\" = {} {}", key, value, why));
  };
  if (servers < 0) bad("servers", std::to_string(servers), "must be >= 0 (0: no parameter servers)");
  if (staleness < 0) {
    bad("staleness", std::to_string(staleness), "must be >= 0 (0: synchronous; s: parameters at most s steps old)");
  }
  for (const std::string& host : placement) {
    if (host.empty()) bad("placement", "[..., \"\", ...]", "names an empty host");
  }
  if (!placement.empty() && static_cast<std::int64_t>(placement.size()) > servers) {
    bad("placement", fmt::format("{} hosts", placement.size()),
        fmt::format("names more hosts than parameter_server.servers ({})", servers));
  }
  if (staleness_aware_lr && push != PsPushMode::direct) {
    bad("staleness_aware_lr", "true",
        "needs \"parameter_server.push\" = \"direct\" (a \"reduce\" push's parameters miss exactly "
        "parameter_server.staleness updates, the same for every push)");
  }
  if (!enabled()) {
    if (staleness_aware_lr && push == PsPushMode::direct) {
      d.warn("\"parameter_server.staleness_aware_lr\" has no effect without parameter_server.servers");
    }
    if (staleness > 0) {
      d.warn(
          fmt::format("\"parameter_server.staleness\" = {} has no effect without parameter_server.servers", staleness));
    }
    return;
  }
  const std::string s = std::to_string(servers);
  if (stage < 1) {
    bad("servers", s, "needs zero_optimization.stage 1, 2 or 3 (the servers hold the workers' optimizer shards)");
  }
  if (compute_dtype != DType::f32) {
    bad("servers", s,
        fmt::format("needs fp32 training (bf16.enabled / fp16.enabled: the compute dtype is {}); the servers "
                    "hold the fp32 parameters the workers train on",
                    dtype_name(compute_dtype)));
  }
  if (muon) bad("servers", s, "is not supported with optimizer.type \"Muon\" (its matrices span shards)");
  if (overlap_optimizer_step) bad("servers", s, "and zeroshard.overlap_optimizer_step cannot be combined");
  if (direct() && communication_data_type == DType::f16) {
    d.problem(
        "\"communication_data_type\" = \"fp16\" cannot carry the gradients of \"parameter_server.push\" = "
        "\"direct\" (fp32 training has no loss scale to keep them in fp16's range): use bf16 or fp32");
  }
}

int ps_training_ranks(std::int64_t servers, int world_size, const std::string& source) {
  if (servers <= 0) return world_size;
  if (servers >= world_size) {
    throw ConfigError(fmt::format("{}\"parameter_server.servers\" = {} leaves no worker among the job's {} ranks (it "
                                  "must be below the world size)",
                                  source.empty() ? "" : source + ": ", servers, world_size));
  }
  return world_size - static_cast<int>(servers);
}

std::vector<int> ps_hosted_workers(int workers, int servers, int server) {
  std::vector<int> out;
  if (server < 0 || server >= servers) return out;
  for (int w = server; w < workers; w += servers) out.push_back(w);
  return out;
}

}  // namespace zeroshard
