// zs_ckpt_inspect: prints what a sharded zeroshard checkpoint holds (the
// manifest: tag, world size, stage, dtype, optimizer step, loss scaler,
// scheduler, client_state, units with their parameters and shapes, rank
// files with sizes and CRC-32s, the consolidated weights file) and, with
// --verify, checks every rank file and the weights file.
//
//   zs_ckpt_inspect /ckpt/run1                  # the checkpoint `latest` names
//   zs_ckpt_inspect /ckpt/run1/step-00000400 --verify
//
// Exit status: 0 on success; 1 if the checkpoint cannot be read (no
// manifest, malformed manifest); 2 if --verify finds a file whose size or
// CRC-32 does not match the manifest (or that is missing).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tools/checkpoint/checkpoint_verify.h"
#include "examples/report/error_message.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard::tools {
namespace {

using examples::one_line_message;

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// Prints the manifest summary to stdout.
void print_summary(const std::string& dir, const Manifest& m) {
  fmt::print("checkpoint {} (tag {}, format version {})\n", dir, m.tag, m.format_version);
  fmt::print("  world size {}, ZeRO stage {}, compute dtype {}\n", m.world_size, m.stage, m.compute_dtype);
  if (m.mesh.recorded) {
    fmt::print("  mesh dp {} x tp {} x pp {}; this checkpoint: tp rank {}, pipeline stage {}\n", m.mesh.dp, m.mesh.tp,
               m.mesh.pp, m.mesh.tp_rank, m.mesh.pp_rank);
  }
  fmt::print("  optimizer step {} ({} micro-steps)\n", m.optimizer_steps, m.micro_steps);
  fmt::print("  optimizer {}\n", m.optimizer.dump());
  fmt::print("  param groups {}\n", m.param_groups.dump());
  fmt::print("  scheduler {}\n", m.scheduler.dump());
  fmt::print("  loss scaler: scale {:g}, clean steps {}, hysteresis left {}, overflows {}\n", m.scaler.scale,
             m.scaler.clean_steps, m.scaler.hysteresis_left, m.scaler.overflows);
  fmt::print("  client_state {}\n", m.client_state.dump());
  fmt::print("  per-unit tensors in each rank file: {}\n", fmt::join(m.tensors, ", "));
  if (m.states.type == "8bit") {
    fmt::print("  optimizer states: 8bit (codes + one fp32 absmax per block of {} elements; units under {} elements "
               "fp32)\n",
               m.states.block_size, m.states.min_8bit_size);
  } else {
    fmt::print("  optimizer states: {}\n", m.states.type);
  }
  std::uint64_t params = 0;
  for (const ManifestUnit& u : m.units) {
    for (const ManifestParam& p : u.params) params += p.numel;
  }
  fmt::print("units: {} ({} parameters)\n", m.units.size(), params);
  for (const ManifestUnit& u : m.units) {
    fmt::print("  {}: {} elements, padded {}, shard {} per rank, {} states\n", u.name, u.numel, u.padded, u.shard,
               u.state_format);
    for (const ManifestParam& p : u.params) {
      fmt::print("    {:<28} {:<16} numel {:>10}  offset {:>10}  group {}\n", p.name, shape_text(p.shape), p.numel,
                 p.offset, p.group);
    }
  }
  std::uint64_t bytes = 0;
  for (const ManifestFile& f : m.files) bytes += f.bytes;
  fmt::print("files: {} ({} bytes)\n", m.files.size(), bytes);
  for (const ManifestFile& f : m.files) {
    fmt::print("  {:<16} rank {:>5}  {:>12} bytes  crc32 {:08x}\n", f.name, f.rank, f.bytes, f.crc32);
  }
  if (m.weights.recorded) {
    fmt::print("weights: {} ({}, every parameter in the compute dtype)  {} bytes  crc32 {:08x}\n", m.weights.name,
               m.weights.dtype, m.weights.bytes, m.weights.crc32);
  }
}

/// Checks every rank file and the consolidated weights file (if any),
/// printing OK or FAILED per file; true if all OK.
bool verify(const std::string& dir, const Manifest& m) {
  auto checks = check_rank_files(m, dir);
  if (m.weights.recorded) checks.push_back(check_weights_file(m, dir));
  std::size_t failed = 0;
  for (const RankFileCheck& c : checks) {
    if (c.ok()) {
      fmt::print("  {}: OK ({} bytes, crc32 {:08x})\n", c.path, c.actual_bytes, c.actual_crc32);
    } else {
      ++failed;
      fmt::print("  {}: FAILED: {}\n", c.path, one_line_message(c.problem));
    }
  }
  if (failed == 0) {
    fmt::print("verify: all {} files match the manifest\n", checks.size());
  } else {
    fmt::print("verify: FAILED: {} of {} files do not match the manifest\n", failed, checks.size());
  }
  return failed == 0;
}

}  // namespace
}  // namespace zeroshard::tools

int main(int argc, char** argv) {
  std::string path;
  bool verify = false;
  CLI::App app{"Print a sharded zeroshard checkpoint's manifest and optionally verify its rank files"};
  app.add_option("CKPT_DIR", path,
                 "checkpoint directory (with manifest.json), save directory (with `latest`), or a mesh run's "
                 "save directory (with pp-SS / tp-TT folders: each is printed)")
      ->required();
  app.add_flag("--verify", verify, "check every rank file's size and CRC-32 against the manifest");
  CLI11_PARSE(app, argc, argv);

  try {
    using namespace zeroshard::tools;
    // A mesh run's save directory has a `latest` too (the mesh-level commit).
    const bool plain = std::filesystem::is_regular_file(std::filesystem::path(path) / "manifest.json") ||
                       (std::filesystem::is_regular_file(std::filesystem::path(path) / "latest") &&
                        mesh_top_dirs(path).empty());
    const std::vector<std::string> mesh = plain ? std::vector<std::string>{} : mesh_save_dirs(path);
    if (mesh.empty()) {
      const std::string dir = resolve_checkpoint_dir(path);
      const zeroshard::Manifest m = zeroshard::Manifest::read(dir);
      print_summary(dir, m);
      if (!verify) return 0;
      std::fflush(stdout);
      return zeroshard::tools::verify(dir, m) ? 0 : 2;
    }
    // A mesh run's save directory: every stage's / slice's checkpoint in
    // turn, then the checks of them together.
    bool unreadable = false, all_good = true;
    std::vector<std::pair<std::string, zeroshard::Manifest>> read;
    for (const std::string& t : mesh) {
      std::printf("%s== %s\n", &t == &mesh.front() ? "" : "\n", t.c_str());
      try {
        const std::string dir = resolve_checkpoint_dir(t);
        zeroshard::Manifest m = zeroshard::Manifest::read(dir);
        print_summary(dir, m);
        if (verify) {
          std::fflush(stdout);
          all_good = zeroshard::tools::verify(dir, m) && all_good;
        }
        read.emplace_back(t, std::move(m));
      } catch (const zeroshard::Error& e) {
        std::printf("  error: %s\n", one_line_message(e.what()).c_str());
        unreadable = true;
      }
    }
    const std::vector<std::string> problems = mesh_checkpoint_problems(read);
    std::printf("\n");
    for (const std::string& p : problems) std::printf("mesh: FAILED: %s\n", p.c_str());
    if (problems.empty() && !unreadable) {
      const zeroshard::ManifestMesh& mm = read.front().second.mesh;
      std::printf("mesh: all %zu checkpoints of the pp %d x tp %d mesh are here, at optimizer step %lld\n",
                  read.size(), mm.pp, mm.tp, static_cast<long long>(read.front().second.optimizer_steps));
    }
    if (unreadable || !problems.empty()) return 1;
    return all_good ? 0 : 2;
  } catch (const std::exception& e) {
    return zeroshard::examples::print_error("zs_ckpt_inspect", e);
  }
}
