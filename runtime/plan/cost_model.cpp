#include "runtime/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/sharding/array_plan.h"
#include "core/durable_file.h"
#include "runtime/engine/engine_options.h"
#include "runtime/plan/memory_estimate.h"

namespace zeroshard {

double CollectiveRates::time(double b) const {
  if (bytes.empty() || bytes.size() != seconds.size()) {
    throw ConfigError("the calibration has no collective timings (calibrate under mpirun with 2 or more ranks)");
  }
  if (b <= 0) return 0;
  if (b <= bytes.front()) return seconds.front();
  if (b >= bytes.back()) return seconds.back() * b / bytes.back();
  const auto hi = static_cast<std::size_t>(std::upper_bound(bytes.begin(), bytes.end(), b) - bytes.begin());
  const std::size_t lo = hi - 1;
  const double f = (b - bytes[lo]) / (bytes[hi] - bytes[lo]);
  return seconds[lo] + f * (seconds[hi] - seconds[lo]);
}

namespace {

nlohmann::json rates_json(const CollectiveRates& c) { return {{"bytes", c.bytes}, {"seconds", c.seconds}}; }

template <class T>
T get(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.is_object() || !j.contains(key)) throw ConfigError(fmt::format("{}: missing key '{}'", source, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(fmt::format("{}: key '{}' has the wrong type ({})", source, key, j.at(key).dump()));
  }
}

CollectiveRates rates_from(const nlohmann::json& j, const char* key, const std::string& source) {
  const auto c = get<nlohmann::json>(j, key, source);
  const std::string where = fmt::format("{}: {}", source, key);
  CollectiveRates r{get<std::vector<double>>(c, "bytes", where), get<std::vector<double>>(c, "seconds", where)};
  if (r.bytes.size() != r.seconds.size()) throw ConfigError(where + ": 'bytes' and 'seconds' differ in length");
  for (std::size_t i = 0; i < r.bytes.size(); ++i) {
    if (!(r.bytes[i] > 0) || !(r.seconds[i] >= 0) || (i > 0 && !(r.bytes[i] > r.bytes[i - 1]))) {
      throw ConfigError(fmt::format("{}: entry {} (bytes {}, seconds {}) is not positive and ascending", where, i,
                                    r.bytes[i], r.seconds[i]));
    }
  }
  return r;
}

// Seconds of `total` elements cut into buckets of `bucket` elements, each
// costing cost(bytes of the bucket).
template <class F>
double bucketed(double total, double bucket, double elem_bytes, F cost) {
  if (total <= 0) return 0;
  bucket = std::max(1.0, bucket);
  const double full = std::floor(total / bucket);
  const double rest = total - full * bucket;
  return full * cost(bucket * elem_bytes) + (rest > 0 ? cost(rest * elem_bytes) : 0.0);
}

// Element counts of one pass's gradient reduction collectives, in launch
// order, as GradReducer forms them ([Note: gradient buckets]): units in
// backward order; a unit already in the communication dtype is reduced in
// its own buffer (stages 0/1: in runs of the bucket; stages 2/3: whole, if
// its shard fits a bucket), the rest packed into buckets across units.
std::vector<double> reduction_collectives(const FlatLayout& layout, int stage, std::size_t bucket, bool in_place) {
  const auto world = static_cast<std::size_t>(layout.world_size());
  const std::size_t total = layout.total_padded();
  std::size_t cap = std::max<std::size_t>(1, std::min(bucket, total));  // all-reduce bucket, elements
  if (stage <= 1) cap = std::max(world, cap / world * world);
  const std::size_t shard_cap = std::max<std::size_t>(1, std::min(bucket / world, total / world));
  std::vector<double> out;
  std::size_t packed = 0;  // elements waiting in the open packed bucket
  const std::size_t packed_cap = stage <= 1 ? cap : shard_cap * world;
  const auto& units = layout.units();
  for (std::size_t i = units.size(); i-- > 0;) {
    const UnitInfo& u = units[i];
    if (in_place && stage <= 1) {
      for (std::size_t a = 0; a < u.padded; a += cap) out.push_back(static_cast<double>(std::min(cap, u.padded - a)));
    } else if (in_place && u.shard <= shard_cap) {
      if (u.padded > 0) out.push_back(static_cast<double>(u.padded));
    } else {
      for (packed += u.padded; packed >= packed_cap; packed -= packed_cap) out.push_back(static_cast<double>(packed_cap));
    }
  }
  if (packed > 0) out.push_back(static_cast<double>(packed));
  return out;
}

}  // namespace

nlohmann::json MachineRates::to_json() const {
  return {{"isa", isa},
          {"threads", threads},
          {"world_size", world_size},
          {"optimizer_bandwidth", optimizer_bandwidth},
          {"disk_read", disk_read},
          {"disk_write", disk_write},
          {"disk_read_file", disk_read_file},
          {"disk_write_file", disk_write_file},
          {"all_to_all", rates_json(all_to_all)},
          {"all_gather", rates_json(all_gather)},
          {"all_reduce", rates_json(all_reduce)}};
}

MachineRates MachineRates::from_json(const nlohmann::json& j, const std::string& source) {
  MachineRates r;
  r.isa = get<std::string>(j, "isa", source);
  r.threads = get<int>(j, "threads", source);
  r.world_size = get<int>(j, "world_size", source);
  r.optimizer_bandwidth = get<double>(j, "optimizer_bandwidth", source);
  r.disk_read = get<double>(j, "disk_read", source);
  r.disk_write = get<double>(j, "disk_write", source);
  r.disk_read_file = get<double>(j, "disk_read_file", source);
  r.disk_write_file = get<double>(j, "disk_write_file", source);
  r.all_to_all = rates_from(j, "all_to_all", source);
  r.all_gather = rates_from(j, "all_gather", source);
  r.all_reduce = rates_from(j, "all_reduce", source);
  if (r.world_size < 1) throw ConfigError(fmt::format("{}: world_size {} is not positive", source, r.world_size));
  if (!(r.optimizer_bandwidth > 0)) throw ConfigError(source + ": optimizer_bandwidth must be positive");
  if (!(r.disk_read >= 0) || !(r.disk_write >= 0) || !(r.disk_read_file >= 0) || !(r.disk_write_file >= 0)) throw ConfigError(source + ": disk rates must not be negative");
  return r;
}

MachineRates MachineRates::from_file(const std::string& path) {
  const std::string text = read_text_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(fmt::format("{}: not JSON (byte {})", path, e.byte));
  }
  return from_json(j, path);
}

double optimizer_bytes_per_element(const EngineConfig& config) {
  const bool mixed = config.compute_dtype != DType::f32;
  // Each state's bytes per element (4 fp32, 2 bf16, 1 + 4 / block 8-bit:
  // optimizer/state_format.h), large units assumed.
  const double states = state_bytes_per_element(config.optimizer.states, optimizer_state_count(config.optimizer));
  // weight (param or master) read + written, each state read + written, the gradient read,
  // and in mixed precision the compute copy written.
  return 8.0 + 2.0 * states + (mixed ? 2.0 : 4.0) + (mixed ? 2.0 : 0.0);
}

nlohmann::json StepCost::to_json() const {
  return {{"loop_s", loop},           {"reduction_s", reduction}, {"gather_s", gather},
          {"comm_exposed_s", comm_exposed}, {"optimizer_s", optimizer}, {"swap_s", swap},
          {"swap_exposed_s", swap_exposed}, {"step_s", step()}};
}

StepCost predict_step(const FlatLayout& layout, const EngineConfig& config, int rank, const MachineRates& rates,
                      double loop_seconds) {
  const int n = layout.world_size();
  const int stage = config.zero.stage;
  const double micro = static_cast<double>(std::max<std::int64_t>(1, config.gradient_accumulation_steps));
  const double total = static_cast<double>(layout.total_padded());
  const double numel = std::max(1.0, static_cast<double>(layout.total_numel()));
  const double b_c = static_cast<double>(dtype_size(config.compute_dtype));
  const double b_m = static_cast<double>(dtype_size(config.communication_data_type.value_or(DType::f32)));
  const bool overlap = config.zero.overlap();
  StepCost c;
  c.loop = loop_seconds * micro;
  const double fwd = loop_seconds / 3.0, bwd = loop_seconds - fwd;

  // Collectives at world n, from the calibrated world (bus-bandwidth scaling).
  const bool comm = n > 1;
  if (comm && rates.world_size < 2) {
    throw ConfigError(fmt::format("the calibration was measured at 1 rank: collectives at {} ranks need a "
                                  "calibration under mpirun with 2 or more ranks",
                                  n));
  }
  const double scale = comm ? ((n - 1.0) / n) / ((rates.world_size - 1.0) / rates.world_size) : 0.0;
  auto a2a = [&](double b) { return scale * rates.all_to_all.time(b); };
  auto ag = [&](double b) { return scale * rates.all_gather.time(b); };
  auto ordered_all_reduce = [&](double b) { return a2a(b) + ag(b); };
  const auto ag_bucket = static_cast<double>(config.zero.allgather_bucket_size);

  // Gradient reduction: once per step at stages 0/1, every micro-batch at 2/3.
  double reduce_once = 0, reduce_last = 0;
  if (comm) {
    const DType comm_dtype = config.communication_data_type.value_or(DType::f32);
    for (const double elems : reduction_collectives(layout, stage, config.zero.reduce_bucket_size,
                                                    comm_dtype == config.compute_dtype)) {
      reduce_last = stage <= 1 ? ordered_all_reduce(elems * b_m) : a2a(elems * b_m);
      reduce_once += reduce_last;
    }
  }
  const double reductions = stage <= 1 ? 1.0 : micro;
  c.reduction = reductions * reduce_once;
  const double reduce_exposed_once = overlap ? std::max(0.0, reduce_once - reduce_last - bwd) + reduce_last : reduce_once;
  c.comm_exposed = reductions * reduce_exposed_once;

  // Where each array lives: the plan the ArrayStore allocates.
  const ArrayPlan arrays = plan_arrays(layout, engine_array_plan_options(config, rank));
  const bool param_nvme = arrays.nvme_param_bytes > 0;
  if ((param_nvme || arrays.nvme_optimizer_bytes > 0) && !(rates.disk_read > 0 && rates.disk_write > 0)) {
    throw ConfigError("nvme offload needs disk rates: calibrate with --nvme-path");
  }

  // Parameter all-gathers.
  if (stage == 1 || stage == 2) {
    if (comm) {
      c.gather = bucketed(total, ag_bucket, b_c, ag);
      c.comm_exposed += c.gather;
    }
  } else if (stage == 3) {
    const auto& units = layout.units();
    const std::size_t U = units.size();
    // Per unit: its all-gather, its parameter shard's disk read (nvme units),
    // and its share of the forward and backward compute.
    std::vector<double> gather(U), swap_in(U), cf(U), cb(U);
    for (std::size_t u = 0; u < U; ++u) {
      swap_in[u] = arrays.units[u].param_tier == MemTier::nvme
                    ? static_cast<double>(units[u].shard) * b_c / rates.disk_read + rates.disk_read_file
                    : 0.0;
      gather[u] = comm ? ag(static_cast<double>(units[u].padded) * b_c) : 0.0;
      const double share = static_cast<double>(units[u].numel) / numel;
      cf[u] = fwd * share;
      cb[u] = bwd * share;
    }
    // Each unit fetched: forward 0..U-1, backward U-2..0 (U-1 reused); its
    // read and gather wait together, hidden under the previous unit's compute.
    double gathers = 0, reads = 0, exposed = 0;
    auto fetch = [&](std::size_t u, double hidden_under) {
      gathers += gather[u];
      reads += swap_in[u];
      exposed += std::max(0.0, gather[u] + swap_in[u] - hidden_under);
    };
    for (std::size_t u = 0; u < U; ++u) fetch(u, overlap && u > 0 ? cf[u - 1] : 0.0);
    for (std::size_t k = 1; k < U; ++k) fetch(U - 1 - k, overlap ? cb[U - k] : 0.0);
    c.gather = micro * gathers;
    c.swap += micro * reads;
    c.comm_exposed += micro * exposed;  // exposed reads included: they wait like the gathers
  }

  // The update.
  // Stage 0 updates every element; stages 1-3 this rank's shard (units are
  // padded to a multiple of the world size).
  const double shard = stage == 0 ? total : total / n;
  c.optimizer = shard * optimizer_bytes_per_element(config) / rates.optimizer_bandwidth;

  // Optimizer swap: the swapped arrays (master weights, states, and at
  // stages 2/3 the gradient shards) read and written once per step; nvme
  // parameter shards written once after the update.
  double opt_files = 0, param_files = 0;
  const double arrays_per_unit = (config.compute_dtype != DType::f32 ? 1 : 0) + (stage >= 2 ? 1 : 0);
  for (const UnitTiers& u : arrays.units) {
    if (u.optimizer_tier == MemTier::nvme) {
      opt_files += (arrays_per_unit + u.states.arrays()) * static_cast<double>(u.subgroups.size());
    }
    if (u.param_tier == MemTier::nvme) param_files += 1;
  }
  const auto nvme_opt = static_cast<double>(arrays.nvme_optimizer_bytes);
  const double opt_swap = nvme_opt > 0 ? nvme_opt / rates.disk_read + nvme_opt / rates.disk_write +
                                             opt_files * (rates.disk_read_file + rates.disk_write_file)
                                       : 0.0;
  const double param_write = param_nvme ? static_cast<double>(arrays.nvme_param_bytes) / rates.disk_write +
                                              param_files * rates.disk_write_file
                                        : 0.0;
  c.swap += opt_swap + param_write;
  const auto& oo = config.offload.optimizer;
  const bool pipelined = oo.pipeline_read && oo.pipeline_write && oo.buffer_count >= 2;
  const double disk = opt_swap + param_write;
  c.swap_exposed = pipelined ? std::max(disk, c.optimizer) - c.optimizer : disk;
  return c;
}

}  // namespace zeroshard
