// Engine::load_checkpoint: validates a sharded checkpoint completely, reads
// the logical tensors of this rank's new layout from the old rank files
// (re-sharding for any old and new world size), and only then replaces the
// engine's state. Format: docs/checkpoint-format.md.
#include <map>
#include <set>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"
#include "comm/collective_error.h"
#include "kernels/cpu/cast.h"
#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/save_folder.h"
#include "runtime/checkpoint/mesh_commit.h"
#include "runtime/checkpoint/mesh_folders.h"
#include "runtime/checkpoint/state_checks.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/save_phases.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/storage_phase.h"

namespace zeroshard {

using nlohmann::json;

namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Differences between the saved parameters and units and this layout's, one per line.
std::vector<std::string> layout_differences(const Manifest& m, const FlatLayout& layout) {
  std::vector<std::string> diffs;
  std::map<std::string, const ManifestParam*> saved;
  for (const auto& u : m.units) {
    for (const auto& p : u.params) saved[p.name] = &p;
  }
  std::set<std::string> seen;
  for (const ParamInfo& p : layout.params()) {
    seen.insert(p.name);
    auto it = saved.find(p.name);
    if (it == saved.end()) {
      diffs.push_back(fmt::format("parameter \"{}\" {} is not in the checkpoint", p.name, shape_str(p.shape)));
    } else if (it->second->shape != p.shape) {
      diffs.push_back(fmt::format("parameter \"{}\": checkpoint shape {}, model shape {}", p.name,
                                  shape_str(it->second->shape), shape_str(p.shape)));
    }
  }
  for (const auto& [name, p] : saved) {
    if (!seen.count(name)) diffs.push_back(fmt::format("checkpoint parameter \"{}\" {} is not in the model", name, shape_str(p->shape)));
  }
  if (diffs.empty()) {
    // Same parameters: the unit layout must match too (offsets inside units).
    if (m.units.size() != layout.units().size()) {
      diffs.push_back(fmt::format("checkpoint has {} units, the model {}", m.units.size(), layout.units().size()));
    } else {
      for (std::size_t u = 0; u < m.units.size(); ++u) {
        const UnitInfo& info = layout.units()[u];
        if (m.units[u].name != info.name || m.units[u].numel != info.numel ||
            m.units[u].params.size() != info.params.size()) {
          diffs.push_back(fmt::format("unit {}: checkpoint \"{}\" ({} elements), model \"{}\" ({} elements)", u,
                                      m.units[u].name, m.units[u].numel, info.name, info.numel));
          continue;
        }
        for (std::size_t k = 0; k < info.params.size(); ++k) {
          if (m.units[u].params[k].name != layout.param(info.params[k]).name) {
            diffs.push_back(fmt::format("unit \"{}\": parameter {} is \"{}\" in the checkpoint, \"{}\" in the model",
                                        info.name, k, m.units[u].params[k].name, layout.param(info.params[k]).name));
          }
        }
      }
    }
  }
  return diffs;
}

// The first difference between two model configurations, as
// "model.config.<key>: checkpoint <a>, this run <b>" ("" when equal).
std::string config_difference(const json& saved, const json& mine, const std::string& path = "model.config") {
  if (saved == mine) return "";
  if (saved.is_object() && mine.is_object()) {
    for (const auto& [key, value] : saved.items()) {
      if (!mine.contains(key)) return fmt::format("{}.{}: checkpoint {}, this run none", path, key, value.dump());
      const std::string d = config_difference(value, mine.at(key), path + "." + key);
      if (!d.empty()) return d;
    }
    for (const auto& [key, value] : mine.items()) {
      if (!saved.contains(key)) return fmt::format("{}.{}: checkpoint none, this run {}", path, key, value.dump());
    }
  }
  return fmt::format("{}: checkpoint {}, this run {}", path, saved.dump(), mine.dump());
}

// Differences between the saved model and this engine's, one per line:
// parameters (names, shapes), units, tp layouts, the loop's model
// configuration and, should all of those agree, the fingerprint.
std::vector<std::string> model_differences(const Manifest& m, const EngineState& s) {
  std::vector<std::string> diffs = layout_differences(m, s.layout);
  if (!diffs.empty()) return diffs;
  const std::vector<ManifestUnit> mine = manifest_units(s);
  if (m.mesh.tp > 1) {
    for (std::size_t u = 0; u < mine.size(); ++u) {
      for (std::size_t k = 0; k < mine[u].params.size(); ++k) {
        const ManifestParam& a = m.units[u].params[k];
        const ManifestParam& b = mine[u].params[k];
        if (a.tp_split_dim != b.tp_split_dim) {
          diffs.push_back(fmt::format("parameter \"{}\": tp_split_dim: checkpoint {}, model {}", a.name,
                                      a.tp_split_dim, b.tp_split_dim));
        }
      }
    }
  }
  if (!diffs.empty() || !m.model.recorded) return diffs;
  const std::string config = config_difference(m.model.config, s.model_config);
  if (!config.empty()) return {config};
  const std::string fingerprint = model_fingerprint(mine, s.model_config, m.mesh.tp);
  if (fingerprint != m.model.fingerprint) {
    diffs.push_back(fmt::format("model.fingerprint: checkpoint {}, this model {}", m.model.fingerprint, fingerprint));
  }
  return diffs;
}

// The parameters whose optimizer role differs between the checkpoint and
// this engine, one line each (at most 4, then a count): a Muon matrix's
// exp_avg holds Muon's momentum and its exp_avg_sq 0 ([Note: Muon on
// shards]), so AdamW taking it over would restart from a second moment of
// 0, and Muon would take AdamW's exp_avg for its momentum. Both manifests'
// parameters are in the same order (model_differences agreed).
std::vector<std::string> muon_role_differences(const Manifest& m, const EngineState& s) {
  const std::string saved = m.optimizer.is_object() ? m.optimizer.value("type", std::string("?")) : "?";
  const bool saved_muon = saved == "Muon";
  const GroupId mine = s.optimizer.muon_group();  // -1 unless this engine runs Muon
  std::vector<std::string> out;
  std::size_t count = 0;
  for (std::size_t u = 0; u < m.units.size() && u < s.layout.units().size(); ++u) {
    const std::vector<ParamId>& ids = s.layout.units()[u].params;
    for (std::size_t k = 0; k < m.units[u].params.size() && k < ids.size(); ++k) {
      const ManifestParam& p = m.units[u].params[k];
      const auto g = static_cast<std::size_t>(p.group);
      const bool was = saved_muon && m.param_groups.is_array() && g < m.param_groups.size() &&
                       m.param_groups[g].value("name", std::string()) == "muon";
      const bool is = mine >= 0 && s.layout.param(ids[k]).group == mine;
      if (was == is) continue;
      if (++count <= 4) {
        out.push_back(fmt::format("parameter \"{}\": updated by {} in the checkpoint, by {} here", p.name,
                                  was ? "Muon" : saved_muon ? "AdamW" : saved,
                                  is ? "Muon" : mine >= 0 ? "AdamW" : optimizer_name(s.config.optimizer.kind)));
      }
    }
  }
  if (count > 4) out.push_back(fmt::format("and {} more", count - 4));
  return out;
}

// Reads logical elements [lo, hi) of tensor t of unit u from the old rank
// files into dst (dst[0] = element lo) as fp32, dequantizing 8-bit states
// (each old window's codes with its absmax) and widening bf16 states
// (exact), verifying each file on first use; raw() reads one old rank's
// tensor as stored.
class TensorReader {
 public:
  TensorReader(const Manifest& m, std::string dir) : m_(m), dir_(std::move(dir)) {}

  void read(std::size_t u, std::size_t t, std::uint64_t lo, std::uint64_t hi, float* dst) {
    const std::uint64_t shard = m_.units[u].shard;
    hi = std::min(hi, m_.units[u].numel);
    const bool q8 = t > 0 && m_.units[u].state_format == "8bit";
    const bool b16 = t > 0 && m_.units[u].state_format == "bf16";
    for (std::uint64_t e = lo; e < hi;) {
      const int q = static_cast<int>(e / shard);
      const std::uint64_t off = e % shard, n = std::min(hi - e, shard - off);
      if (q8) {
        const std::vector<float>& window = dequantized(u, t, q);
        std::copy(window.begin() + static_cast<std::ptrdiff_t>(off),
                  window.begin() + static_cast<std::ptrdiff_t>(off + n), dst + (e - lo));
      } else if (b16) {
        bits_.resize(n);
        file(q).read(m_.file_offset(u, t) + off * sizeof(std::uint16_t), bits_.data(), n * sizeof(std::uint16_t));
        for (std::uint64_t i = 0; i < n; ++i) dst[e - lo + i] = bf16_to_float(bits_[i]);
      } else {
        file(q).read(m_.file_offset(u, t) + off * sizeof(float), dst + (e - lo), n * sizeof(float));
      }
      check_finite_state(dst + (e - lo), n, source(u, t, q, e, ""));
      e += n;
    }
  }

  // Tensor t of unit u in old rank q's file, as stored (tensor_bytes); an
  // 8-bit state's absmax values checked (check_finite_state).
  std::vector<std::byte> raw(std::size_t u, std::size_t t, int q) {
    std::vector<std::byte> out(m_.tensor_bytes(u, t));
    if (!out.empty()) file(q).read(m_.file_offset(u, t), out.data(), out.size());
    if (t > 0 && m_.units[u].state_format == "8bit") {
      const std::uint64_t shard = m_.units[u].shard;
      check_finite_state(reinterpret_cast<const float*>(out.data() + shard), (out.size() - shard) / sizeof(float),
                         source(u, t, q, static_cast<std::uint64_t>(q) * shard, " absmax"), true);
    }
    return out;
  }

 private:
  // Old rank q's window of 8-bit state t - 1 of unit u, dequantized (the
  // last one is kept: loads read windows in order).
  const std::vector<float>& dequantized(std::size_t u, std::size_t t, int q) {
    if (cached_u_ == u && cached_t_ == t && cached_q_ == q) return cached_;
    const std::uint64_t shard = m_.units[u].shard;
    const std::vector<std::byte> bytes = raw(u, t, q);
    cached_.assign(shard, 0.0f);
    kernels::dequantize_blockwise(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                  reinterpret_cast<const float*>(bytes.data() + shard), shard,
                                  m_.states.block_size,
                                  t == 1 ? kernels::QuantMap::signed_dynamic : kernels::QuantMap::unsigned_dynamic,
                                  cached_.data());
    cached_u_ = u;
    cached_t_ = t;
    cached_q_ = q;
    return cached_;
  }

  // Where logical element `first` of tensor t of unit u, in old rank q's
  // file, comes from (absmax: blocks of the state's block size).
  StateSource source(std::size_t u, std::size_t t, int q, std::uint64_t first, const char* suffix) const {
    return StateSource{.file = dir_ + "/" + m_.files[static_cast<std::size_t>(q)].name, .m = &m_, .unit = u,
                       .tensor = m_.tensors[t] + suffix, .first = first,
                       .stride = *suffix != '\0' ? m_.states.block_size : 1};
  }

  std::vector<float> cached_;
  std::vector<std::uint16_t> bits_;  // read(): a bf16 piece as stored
  std::size_t cached_u_ = SIZE_MAX, cached_t_ = SIZE_MAX;
  int cached_q_ = -1;

  const FileReader& file(int q) {
    auto it = open_.find(q);
    if (it != open_.end()) return *it->second;
    const ManifestFile& f = m_.files[static_cast<std::size_t>(q)];
    auto reader = std::make_unique<FileReader>(dir_ + "/" + f.name);
    const std::uint64_t size = reader->size();
    if (size != f.bytes || size != m_.file_bytes()) {
      throw IoError(fmt::format("{}: {} bytes, the manifest expects {} (truncated or wrong file)", reader->path(), size,
                                m_.file_bytes()));
    }
    const std::uint32_t crc = reader->crc32();
    if (crc != f.crc32) {
      throw IoError(fmt::format("{}: CRC-32 {:08x} does not match the manifest's {:08x} (corrupted shard)",
                                reader->path(), crc, f.crc32));
    }
    return *open_.emplace(q, std::move(reader)).first->second;
  }

  const Manifest& m_;
  std::string dir_;
  std::map<int, std::unique_ptr<FileReader>> open_;
};

// New buffers for one unit, filled before anything in the engine changes.
struct LoadedUnit {
  TypedBuffer params;
  AlignedBuffer<float> master;
  std::vector<std::vector<std::byte>> states;  ///< the unit's state arrays (UnitStates), whole
};

// [Note: bounded-memory load]
// A load reads every unit's state before it changes anything, so that a
// bad checkpoint (a file too short, a CRC-32 that does not match, a value
// that is not finite) leaves the engine as it was. Units whose arrays live
// in memory are kept from that read phase to the commit; they fit, since
// the engine holds them anyway. A unit with an array on nvme is not kept:
// its state may be larger than RAM (the reason it is on nvme). The read
// phase reads and checks it and drops it; the commit reads it again and
// stores it into its swap files, one unit at a time. No rank then holds
// more than one unit's loaded state beyond its working set, for twice the
// reads of those units; the checks all ran before the commit, which can
// fail only as a swap write can (an I/O error: an agreed error that leaves
// the engine unusable, [Note: storage phases]).

// Whether any array of unit u lives in swap files.
bool has_nvme_array(EngineState& s, UnitId u) {
  const ArrayStore& store = s.store();
  if (store.tier(u, {ArrayKind::params}) == MemTier::nvme) return true;
  if (s.mixed() && store.tier(u, {ArrayKind::master}) == MemTier::nvme) return true;
  if (store.options().remote_optimizer) return false;  // on the parameter server
  for (int k = 0; k < store.states(u).arrays(); ++k) {
    if (store.tier(u, {ArrayKind::state, k}) == MemTier::nvme) return true;
  }
  return false;
}

// Unit u's state as this rank stores it, read from the checkpoint (the
// files verified on first use, every value checked finite).
LoadedUnit read_unit(EngineState& s, const Manifest& m, const std::vector<std::string>& names, TensorReader& reader,
                     std::size_t u) {
  const int stage = s.stage(), r = s.rank();
  const UnitInfo& info = s.info(static_cast<UnitId>(u));
  const std::uint64_t shard_lo = static_cast<std::uint64_t>(r) * info.shard;
  LoadedUnit lu;
  // Optimizer states: every window at stage 0, else this rank's
  // ([Note: state arrays]); the saved codes and absmax as they are when
  // the blocks are the same (8-bit, the same block size, world size and
  // so shard: window w is old rank w's),
  // else fp32 values (8-bit dequantized, bf16 widened), quantized anew
  // for 8-bit and rounded to bf16 for bf16 (exact for bf16 values).
  const std::uint64_t sn = stage == 0 ? info.padded : info.shard;  // master weights
  const UnitStates& target = s.store().states(static_cast<UnitId>(u));
  const bool exact = target.dtype == StateDtype::q8 && m.units[u].state_format == "8bit" &&
                     m.states.block_size == target.block && m.world_size == s.world() &&
                     m.units[u].shard == info.shard;
  lu.states.assign(static_cast<std::size_t>(target.arrays()), {});
  for (int w = stage == 0 ? 0 : r; w < (stage == 0 ? s.world() : r + 1); ++w) {
    std::vector<std::vector<std::byte>> arrays;
    if (exact) {
      for (std::size_t k = 1; k < names.size(); ++k) {
        std::vector<std::byte> b = reader.raw(u, k, w);
        arrays.emplace_back(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(info.shard));
        arrays.emplace_back(b.begin() + static_cast<std::ptrdiff_t>(info.shard), b.end());
      }
    } else {
      std::vector<std::vector<float>> values;
      const std::uint64_t lo = static_cast<std::uint64_t>(w) * info.shard;
      for (std::size_t k = 1; k < names.size(); ++k) {
        values.emplace_back(info.shard, 0.0f);
        reader.read(u, k, lo, lo + info.shard, values.back().data());
      }
      arrays = s.optimizer.state_arrays_from_f32(s.store(), static_cast<UnitId>(u), w, values);
    }
    for (std::size_t k = 0; k < arrays.size(); ++k) {
      lu.states[k].insert(lu.states[k].end(), arrays[k].begin(), arrays[k].end());
    }
  }
  // Parameters (compute dtype): full at stages 0-2, else the shard; from the masters.
  const std::uint64_t plo = stage < 3 ? 0 : shard_lo, pn = stage < 3 ? info.padded : info.shard;
  lu.params = TypedBuffer(pn, s.dtype());
  if (!s.mixed()) {
    reader.read(u, 0, plo, plo + pn, lu.params.as<float>());
    return lu;
  }
  AlignedBuffer<float> wide(pn);
  reader.read(u, 0, plo, plo + pn, wide.data());
  kernels::cast(lu.params.data(), s.dtype(), wide.data(), DType::f32, pn);
  lu.master = AlignedBuffer<float>(sn);
  if (stage == 0) {
    std::copy(wide.data(), wide.data() + sn, lu.master.data());
  } else {
    reader.read(u, 0, shard_lo, shard_lo + sn, lu.master.data());
  }
  return lu;
}

// The commit's first part, on this rank alone: what a load replaces or
// starts over (gradients, gathered units, ZeRO++'s residuals, the order).
void begin_commit(EngineState& s) {
  s.reducer().discard();
  s.reducer().reset_residuals();  // ZeRO++ qgZ's error feedback is not saved: it starts over
  s.unsharder().reset();  // also ends swap-ins (ShardSource::release)
  s.store().clear_nvme_grads();
  std::vector<bool>& reduced = s.progress.reduced;
  reduced.assign(reduced.size(), false);
  s.progress.order.clear();
}

// Stores unit u's loaded state into its resident buffers (on the compute
// device) or its swap files, on this rank alone.
void commit_unit(EngineState& s, UnitId u, LoadedUnit& lu) {
  ArrayStore& store = s.store();
  store.zero_grads(u);
  store.store(u, {ArrayKind::params}, lu.params.data());
  if (ParameterServerClient* client = s.ps_client.get()) {
    // [Note: parameter-server layout]: the master values (the parameters
    // in fp32 training) and the states of this rank's window go to its
    // server.
    const std::size_t shard = s.info(u).shard;
    const float* params = lu.params.as<float>() + (s.stage() < 3 ? static_cast<std::size_t>(s.rank()) * shard : 0);
    client->put_piece(std::as_bytes(std::span<const float>(params, shard)));
    for (const std::vector<std::byte>& state : lu.states) client->put_piece(state);
    return;
  }
  if (s.mixed()) store.store(u, {ArrayKind::master}, lu.master.data());
  for (std::size_t k = 0; k < lu.states.size(); ++k) {
    store.store(u, {ArrayKind::state, static_cast<int>(k)}, lu.states[k].data());
  }
}

// On a mesh, after every group loaded its own folder: the groups must have
// loaded the same optimizer step (a tag given by name can name checkpoints
// of different steps in different folders). Collective over the world; throws
// AgreedConfigError on every rank naming each (stage, tp rank)'s step.
void check_same_step(EngineState& s, const std::string& save_dir) {
  Communicator& world = *s.comms.world();
  const double mine[3] = {static_cast<double>(s.progress.optimizer_steps), static_cast<double>(s.comms.pp_rank()),
                          static_cast<double>(s.comms.tp_rank())};
  std::vector<double> all(3 * static_cast<std::size_t>(world.world_size()));
  world.all_gather(mine, all.data(), 3, DType::f64);
  bool same = true;
  for (std::size_t q = 1; q < static_cast<std::size_t>(world.world_size()); ++q) same = same && all[3 * q] == all[0];
  if (same) return;
  std::string steps;
  for (std::size_t q = 0; q < static_cast<std::size_t>(world.world_size()); ++q) {
    steps += fmt::format("{}rank {} (pipeline stage {}, tp rank {}): step {}", q == 0 ? "" : ", ", q, all[3 * q + 1],
                         all[3 * q + 2], all[3 * q]);
  }
  throw AgreedConfigError(fmt::format("{}: the mesh's checkpoint folders hold different steps ({}); every pipeline "
                                      "stage and tensor-parallel rank must load the same step: the tag names "
                                      "checkpoints of different steps in different folders",
                                      save_dir, steps),
                          world.rank());
}

// With no tag on a mesh of checkpoint folders: the tag of the newest step
// every folder holds complete ([Note: mesh checkpoint commit] in
// engine_save.cpp), the same on every rank. World rank 0 says on stderr when
// it skips a newer step that some folder lacks. Collective over the world;
// throws AgreedConfigError on every rank, naming each folder's newest step,
// when no step is in every folder.
std::string newest_common_tag(EngineState& s, const std::string& mesh_save_dir) {
  const MeshPosition at = s.comms.mesh_position();
  const std::vector<FolderCheckpoint> listed = list_folder_checkpoints(mesh_checkpoint_root(at, mesh_save_dir));
  Communicator& world = *s.comms.world();
  const double mine[3] = {static_cast<double>(at.pp_rank), static_cast<double>(at.tp_rank),
                          listed.empty() ? -1.0 : static_cast<double>(listed.front().step)};
  std::vector<double> all(3 * static_cast<std::size_t>(world.world_size()));
  world.all_gather(mine, all.data(), 3, DType::f64);
  const std::vector<FolderCheckpoint> common =
      common_checkpoints(listed, 1, [&s](double v) { return s.comms.world_min(v); });
  const std::int64_t found = common.empty() ? -1 : common.front().step;
  // Each folder once (its data-parallel ranks list the same), with its newest step.
  std::map<std::pair<int, int>, double> newest;
  for (std::size_t q = 0; q < all.size(); q += 3) newest[{static_cast<int>(all[q]), static_cast<int>(all[q + 1])}] = all[q + 2];
  std::vector<std::string> ahead;
  for (const auto& [folder, step] : newest) {
    if (step <= static_cast<double>(found)) continue;
    const MeshPosition f{.dp = at.dp, .tp = at.tp, .tp_rank = folder.second, .pp = at.pp, .pp_rank = folder.first};
    ahead.push_back(step < 0 ? fmt::format("{} holds none", mesh_checkpoint_root(f, mesh_save_dir))
                             : fmt::format("{} holds step {}", mesh_checkpoint_root(f, mesh_save_dir), step));
  }
  if (common.empty()) {
    std::vector<std::string> each;
    for (const auto& [folder, step] : newest) {
      const MeshPosition f{.dp = at.dp, .tp = at.tp, .tp_rank = folder.second, .pp = at.pp, .pp_rank = folder.first};
      each.push_back(step < 0 ? fmt::format("{}: none", mesh_checkpoint_root(f, mesh_save_dir))
                              : fmt::format("{}: newest step {}", mesh_checkpoint_root(f, mesh_save_dir), step));
    }
    throw AgreedConfigError(fmt::format("{}: no checkpoint step is complete in every folder of the mesh ({}); a mesh "
                                        "checkpoint loads only from a step that every pipeline stage and "
                                        "tensor-parallel rank saved",
                                        mesh_save_dir, fmt::join(each, "; ")),
                            world.rank());
  }
  if (!ahead.empty() && world.rank() == 0) {
    fmt::print(stderr,
               "zeroshard: {}: loading {} (step {}), the newest step every folder of the mesh holds; skipping newer "
               "steps that are not complete in every folder (a save was interrupted): {}\n",
               mesh_save_dir, common.front().tag, found, fmt::join(ahead, ", "));
  }
  return common.front().tag;
}

}  // namespace

json Engine::load_checkpoint(const std::string& mesh_save_dir, const std::string& tag_in) {
  EngineState& s = *s_;
  finish_async_checkpoint(s);  // a save in flight commits first: the load may be of it
  refuse_direct_push(s, "load_checkpoint()");
  // Pulls in flight would overwrite what the load restores.
  if (s.finalized()) settle_parameter_server(s, "load_checkpoint()");
  discard_deferred_step(s);    // the load replaces what it wrote, or failed to
  std::string chosen = tag_in;
  if (tag_in.empty() && mesh_checkpoint_root(s.comms.mesh_position(), mesh_save_dir) != mesh_save_dir) {
    // A mesh of folders: first the layout (another tp or pp size is named
    // as such), then the newest step every folder holds.
    s.comms.agreed_over_world([&] {
      ZS_CHECK(s.finalized(), "load_checkpoint() before finalize()");
      run_agreed(s.comms.host(), [&] { check_checkpoint_mesh(s.comms.mesh_position(), mesh_save_dir, ""); });
      return 0;
    });
    chosen = newest_common_tag(s, mesh_save_dir);
  }
  // A failure in one (pipeline stage, tp rank)'s group ends every rank of the mesh together.
  const json client_state = s.comms.agreed_over_world([&]() -> json {
    ZS_CHECK(s.finalized(), "load_checkpoint() before finalize()");
    std::string tag = chosen;
    const int r = s.rank();
    Manifest m;
    // On a mesh each tp rank's group reads its own folder ([Note: engine on a mesh]).
    const std::string save_dir = mesh_checkpoint_root(s.comms.mesh_position(), mesh_save_dir);
    TraceScope manifest_span(s.tracer(), "checkpoint_load_manifest", TraceThread::engine, tag_in);
    run_agreed(s.comms.host(), [&] {
      check_checkpoint_mesh(s.comms.mesh_position(), mesh_save_dir, tag);
      if (tag.empty()) tag = read_latest_tag(save_dir);
      // A re-save of this tag killed between the two renames of its fallback
      // left the committed checkpoint in .old-<tag>: rank 0 puts it back, as
      // the next save's sweep would, before any rank reads it.
      if (r == 0) restore_interrupted_save(save_dir, tag);
    });
    run_agreed(s.comms.host(), [&] {
      m = Manifest::read(save_dir + "/" + tag);
      check_manifest_mesh(s.comms.mesh_position(), save_dir + "/" + tag, m);
    });
    const std::string dir = save_dir + "/" + tag;
    // Every rank read the same manifest (the same file): the checks below up
    // to the read phase then come out the same on every rank.
    double crc[2] = {static_cast<double>(m.body_crc32), -static_cast<double>(m.body_crc32)};
    s.comms.host().all_reduce(crc, 2, DType::f64, ReduceOp::max);
    if (crc[0] != -crc[1]) {
      throw AgreedIoError(fmt::format("{}/manifest.json: the ranks read different manifests (CRC-32 from {:08x} to "
                                      "{:08x}); every rank must see the same save directory",
                                      dir, static_cast<std::uint32_t>(-crc[1]), static_cast<std::uint32_t>(crc[0])),
                          r);
    }
    const std::vector<std::string> diffs = model_differences(m, s);
    if (!diffs.empty()) {
      const MeshPosition at = s.comms.mesh_position();
      throw AgreedConfigError(
          fmt::format("{}/manifest.json is from a different model (folder of {}):\n  {}", dir,
                      mesh_coordinates(at.dp, at.tp_rank, at.tp, at.pp_rank, at.pp), fmt::join(diffs, "\n  ")),
          r);
    }
    if (!m.model.recorded && r == 0) {
      fmt::print(stderr,
                 "zeroshard: warning: {}/manifest.json has no model fingerprint (saved by an older zeroshard): "
                 "the parameter names, shapes and tensor-parallel layouts were checked, the loop's model "
                 "configuration could not be\n",
                 dir);
    }
    const std::vector<std::string> names = checkpoint_tensor_names(s.config.optimizer);
    if (m.tensors != names) {
      throw AgreedConfigError(
          fmt::format("{}/manifest.json holds tensors [{}] but this optimizer ({}) needs [{}]", dir,
                      fmt::join(m.tensors, ", "), optimizer_name(s.config.optimizer.kind), fmt::join(names, ", ")),
          r);
    }

    if (const std::vector<std::string> roles = muon_role_differences(m, s); !roles.empty()) {
      throw AgreedConfigError(
          fmt::format("{}/manifest.json: optimizer roles differ (a Muon matrix's exp_avg is Muon's momentum and its "
                      "exp_avg_sq 0; AdamW would restart from a second moment of 0):\n  {}\nload with the "
                      "checkpoint's optimizer.type and muon_params (its manifest's \"optimizer\" section)",
                      dir, fmt::join(roles, "\n  ")),
          r);
    }

    manifest_span.end();
    // [Note: bounded-memory load]: units with an array on nvme are read
    // twice, one at a time: checked in the read phase, stored in the commit.
    std::vector<LoadedUnit> loaded(s.layout.units().size());
    std::vector<bool> streamed(loaded.size());
    for (std::size_t u = 0; u < loaded.size(); ++u) streamed[u] = has_nvme_array(s, static_cast<UnitId>(u));
    TraceScope read_span(s.tracer(), "checkpoint_load_read", TraceThread::engine, tag);
    TensorReader reader(m, dir);
    run_agreed(s.comms.host(), [&] {
      for (std::size_t u = 0; u < loaded.size(); ++u) {
        LoadedUnit lu = read_unit(s, m, names, reader, u);
        if (!streamed[u]) loaded[u] = std::move(lu);
      }
    });

    // Commit: nothing above touched the engine. Its writes (swap files on
    // nvme) are agreed: [Note: storage phases] in runtime/engine/storage_phase.h.
    read_span.end();
    const TraceScope commit_span(s.tracer(), "checkpoint_load_commit", TraceThread::engine, tag);
    run_storage_phase(
        s, fmt::format("load_checkpoint(\"{}\")", dir),
        [&] {
          begin_commit(s);
          if (s.ps_client) s.ps_client->begin_put_state();
          try {
            for (std::size_t u = 0; u < loaded.size(); ++u) {
              if (streamed[u]) loaded[u] = read_unit(s, m, names, reader, u);
              commit_unit(s, static_cast<UnitId>(u), loaded[u]);
              loaded[u] = LoadedUnit{};
            }
          } catch (...) {
            if (s.ps_client) s.ps_client->abort_put_state();  // the server's stream ends too
            throw;
          }
          if (s.ps_client) s.ps_client->end_put_state(m.optimizer_steps);
        },
        true);
    s.unusable.clear();
    s.progress.optimizer_steps = m.optimizer_steps;
    s.progress.micro_steps = m.optimizer_steps * s.config.gradient_accumulation_steps;
    if (s.dtype() == DType::f16) s.progress.scaler.set_state(m.scaler);
    return m.client_state;
  });
  if (s.comms.on_mesh()) check_same_step(s, mesh_save_dir);
  return client_state;
}

}  // namespace zeroshard
