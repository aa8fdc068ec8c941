#include "runtime/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/quant/symmetric_quant.h"
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

// Hosts of `per_node` consecutive ranks of a world of n (0 or n: one host).
int ranks_per_host(int n, int per_node, const std::string& source) {
  if (per_node <= 0 || per_node >= n) return n;
  if (n % per_node != 0) {
    throw ConfigError(fmt::format("{}: {} ranks per host do not divide the data-parallel world of {}", source,
                                  per_node, n));
  }
  return per_node;
}

// Members of rank r's hpZ group (k consecutive ranks) on other hosts (L
// consecutive ranks each).
int remote_group_members(int r, int k, int per_host) {
  const int first = r / k * k;
  int remote = 0;
  for (int q = first; q < first + k; ++q) remote += q / per_host != r / per_host ? 1 : 0;
  return remote;
}

}  // namespace

nlohmann::json CrossHostTraffic::to_json() const {
  return {{"parameter_gathers", parameter_gathers},
          {"gradient_reduction", gradient_reduction},
          {"norm", norm},
          {"total", total()}};
}

std::uint64_t cross_host_gather_bytes(const FlatLayout& layout, const EngineConfig& config, int ranks_per_node,
                                      UnitId u, bool group) {
  const int n = layout.world_size();
  const int per_host = ranks_per_host(n, ranks_per_node, config.source);
  if (per_host == n) return 0;
  const UnitInfo& info = layout.unit(u);
  const ZeroppConfig& zpp = config.zero.zeropp;
  const std::uint64_t e = dtype_size(config.compute_dtype);
  if (!group) {
    const std::uint64_t block =
        zpp.quantized_weights ? kernels::sym_quant_chunk_bytes(info.shard, zpp.weight_format()) : info.shard * e;
    return static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n - per_host) * block;
  }
  const int k = static_cast<int>(zpp.hpz_partition_size);
  std::uint64_t bytes = 0;
  for (int r = 0; r < n && k > 1; ++r) {
    bytes += info.padded / static_cast<std::size_t>(k) * e * static_cast<std::uint64_t>(remote_group_members(r, k, per_host));
  }
  return bytes;
}

CrossHostTraffic cross_host_traffic(const FlatLayout& layout, const EngineConfig& config, int ranks_per_node) {
  const int n = layout.world_size();
  const int per_host = ranks_per_host(n, ranks_per_node, config.source);
  CrossHostTraffic t;
  if (per_host == n) return t;
  const auto N = static_cast<std::uint64_t>(n);
  const auto R = static_cast<std::uint64_t>(n - per_host);
  const auto H = static_cast<std::uint64_t>(n / per_host);
  const auto micro = static_cast<std::uint64_t>(std::max<std::int64_t>(1, config.gradient_accumulation_steps));
  const int stage = config.zero.stage;
  const ZeroppConfig& zpp = config.zero.zeropp;
  const std::uint64_t e = dtype_size(config.compute_dtype);
  const DType comm_dtype = config.communication_data_type.value_or(DType::f32);
  const std::uint64_t m = dtype_size(comm_dtype);
  const auto& units = layout.units();
  const std::uint64_t U = units.size();
  if (stage == 3 && U > 0) {
    // One world gather of each unit: every rank's shard (or chunk) to the R others.
    std::uint64_t world_gather = 0, group_gather = 0;
    const int k = zpp.hpz() ? static_cast<int>(zpp.hpz_partition_size) : 1;
    for (const UnitInfo& u : units) {
      const std::uint64_t block =
          zpp.quantized_weights ? kernels::sym_quant_chunk_bytes(u.shard, zpp.weight_format()) : u.shard * e;
      world_gather += N * R * block;
      for (int r = 0; r < n && k > 1; ++r) {
        group_gather += u.padded / static_cast<std::size_t>(k) * e * static_cast<std::uint64_t>(remote_group_members(r, k, per_host));
      }
    }
    // Per micro-batch 2U - 1 gathers, i.e. the world's U (the forward) and
    // U - 1 more of all units but the last (its size averaged would not be
    // exact: count them unit by unit).
    std::uint64_t later = 0, later_group = 0;
    for (std::size_t u = 0; u + 1 < units.size(); ++u) {
      const UnitInfo& info = units[u];
      later += N * R *
               (zpp.quantized_weights ? kernels::sym_quant_chunk_bytes(info.shard, zpp.weight_format()) : info.shard * e);
      for (int r = 0; r < n && k > 1; ++r) {
        later_group += info.padded / static_cast<std::size_t>(k) * e *
                       static_cast<std::uint64_t>(remote_group_members(r, k, per_host));
      }
    }
    if (k > 1) {
      // The first forward over the world, everything else in the groups.
      t.parameter_gathers = world_gather + later_group + (micro - 1) * (group_gather + later_group);
    } else {
      t.parameter_gathers = micro * (world_gather + later);
    }
  } else if (stage == 1 || stage == 2) {
    for (const UnitInfo& u : units) t.parameter_gathers += N * R * u.shard * e;
  }
  // Gradient reductions: the buckets the GradReducer forms.
  const bool qgz = zpp.quantized_gradients && stage >= 2;
  std::uint64_t once = 0;
  for (const double elems : reduction_collectives(layout, stage, static_cast<std::size_t>(config.zero.reduce_bucket_size),
                                                  comm_dtype == config.compute_dtype)) {
    const auto E = static_cast<std::uint64_t>(elems);
    if (stage <= 1) {
      once += 2 * E * m * R;
    } else if (qgz) {
      once += N * (H - 1) * kernels::sym_quant_chunk_bytes(E / N, zpp.gradient_format());
    } else {
      once += E * m * R;
    }
  }
  t.gradient_reduction = stage <= 1 ? once : micro * once;
  // The norm exchange (runtime/engine/grad_norm.cpp): six doubles per rank
  // all-gathered (the two sums, the first non-finite unit, the reduce
  // order's hash in two halves, the data-parallel group); the native order
  // all-reduces the two sums first.
  t.norm = config.reduction_order == ReductionOrder::rank ? N * R * 48 : N * (2 * 16 * R / N) + N * R * 48;
  return t;
}

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
          {"all_reduce", rates_json(all_reduce)},
          {"quantize_rate", quantize_rate},
          {"ranks_per_node", ranks_per_node},
          {"link_bandwidth", link_bandwidth}};
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
  // Keys added with ZeRO++: optional (a calibration made before them has none).
  if (j.contains("quantize_rate")) r.quantize_rate = get<double>(j, "quantize_rate", source);
  if (j.contains("ranks_per_node")) r.ranks_per_node = get<int>(j, "ranks_per_node", source);
  if (j.contains("link_bandwidth")) r.link_bandwidth = get<double>(j, "link_bandwidth", source);
  if (!(r.quantize_rate >= 0) || r.ranks_per_node < 0 || !(r.link_bandwidth >= 0)) {
    throw ConfigError(source + ": quantize_rate, ranks_per_node and link_bandwidth must not be negative");
  }
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
          {"swap_exposed_s", swap_exposed}, {"cross_host_bytes", cross_host_bytes}, {"step_s", step()}};
}

StepCost predict_step(const FlatLayout& layout, const EngineConfig& config, int rank, const MachineRates& rates,
                      double loop_seconds) {
  if (config.optimizer.kind == OptimizerKind::muon) {
    // Neither Newton-Schulz's GEMM rate nor the owners' gather and scatter
    // is calibrated: no number rather than one that leaves them out.
    throw ConfigError(fmt::format(
        "{}: the step cost model does not cover optimizer.type Muon (its Newton-Schulz iterations and the "
        "gather to and scatter from each matrix's owner are not calibrated); the memory estimate does",
        config.source));
  }
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
  // A collective of a group of g ranks, from the calibrated world.
  auto group_scale = [&](double g) {
    return g > 1 ? ((g - 1.0) / g) / ((rates.world_size - 1.0) / rates.world_size) : 0.0;
  };
  const double scale = comm ? group_scale(n) : 0.0;
  auto a2a = [&](double b) { return scale * rates.all_to_all.time(b); };
  auto ag = [&](double b) { return scale * rates.all_gather.time(b); };
  auto ordered_all_reduce = [&](double b) { return a2a(b) + ag(b); };
  const auto ag_bucket = static_cast<double>(config.zero.allgather_bucket_size);
  // The hosts: L ranks each (L = n: one host, no link), R of a rank's
  // peers on other hosts; a collective's cross-host bytes per rank pass
  // the host's link L at a time.
  const int per_host = comm ? ranks_per_host(n, rates.ranks_per_node, config.source) : n;
  const double L = per_host, R = n - per_host, H = static_cast<double>(n) / per_host;
  auto link = [&](double rank_bytes) {
    return rates.link_bandwidth > 0 && R > 0 ? L * rank_bytes / rates.link_bandwidth : 0.0;
  };
  auto quant = [&](double elements) { return rates.quantize_rate > 0 ? elements / rates.quantize_rate : 0.0; };
  const ZeroppConfig& zpp = config.zero.zeropp;
  c.cross_host_bytes = comm ? static_cast<double>(cross_host_traffic(layout, config, per_host).total()) : 0.0;

  // Gradient reduction: once per step at stages 0/1, every micro-batch at 2/3.
  double reduce_once = 0, reduce_last = 0;
  if (comm) {
    const DType comm_dtype = config.communication_data_type.value_or(DType::f32);
    const bool qgz = zpp.quantized_gradients && stage >= 2;
    for (const double elems : reduction_collectives(layout, stage, config.zero.reduce_bucket_size,
                                                    comm_dtype == config.compute_dtype)) {
      const double fill = elems / n;
      if (stage <= 1) {
        reduce_last = ordered_all_reduce(elems * b_m) + link(2.0 * fill * b_m * R);
      } else if (qgz) {
        // [Note: hierarchical quantized reduce-scatter]: chunks inside the
        // host, then across; the kernels over every element once or twice.
        const double chunk = static_cast<double>(
            kernels::sym_quant_chunk_bytes(static_cast<std::size_t>(fill), zpp.gradient_format()));
        reduce_last = quant(elems);
        if (L > 1) reduce_last += group_scale(L) * rates.all_to_all.time(n * chunk);
        if (H > 1) reduce_last += group_scale(H) * rates.all_to_all.time(H * chunk) + link((H - 1) * chunk);
        if (L > 1 && H > 1) reduce_last += quant(H * fill);
      } else {
        reduce_last = a2a(elems * b_m) + link(fill * b_m * R);
      }
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
      c.gather = bucketed(total, ag_bucket, b_c, ag) + link(total / n * b_c * R);
      c.comm_exposed += c.gather;
    }
  } else if (stage == 3) {
    const auto& units = layout.units();
    const std::size_t U = units.size();
    // Per unit: its all-gather, its parameter shard's disk read (nvme units),
    // and its share of the forward and backward compute.
    std::vector<double> gather(U), group(U), swap_in(U), cf(U), cb(U);
    const int k = zpp.hpz() ? static_cast<int>(zpp.hpz_partition_size) : 1;
    double group_remote = 0;  // mean members of a rank's hpZ group on other hosts
    for (int r = 0; r < n && k > 1; ++r) group_remote += remote_group_members(r, k, per_host);
    group_remote /= n;
    for (std::size_t u = 0; u < U; ++u) {
      swap_in[u] = arrays.units[u].param_tier == MemTier::nvme
                    ? static_cast<double>(units[u].shard) * b_c / rates.disk_read + rates.disk_read_file
                    : 0.0;
      const auto shard = static_cast<double>(units[u].shard), padded = static_cast<double>(units[u].padded);
      if (comm && zpp.quantized_weights) {
        // [Note: ZeRO++ unsharding]: every rank's chunk, dequantized.
        const auto chunk = static_cast<double>(kernels::sym_quant_chunk_bytes(units[u].shard, zpp.weight_format()));
        gather[u] = ag(n * chunk) + link(chunk * R) + quant(padded);
      } else if (comm) {
        gather[u] = ag(padded * b_c) + link(shard * b_c * R);
      }
      if (k > 1) {
        group[u] = group_scale(k) * rates.all_gather.time(padded * b_c) + link(padded / k * b_c * group_remote);
      }
      const double share = static_cast<double>(units[u].numel) / numel;
      cf[u] = fwd * share;
      cb[u] = bwd * share;
    }
    // Each unit fetched: forward 0..U-1, backward U-2..0 (U-1 reused); its
    // read and gather wait together, hidden under the previous unit's
    // compute. With hpZ only the first micro-batch's forward gathers over
    // the world; every other gather of the step is the group's.
    double gathers = 0, reads = 0, exposed = 0;
    auto fetch = [&](std::size_t u, double hidden_under, bool world) {
      const double g = world || k == 1 ? gather[u] : group[u];
      gathers += g;
      reads += swap_in[u];
      exposed += std::max(0.0, g + swap_in[u] - hidden_under);
    };
    for (std::int64_t m = 0; m < static_cast<std::int64_t>(micro); ++m) {
      for (std::size_t u = 0; u < U; ++u) fetch(u, overlap && u > 0 ? cf[u - 1] : 0.0, m == 0);
      for (std::size_t q = 1; q < U; ++q) fetch(U - 1 - q, overlap ? cb[U - q] : 0.0, false);
    }
    c.gather = gathers;
    c.swap += reads;
    c.comm_exposed += exposed;  // exposed reads included: they wait like the gathers
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
