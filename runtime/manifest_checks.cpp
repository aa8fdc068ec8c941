#include "runtime/manifest_checks.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/checkpoint_manifest.h"
#include "runtime/flat_layout.h"
#include "runtime/json_text.h"

namespace zeroshard {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& why) {
  throw IoError(fmt::format("{}: {}: {}", path, field, why));
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& path, const std::string& field) {
  if (a > UINT64_MAX - b) bad(path, field, fmt::format("{} + {} overflows 64 bits", a, b));
  return a + b;
}

}  // namespace

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& path, const std::string& field) {
  if (b != 0 && a > UINT64_MAX / b) bad(path, field, fmt::format("{} x {} overflows 64 bits", a, b));
  return a * b;
}

void check_json_depth(std::string_view text, const std::string& path, int max_depth) {
  if (const auto at = json_too_deep_at(text, max_depth)) {
    throw IoError(fmt::format("{}: JSON nested deeper than {} levels at byte {} (a manifest needs 5; "
                              "client_state may use the rest)",
                              path, max_depth, *at));
  }
}

void validate_manifest(const Manifest& m, const std::string& path) {
  if (m.tag.empty() || m.tag.find('/') != std::string::npos) {
    bad(path, "tag", fmt::format("\"{}\" is not a directory name", m.tag));
  }
  if (m.world_size < 1 || m.world_size > (1 << 24)) {
    bad(path, "world_size", fmt::format("{} is not a number of ranks (1 to 2^24)", m.world_size));
  }
  if (m.stage < 0 || m.stage > 3) bad(path, "stage", fmt::format("{} is not a ZeRO stage (0-3)", m.stage));
  if (m.compute_dtype != "f32" && m.compute_dtype != "bf16" && m.compute_dtype != "f16") {
    bad(path, "compute_dtype", fmt::format("\"{}\" is not f32, bf16 or f16", m.compute_dtype));
  }
  if (m.tensors.empty() || m.tensors.front() != "master") {
    bad(path, "tensors", "the first per-unit tensor must be \"master\" (the fp32 parameter values)");
  }
  const std::set<std::string> states = {"exp_avg", "exp_avg_sq", "momentum_buffer", "sum"};
  std::set<std::string> seen_tensors;
  for (std::size_t t = 1; t < m.tensors.size(); ++t) {
    if (!states.count(m.tensors[t]) || !seen_tensors.insert(m.tensors[t]).second) {
      bad(path, fmt::format("tensors[{}]", t),
          fmt::format("\"{}\" is not an optimizer state (exp_avg, exp_avg_sq, momentum_buffer, sum) or is listed "
                      "twice",
                      m.tensors[t]));
    }
  }
  // The state format (version 3; earlier versions read as fp32).
  if (m.states.type != "fp32" && m.states.type != "8bit" && m.states.type != "bf16") {
    bad(path, "state_format.type", fmt::format("\"{}\" is not fp32, 8bit or bf16", m.states.type.substr(0, 16)));
  }
  if (m.states.type == "bf16" && m.tensors != std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}) {
    bad(path, "state_format", "bf16 states are Adam's exp_avg and exp_avg_sq only");
  }
  if (m.states.type == "8bit") {
    const std::uint64_t b = m.states.block_size;
    if (b < 64 || b > 4096 || (b & (b - 1)) != 0) {
      bad(path, "state_format.block_size", fmt::format("{} is not a power of two from 64 to 4096", b));
    }
    if (m.tensors != std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}) {
      bad(path, "state_format", "8-bit states are Adam's exp_avg and exp_avg_sq only");
    }
  }
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    const std::string& f = m.units[u].state_format;
    // A unit holds fp32 states or the configured format (8-bit units
    // below min_8bit_size keep fp32).
    if (f != "fp32" && (f != m.states.type || (f != "8bit" && f != "bf16"))) {
      bad(path, fmt::format("units[{}].state_format", u),
          fmt::format("\"{}\" is not fp32{}", f.substr(0, 16),
                      m.states.type != "fp32" ? " or " + m.states.type.substr(0, 16) : ""));
    }
  }
  const auto ws = static_cast<std::uint64_t>(m.world_size);
  const std::uint64_t quantum = ws * kShardAlignElements;
  const std::size_t ngroups = m.param_groups.is_array() ? m.param_groups.size() : 0;
  std::set<std::string> unit_names, param_names;
  std::uint64_t shard_sum = 0;
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    const ManifestUnit& unit = m.units[u];
    const std::string uf = fmt::format("units[{}]", u);
    if (unit.name.empty() || !unit_names.insert(unit.name).second) {
      bad(path, uf + ".name", fmt::format("\"{}\" is empty or names two units", unit.name));
    }
    const std::uint64_t padded = unit.numel == 0 ? 0
                                                 : checked_mul((unit.numel - 1) / quantum + 1, quantum, path,
                                                               uf + ".numel");
    if (unit.padded != padded || unit.shard != padded / ws) {
      bad(path, uf, fmt::format("unit \"{}\": padded {} and shard {} do not follow from numel {} on {} ranks "
                                "(expected padded {}, shard {})",
                                unit.name, unit.padded, unit.shard, unit.numel, m.world_size, padded, padded / ws));
    }
    shard_sum = checked_add(shard_sum, unit.shard, path, uf + ".shard");
    std::uint64_t next = 0;  // where the next parameter must start
    for (std::size_t k = 0; k < unit.params.size(); ++k) {
      const ManifestParam& p = unit.params[k];
      const std::string pf = fmt::format("{}.params[{}]", uf, k);
      if (p.name.empty() || !param_names.insert(p.name).second) {
        bad(path, pf + ".name", fmt::format("\"{}\" is empty or names two parameters", p.name));
      }
      std::uint64_t n = 1;
      for (std::size_t d = 0; d < p.shape.size(); ++d) {
        if (p.shape[d] < 0) {
          bad(path, fmt::format("{}.shape[{}]", pf, d), fmt::format("{} is negative", p.shape[d]));
        }
        n = checked_mul(n, static_cast<std::uint64_t>(p.shape[d]), path, pf + ".shape");
      }
      if (n != p.numel) {
        bad(path, pf + ".numel",
            fmt::format("parameter \"{}\": numel {} is not the product of its shape ({})", p.name, p.numel, n));
      }
      if (p.offset != next) {
        bad(path, pf + ".offset",
            fmt::format("parameter \"{}\" starts at {}, but the parameters before it in unit \"{}\" end at {} "
                        "(offsets must tile the unit in declaration order)",
                        p.name, p.offset, unit.name, next));
      }
      if (p.numel > unit.numel - next) {
        bad(path, pf + ".numel",
            fmt::format("parameter \"{}\" ({} elements at offset {}) runs past the end of unit \"{}\" ({} elements)",
                        p.name, p.numel, p.offset, unit.name, unit.numel));
      }
      next += p.numel;
      if (p.group < 0 || (ngroups > 0 && static_cast<std::size_t>(p.group) >= ngroups)) {
        bad(path, pf + ".group", fmt::format("{} is not one of the {} param_groups", p.group, ngroups));
      }
    }
    if (next != unit.numel) {
      bad(path, uf + ".numel",
          fmt::format("unit \"{}\" has numel {} but its parameters hold {} elements", unit.name, unit.numel, next));
    }
  }
  // fp32 bounds every format (8-bit: 1 + 4 / block <= 4 bytes per element),
  // so once the fp32 size fits, the file's size in its format does too.
  const std::uint64_t fp32_bytes = checked_mul(checked_mul(shard_sum, m.tensors.size(), path, "units"),
                                               sizeof(float), path, "units");
  if (fp32_bytes > static_cast<std::uint64_t>(INT64_MAX)) bad(path, "units", "a rank file would exceed 2^63 bytes");
  const std::uint64_t bytes = m.file_bytes();
  if (m.files.size() != ws) {
    bad(path, "files", fmt::format("lists {} rank files for world size {}", m.files.size(), m.world_size));
  }
  for (std::size_t q = 0; q < m.files.size(); ++q) {
    const ManifestFile& f = m.files[q];
    const std::string ff = fmt::format("files[{}]", q);
    if (f.rank != static_cast<int>(q) || f.name != rank_file_name(static_cast<int>(q))) {
      bad(path, ff, fmt::format("entry {} is \"{}\" of rank {}; expected \"{}\" of rank {} (files are in rank order)",
                                q, f.name, f.rank, rank_file_name(static_cast<int>(q)), q));
    }
    if (f.bytes != bytes) {
      bad(path, ff + ".bytes", fmt::format("{} bytes, but the unit layout implies {}", f.bytes, bytes));
    }
  }
  if (m.optimizer_steps < 0) bad(path, "optimizer_steps", fmt::format("{} is negative", m.optimizer_steps));
  if (m.micro_steps < m.optimizer_steps) {
    bad(path, "micro_steps", fmt::format("{} is fewer than optimizer_steps ({})", m.micro_steps, m.optimizer_steps));
  }
  if (!(m.scaler.scale > 0.0) || !std::isfinite(m.scaler.scale)) {
    bad(path, "loss_scaler.scale", fmt::format("{} is not a positive finite number", m.scaler.scale));
  }
  if (m.scaler.clean_steps < 0 || m.scaler.hysteresis_left < 0 || m.scaler.overflows < 0) {
    bad(path, "loss_scaler", "clean_steps, hysteresis_left and overflows must be >= 0");
  }
}

}  // namespace zeroshard
