// Engine::save_checkpoint: sharded, atomic, re-shardable checkpoints, and
// their consolidated weights (model.safetensors with zero_optimization.
// stage3_gather_16bit_weights_on_model_save; layout: [Note: safetensors
// layout] in runtime/checkpoint/safetensors_writer.h). Layout and protocol:
// docs/checkpoint-format.md; loading: engine_load.cpp.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <span>

#include "core/error.h"
#include "comm/collective_error.h"
#include "kernels/cpu/cast.h"
#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/mesh_commit.h"
#include "runtime/checkpoint/mesh_folders.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/save_folder.h"
#include "runtime/checkpoint/save_hooks.h"
#include "runtime/checkpoint/state_checks.h"
#include "runtime/engine/save_phases.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/storage_phase.h"

namespace zeroshard {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The array that holds the fp32 master values: the master weights with
// mixed precision, else the parameters.
ArrayRef master_array(const EngineState& s) { return {s.mixed() ? ArrayKind::master : ArrayKind::params}; }

// The flat-buffer index of element 0 of unit u's master array on this rank:
// 0 when the rank holds the full buffer, r*S for a shard.
std::size_t master_first(const EngineState& s, UnitId u) {
  const bool full = s.mixed() ? s.stage() == 0 : s.stage() < 3;
  return full ? 0 : static_cast<std::size_t>(s.rank()) * s.info(u).shard;
}

// Where the master values of unit u live on this rank, and master_first.
// Arrays on nvme are read into `holder` (runtime/sharding/array_store.h).
const float* master_data(EngineState& s, UnitId u, std::size_t& first, HostBuffer& holder) {
  first = master_first(s, u);
  return static_cast<const float*>(s.store().read(u, master_array(s), holder));
}

// [Note: crash points of a save]
// A save is crash-atomic (docs/checkpoint-format.md, "The atomic save
// protocol"): whenever a process dies, `latest` names a complete checkpoint.
// The test hook ZS_CHECKPOINT_CRASH_AT=<point> kills rank 0 (SIGKILL, the
// job ends with it) at the end of each step of the protocol that changes
// what is on disk:
//   files     rank 0's rank-NNNNN.bin is written and fsynced in .tmp-<tag>,
//             before the ranks all-gather sizes and CRC-32s (step 2);
//   manifest  manifest.json is written and fsynced with .tmp-<tag>, before
//             anything is renamed (step 3);
//   renamed   the new checkpoint is <tag> (renamed into place, exchanged
//             with the old <tag>, or after both renames of the fallback
//             without RENAME_EXCHANGE), before `latest` is switched (step 4);
//   latest    `latest` names <tag> (written atomically), before the old
//             checkpoint and those beyond keep_last are removed (5 and 6).
// An async save ([Note: async checkpoint]) adds two before `files`:
//   snapshot  the snapshot is staged and .tmp-<tag> exists, before the
//             background write starts;
//   writing   rank 0's writer thread has written the first slice of its
//             file (a partial file in .tmp-<tag>);
// and reaches `files` when its commit begins (in a later step or wait).
// A kill up to `manifest` leaves the old checkpoint in place and loadable, a
// kill from `renamed` on the new one; what is left (.tmp-<tag> holding the
// unfinished save or the exchanged old checkpoint, .old-<tag>) is removed by
// the next save's sweep_leftovers (runtime/checkpoint/save_folder.h).
// tests/runtime/checkpoint/checkpoint_reshard.sh re-saves an existing tag
// with each point, synchronously and asynchronously, and checks all three.
// The kill between the fallback's two renames has no hook (on a file system
// with RENAME_EXCHANGE that path does not run): it leaves <tag> missing, and
// restore_interrupted_save() renames .old-<tag> back, in the next save's
// sweep and in a load of <tag> (tests/runtime/engine/test_agreed_errors.cpp
// leaves those folders and loads).

// Rank 0: puts the complete checkpoint in tmp_dir in place as final_dir
// (replacing a checkpoint of the same tag) and, with `point_latest`, points
// the folder's `latest` at it (a mesh's folders are pointed at after the
// mesh's commit instead: [Note: mesh checkpoint commit]).
void publish(const std::string& save_dir, const std::string& tmp_dir, const std::string& final_dir,
             const std::string& tag, bool point_latest) {
  auto latest = [&] {
    if (!point_latest) return;
    write_file_atomic(save_dir + "/latest", tag + "\n");
    checkpoint_crash_point("latest", 0);
  };
  if (!fs::exists(final_dir)) {
    rename_durable(tmp_dir, final_dir, save_dir);
    checkpoint_crash_point("renamed", 0);
    latest();
    return;
  }
  if (exchange_durable(tmp_dir, final_dir, save_dir)) {
    // final_dir is the new checkpoint, tmp_dir the old one.
    checkpoint_crash_point("renamed", 0);
    latest();
    fs::remove_all(tmp_dir);
    return;
  }
  // No RENAME_EXCHANGE on this file system: two renames (a crash between
  // them is repaired by restore_interrupted_save, at the next save or load).
  const std::string old = save_dir + "/.old-" + tag;
  fs::remove_all(old);
  rename_durable(final_dir, old, save_dir);
  rename_durable(tmp_dir, final_dir, save_dir);
  checkpoint_crash_point("renamed", 0);
  latest();
  fs::remove_all(old);
}

}  // namespace

std::vector<ManifestUnit> manifest_units(const EngineState& s) {
  return layout_manifest_units(
      s.layout, [&s](UnitId u) { return s.store().states(u).dtype; },
      [&s](ParamId p) { return s.norm.parallel(p).split_dim; });
}

Manifest make_manifest(const EngineState& s, const std::string& tag, const json& client_state) {
  Manifest m;
  m.tag = tag;
  m.world_size = s.world();
  m.stage = s.stage();
  m.compute_dtype = std::string(dtype_name(s.dtype()));
  m.tensors = checkpoint_tensor_names(s.config.optimizer);
  const StateFormat& sf = s.config.optimizer.states;
  m.states.type = std::string(state_dtype_name(sf.dtype));
  if (sf.dtype == StateDtype::q8) {
    m.states.block_size = sf.block_size;
    m.states.min_8bit_size = sf.min_8bit_size;
  }
  m.units = manifest_units(s);
  m.model = ManifestModel{.recorded = true, .config = s.model_config,
                          .fingerprint = model_fingerprint(m.units, s.model_config, s.comms.tp_size())};
  m.optimizer_steps = s.progress.optimizer_steps;
  m.micro_steps = s.progress.micro_steps;
  m.scaler = s.progress.scaler.state();
  const OptimizerHyper& h = s.config.optimizer;
  m.optimizer = {{"type", optimizer_type_name(h)}, {"lr", h.lr}, {"betas", {h.beta1, h.beta2}}, {"eps", h.eps},
                 {"weight_decay", h.weight_decay}, {"momentum", h.momentum}, {"dampening", h.dampening},
                 {"nesterov", h.nesterov}};
  if (h.kind == OptimizerKind::muon) {
    // Informational, as the rest; the owners follow from the layout and the
    // world size ([Note: Muon owner assignment]) and are recomputed on load.
    const MuonHyper& mu = h.muon;
    m.optimizer["muon"] = {
        {"lr", mu.lr}, {"weight_decay", mu.weight_decay}, {"momentum", mu.momentum}, {"nesterov", mu.nesterov},
        {"ns_steps", mu.ns_steps},
        {"adjust_lr_fn", mu.scale == kernels::MuonScale::shape ? "original" : "match_rms_adamw"},
        {"ns_dtype", mu.precision == kernels::NewtonSchulzPrecision::f32 ? "fp32" : "bf16"},
        {"muon_params", mu.params}, {"owners", s.muon().owners()}};
    if (s.comms.tp_size() > 1) m.optimizer["muon"]["tp_owners"] = s.muon().tp_owners();
  }
  if (h.kind == OptimizerKind::adagrad) {
    m.optimizer["lr_decay"] = h.lr_decay;
    m.optimizer["initial_accumulator_value"] = h.initial_accumulator_value;
  }
  m.param_groups = json::array();
  for (const ParamGroup& g : s.optimizer.groups()) {
    m.param_groups.push_back({{"name", g.name}, {"lr", g.lr}, {"weight_decay", g.weight_decay}});
  }
  m.scheduler = {{"type", s.config.scheduler.name()}, {"position", s.progress.optimizer_steps}};
  m.client_state = client_state;
  if (s.comms.on_mesh()) {
    const MeshPosition at = s.comms.mesh_position();
    m.mesh = ManifestMesh{.recorded = true, .dp = at.dp, .tp = at.tp, .tp_rank = at.tp_rank, .pp = at.pp,
                          .pp_rank = at.pp_rank};
  }
  return m;
}

namespace {

// Removes complete checkpoints beyond the newest keep_last (by optimizer
// step in their manifests). Only directories with a readable manifest count.
// With `deferred`, renames them (mark_pruned) and appends the new paths
// there instead, for a FolderRemover.
void prune(const std::string& save_dir, int keep_last, const std::string& keep_tag,
           std::vector<std::string>* deferred) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(save_dir)) {
    if (!entry.is_directory() || entry.path().filename().string().starts_with(".")) continue;
    try {
      const Manifest m = Manifest::read(entry.path().string());
      if (m.tag != keep_tag) found.emplace_back(m.optimizer_steps, entry.path());
    } catch (const Error&) {
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = static_cast<std::size_t>(std::max(0, keep_last - 1)); i < found.size(); ++i) {
    if (deferred != nullptr) {
      deferred->push_back(mark_pruned(save_dir, found[i].second.filename().string()));
    } else {
      fs::remove_all(found[i].second);
    }
  }
}

// A mesh folder's pruning after the commit: removes every checkpoint of
// `listed` (the folder's complete ones) that is not in `keep`.
void prune_except(const std::string& save_dir, const std::vector<FolderCheckpoint>& listed,
                  const std::vector<FolderCheckpoint>& keep) {
  for (const FolderCheckpoint& c : listed) {
    if (std::find(keep.begin(), keep.end(), c) == keep.end()) fs::remove_all(save_dir + "/" + c.tag);
  }
}

// How state array k of a unit with states `st` is checked before a save.
FiniteCheck state_check(const UnitStates& st, int k) {
  if (st.dtype == StateDtype::q8) return st.is_absmax(k) ? FiniteCheck::absmax : FiniteCheck::none;
  return st.dtype == StateDtype::bf16 ? FiniteCheck::bf16 : FiniteCheck::f32;
}

// Where state array k of unit u's window on this rank lies, for messages.
StateSource state_source(const EngineState& s, const Manifest& m, UnitId u, int k, const std::string& file) {
  const UnitStates& st = s.store().states(u);
  StateSource source{.file = file, .m = &m, .unit = static_cast<std::size_t>(u),
                     .tensor = std::string(optimizer_state_name(s.config.optimizer, st.state_of(k))),
                     .first = static_cast<std::uint64_t>(s.rank()) * s.info(u).shard, .stride = 1};
  if (st.dtype == StateDtype::q8 && st.is_absmax(k)) {
    source.tensor += " absmax";
    source.stride = st.block;
  }
  return source;
}

// Checks `bytes` bytes at `data` (check_before_save) and hands them to
// `sink`, a piece at a time: the sink's copy then reads them from the
// cache, one pass over memory instead of two (the async save's stall). A
// value that fails leaves part of the file written: the save is discarded.
void check_and_sink(const std::byte* data, std::size_t bytes, FiniteCheck check, const StateSource& source,
                    const ByteSink& sink) {
  constexpr std::size_t kPiece = std::size_t{256} << 10;  // bytes: a whole number of 4- and 2-byte values
  const std::size_t value = checked_value_bytes(check);
  for (std::size_t at = 0; at < bytes; at += kPiece) {
    const std::size_t n = std::min(kPiece, bytes - at);
    check_before_save(data + at, n, check, source, at / value);
    sink(data + at, n);
  }
}

}  // namespace

// produce_rank_file of a parameter-server worker: its windows of the
// master values and optimizer states, as its server holds them for its
// rank ([Note: parameter-server layout]), in the same order and checks.
void produce_server_rank_file(EngineState& s, const Manifest& m, const std::string& file, const ByteSink& sink,
                              const std::function<void(UnitId)>& after_unit) {
  const int r = s.rank();
  auto expected = [&](UnitId u, int k) -> std::uint64_t {
    if (k < 0) return s.info(u).shard * sizeof(float);
    return s.optimizer.state_window_range(s.store(), u, k, r).second;
  };
  s.ps_client->fetch_state(expected, [&](UnitId u, int k, std::span<const std::byte> bytes) {
    if (k < 0) {
      const StateSource source{.file = file,
                               .m = &m,
                               .unit = static_cast<std::size_t>(u),
                               .tensor = "master",
                               .first = static_cast<std::uint64_t>(r) * s.info(u).shard,
                               .stride = 1};
      check_and_sink(bytes.data(), bytes.size(), FiniteCheck::f32, source, sink);
    } else {
      check_and_sink(bytes.data(), bytes.size(), state_check(s.store().states(u), k), state_source(s, m, u, k, file),
                     sink);
    }
    if (k + 1 == s.store().states(u).arrays()) after_unit(u);
  });
}

void produce_rank_file(EngineState& s, const Manifest& m, const std::string& file, const ByteSink& sink,
                       const std::function<void(UnitId)>& after_unit, const LinkHook& link) {
  if (s.ps_client) {
    produce_server_rank_file(s, m, file, sink, after_unit);
    return;
  }
  const int r = s.rank();
  for (UnitId u = 0; u < s.units(); ++u) {
    const std::size_t shard = s.info(u).shard;
    {
      const StateSource source{.file = file, .m = &m, .unit = static_cast<std::size_t>(u), .tensor = "master",
                               .first = static_cast<std::uint64_t>(r) * shard, .stride = 1};
      const std::uint64_t begin = (source.first - master_first(s, u)) * sizeof(float);  // the window in the array
      if (!link || !link(u, master_array(s), begin, shard * sizeof(float), FiniteCheck::f32, source)) {
        std::size_t first = 0;
        HostBuffer holder;
        const float* data = master_data(s, u, first, holder);
        const std::size_t at = static_cast<std::size_t>(r) * shard - first;
        check_and_sink(reinterpret_cast<const std::byte*>(data + at), shard * sizeof(float), FiniteCheck::f32, source,
                       sink);
      }
    }
    // The states as stored: fp32 values, or 8-bit codes then absmax
    // (docs/checkpoint-format.md), this rank's window.
    const UnitStates& st = s.store().states(u);
    for (int k = 0; k < st.arrays(); ++k) {
      const FiniteCheck check = state_check(st, k);
      const StateSource source = state_source(s, m, u, k, file);
      if (link && !st.packs(k)) {
        const auto [offset, bytes] = s.optimizer.state_window_range(s.store(), u, k, r);
        if (bytes == 0 || link(u, ArrayRef{ArrayKind::state, k}, offset, bytes, check, source)) continue;
      }
      s.optimizer.with_state_array_window(s.store(), u, k, r, [&](std::span<const std::byte> bytes) {
        check_and_sink(bytes.data(), bytes.size(), check, source, sink);
      });
    }
    after_unit(u);
  }
}

// The consolidated weights: rank 0 writes its full compute copy unit by
// unit at stages 0-2; at stage 3 each unit's shards, read from their tier,
// are all-gathered over the host communicator (padded elements of the
// compute dtype on every rank, one unit at a time) and appended by rank 0.
// A unit's parameters tile flat elements [0, numel) in declaration order,
// as its tensors follow each other in the file: one write per unit.
void produce_checkpoint_weights(EngineState& s, const Manifest& m, const std::function<void()>& open,
                                const ByteSink& sink) {
  const int r = s.rank();
  const DType t = s.dtype();
  run_agreed(s.comms.host(), [&] {
    const SafetensorsPlan plan = plan_checkpoint_safetensors(m, t, mesh_safetensors_metadata(m));  // the same on every rank
    if (r != 0) return;
    open();
    const std::string prefix = safetensors_prefix(plan);
    sink(prefix.data(), prefix.size());
  });
  auto append = [&](UnitId u, const void* full) { sink(full, s.info(u).numel * dtype_size(t)); };
  const UnitId units = s.units();
  if (s.stage() < 3) {
    run_agreed(s.comms.host(), [&] {
      if (r != 0) return;
      for (UnitId u = 0; u < units; ++u) {
        HostBuffer holder;
        append(u, s.store().read(u, {ArrayKind::params}, holder));
      }
    });
    return;
  }
  for (UnitId u = 0; u < units; ++u) {
    HostBuffer holder;
    const void* shard = nullptr;
    run_agreed(s.comms.host(), [&] { shard = s.store().read(u, {ArrayKind::params}, holder); });
    const std::vector<std::byte> full = gather_host(s, u, shard, t);
    run_agreed(s.comms.host(), [&] {
      if (r == 0) append(u, full.data());
    });
  }
}

void commit_save(EngineState& s, const SaveTarget& t, Manifest& m, std::uint32_t file_crc32, std::uint64_t file_bytes,
                 int keep_last, std::vector<std::string>* pruned) {
  const int r = s.rank();
  const TraceScope publish_span(s.tracer(), "checkpoint_save_manifest", TraceThread::engine, t.tag);
  double file_info[2] = {static_cast<double>(file_crc32), static_cast<double>(file_bytes)};
  std::vector<double> all_info(2 * static_cast<std::size_t>(s.world()));
  s.comms.host().all_gather(file_info, all_info.data(), 2, DType::f64);
  run_agreed(s.comms.host(), [&] {
    if (r != 0) return;
    for (int q = 0; q < s.world(); ++q) {
      m.files.push_back(ManifestFile{.name = rank_file_name(q), .rank = q,
                                     .bytes = static_cast<std::uint64_t>(all_info[2 * q + 1]),
                                     .crc32 = static_cast<std::uint32_t>(all_info[2 * q])});
    }
    const std::string text = m.to_text();
    DurableFileWriter w(t.tmp_dir + "/manifest.json");
    w.write(text.data(), text.size());
    w.finish();
    fsync_directory(t.tmp_dir);
    checkpoint_crash_point("manifest", r);
    publish(t.save_dir, t.tmp_dir, t.final_dir, t.tag, !t.mesh_folders);
    if (keep_last > 0 && !t.mesh_folders) prune(t.save_dir, keep_last, t.tag, pruned);
  });
}

namespace {

// Phases 2, 3 (with the consolidated weights when configured) and 4 of the
// save protocol (docs/checkpoint-format.md), each agreed, written straight
// to the files.
void write_checkpoint(EngineState& s, const SaveTarget& t, const json& client_state, int keep_last) {
  const int r = s.rank();
  Manifest m = make_manifest(s, t.tag, client_state);
  std::uint32_t crc = 0;
  std::uint64_t bytes = 0;
  TraceScope files_span(s.tracer(), "checkpoint_save_files", TraceThread::engine, t.tag);
  run_agreed(s.comms.host(), [&] {
    const std::string file = t.final_dir + "/" + rank_file_name(r);  // as named once published
    const std::string path = t.tmp_dir + "/" + rank_file_name(r);
    DurableFileWriter w(path);
    produce_rank_file(s, m, file, [&w](const void* data, std::size_t n) { w.write(data, n); }, [&](UnitId u) {
      if (u != 0) return;
      checkpoint_pause_point(t.tmp_dir, r);
      checkpoint_fail_point(path, r);
    });
    w.finish();
    checkpoint_crash_point("files", r);
    crc = w.crc32();
    bytes = w.size();
  });
  files_span.end();
  if (s.config.zero.gather_16bit_weights_on_model_save) {
    const TraceScope weights_span(s.tracer(), "checkpoint_save_weights", TraceThread::engine, t.tag);
    std::optional<DurableFileWriter> out;  // rank 0's file
    produce_checkpoint_weights(
        s, m, [&] { out.emplace(t.tmp_dir + "/" + kWeightsFileName); },
        [&](const void* data, std::size_t n) { out->write(data, n); });
    run_agreed(s.comms.host(), [&] {
      if (r != 0) return;
      out->finish();
      m.weights = checkpoint_weights_entry(s, out->size(), out->crc32());
    });
  }
  commit_save(s, t, m, crc, bytes, keep_last);
}

// [Note: mesh checkpoint commit]
// On a mesh with tp > 1 or pp > 1 every (pipeline stage, tp rank) keeps
// its own folder (mesh_checkpoint_root). If each folder published its step
// and pruned on its own, a rank killed during a save could leave folder A
// at step N with N - 1 pruned while folder B still holds only N - 1: no
// step in every folder, every checkpoint lost. So a mesh save commits as
// one:
//   1. every folder's data-parallel group writes and publishes <tag> in its
//      folder exactly as a single-folder save does (.tmp-<tag>, fsync,
//      rename), but neither points the folder's `latest` at it nor prunes;
//   2. the world agrees that every folder did (agreed_over_world): a
//      failure anywhere is the same error everywhere and nothing is
//      committed;
//   3. world rank 0 writes <save_dir>/latest (write_file_atomic): the
//      commit. A kill before it leaves the previous commit in force;
//   4. each folder's rank 0 points its own `latest` at <tag> (for the
//      tools that read one folder), and with keep_last > 0 the world
//      agrees (common_checkpoints, runtime/checkpoint/mesh_commit.h) on
//      the newest keep_last checkpoints that every folder holds; each
//      folder keeps those, <tag> and the newest common one, and removes
//      the rest (partial steps of killed saves included). A kill during
//      the pruning leaves <tag> in every folder.
// A load with no tag does not trust any `latest`: the world agrees on the
// newest step every folder holds complete (list_folder_checkpoints: the
// manifest validates, the rank files have their sizes), and world rank 0
// says on stderr when a newer step is missing from some folder. So a kill
// at any point of any rank resumes from a step every folder holds: the
// committed one, or a newer one that every folder finished before the
// commit. Each manifest records its folder's coordinates (mesh.tp_rank,
// mesh.pp_rank and the sizes) and the model's fingerprint; a load checks
// both, so that swapped or misplaced folders and a changed model (another
// GPT --heads at the same width: the same shapes, another attention
// layout) are refused, naming the folder and the differing field.
// tests/examples/mesh_kill_loop.sh kills ranks during mesh saves and
// resumes; tests/runtime/engine/test_engine_pipeline.cpp and
// tests/examples/test_gpt_mesh.cpp check the commit, the skipped partial
// step and the refusals.

// Step 4 of [Note: mesh checkpoint commit]: the folder's `latest` and the
// pruning, after world rank 0 committed `tag`. Collective over the world.
void after_mesh_commit(EngineState& s, const std::string& save_dir, const std::string& tag, int keep_last) {
  std::vector<FolderCheckpoint> listed;
  std::vector<FolderCheckpoint> keep;
  s.comms.agreed_over_world([&] {
    if (s.rank() == 0) write_file_atomic(save_dir + "/latest", tag + "\n");
    listed = list_folder_checkpoints(save_dir);
    return 0;
  });
  if (keep_last <= 0) return;
  keep = common_checkpoints(listed, static_cast<std::size_t>(keep_last), [&s](double v) { return s.comms.world_min(v); });
  s.comms.agreed_over_world([&] {
    if (s.rank() != 0) return 0;
    // The committed tag (every folder holds it), the newest common one, then
    // the next common ones up to keep_last.
    std::vector<FolderCheckpoint> chosen;
    for (const FolderCheckpoint& c : listed) {
      if (c.tag == tag) chosen.push_back(c);
    }
    for (const FolderCheckpoint& c : keep) {
      if (c.tag != tag && (static_cast<int>(chosen.size()) < keep_last || &c == &keep.front())) chosen.push_back(c);
    }
    prune_except(save_dir, listed, chosen);
    return 0;
  });
}

}  // namespace

SaveTarget save_target(const EngineState& s, const char* call, const std::string& mesh_save_dir,
                       const std::string& tag) {
  ZS_CHECK(s.finalized(), "{} before finalize()", call);
  check_usable(s, call);
  SaveTarget t;
  t.mesh_save_dir = mesh_save_dir;
  // On a mesh each (pipeline stage, tp rank)'s group saves into its own folder ([Note: engine on a mesh]).
  t.save_dir = mesh_checkpoint_root(s.comms.mesh_position(), mesh_save_dir);
  t.mesh_folders = t.save_dir != mesh_save_dir;
  const std::int64_t gas = s.config.gradient_accumulation_steps;
  const std::int64_t micro = s.progress.micro_steps;
  if (micro % gas != 0) {
    throw Error(fmt::format("{} on \"{}\": called after micro-batch {} of {} of a gradient accumulation cycle; save "
                            "after the step that ends the cycle (gradients are not saved)",
                            call, t.save_dir, micro % gas, gas));
  }
  t.tag = tag.empty() ? fmt::format("step-{:08d}", s.progress.optimizer_steps) : tag;
  t.final_dir = t.save_dir + "/" + t.tag;
  t.tmp_dir = t.save_dir + "/.tmp-" + t.tag;
  return t;
}

void prepare_save_folder(const EngineState& s, const SaveTarget& t) {
  if (s.rank() != 0) return;
  fs::create_directories(t.save_dir);
  sweep_leftovers(t.save_dir);  // left by saves that were killed or failed
  fs::create_directory(t.tmp_dir);
}

SaveTarget begin_save(EngineState& s, const char* call, const std::string& mesh_save_dir, const std::string& tag) {
  SaveTarget t = save_target(s, call, mesh_save_dir, tag);
  run_agreed(s.comms.host(), [&] { prepare_save_folder(s, t); });
  return t;
}

ManifestWeights checkpoint_weights_entry(const EngineState& s, std::uint64_t bytes, std::uint32_t crc32) {
  return ManifestWeights{.recorded = true, .name = kWeightsFileName, .dtype = std::string(dtype_name(s.dtype())),
                         .bytes = bytes, .crc32 = crc32};
}

void discard_save(const EngineState& s, const SaveTarget& t) {
  if (s.rank() != 0) return;
  std::error_code ec;
  fs::remove_all(t.tmp_dir, ec);
}

void commit_mesh_save(EngineState& s, const SaveTarget& t, int keep_last) {
  // Every folder holds <tag>: the commit ([Note: mesh checkpoint commit]).
  s.comms.agreed_over_world([&] {
    if (s.comms.world()->rank() == 0) {
      write_file_atomic(t.mesh_save_dir + "/latest", t.tag + "\n");
      checkpoint_crash_point("committed", 0);
    }
    return 0;
  });
  after_mesh_commit(s, t.save_dir, t.tag, keep_last);
}

std::string Engine::save_checkpoint(const std::string& mesh_save_dir, const json& client_state, int keep_last,
                                    const std::string& tag_in) {
  EngineState& s = *s_;
  const TraceScope span(s.tracer(), "checkpoint_save", TraceThread::engine, TimeCategory::checkpoint, tag_in);
  finish_async_checkpoint(s);  // a save in flight commits first
  refuse_direct_push(s, "save_checkpoint()");
  // A failure in one (pipeline stage, tp rank)'s group ends every rank of the mesh together.
  const SaveTarget t = s.comms.agreed_over_world([&] {
    settle_deferred_step(s, "save_checkpoint()");
    settle_parameter_server(s, "save_checkpoint()");  // the servers' state is the parameters'
    const SaveTarget target = begin_save(s, "save_checkpoint()", mesh_save_dir, tag_in);
    try {
      write_checkpoint(s, target, client_state, keep_last);
    } catch (const AgreedError&) {
      // Every rank failed this save: nothing of it is left behind (a disk that
      // filled up is freed again).
      discard_save(s, target);
      throw;
    }
    return target;
  });
  if (t.mesh_folders) commit_mesh_save(s, t, keep_last);
  return t.tag;
}

std::vector<float> Engine::gather_optimizer_state(ParamId p, int index) {
  EngineState& s = *s_;
  refuse_with_servers(s, "gather_optimizer_state()", "the optimizer state is on the servers; a checkpoint holds it");
  const ParamInfo& info = s.layout.param(p);
  ZS_CHECK(index >= 0 && index < s.store().options().state_count, "optimizer state index {} out of range", index);
  settle_deferred_step(s, "gather_optimizer_state()");
  // As fp32 (8-bit states dequantized), window by window.
  std::vector<float> full;
  if (s.stage() == 0) {
    for (int w = 0; w < s.world(); ++w) {
      const std::vector<float> part = s.optimizer.state_window_f32(s.store(), info.unit, index, w);
      full.insert(full.end(), part.begin(), part.end());
    }
  } else {
    const std::vector<float> shard = s.optimizer.state_window_f32(s.store(), info.unit, index, s.rank());
    const std::vector<std::byte> gathered = gather_host(s, info.unit, shard.data(), DType::f32);
    const auto* f = reinterpret_cast<const float*>(gathered.data());
    full.assign(f, f + gathered.size() / sizeof(float));
  }
  return std::vector<float>(full.begin() + static_cast<std::ptrdiff_t>(info.offset),
                            full.begin() + static_cast<std::ptrdiff_t>(info.offset + info.numel));
}

}  // namespace zeroshard
