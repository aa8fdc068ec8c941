// A checkpoint's consolidated weights: save_checkpoint's model.safetensors
// with zero_optimization.stage3_gather_16bit_weights_on_model_save.
// Layout: [Note: safetensors layout] in runtime/checkpoint/safetensors_writer.h;
// format and protocol: docs/checkpoint-format.md, "Consolidated weights".
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine_state.h"
#include "runtime/checkpoint/safetensors_writer.h"

namespace zeroshard {

ManifestWeights write_checkpoint_weights(EngineState& s, const std::string& dir, const Manifest& m) {
  const int r = s.rank();
  const DType t = s.dtype();
  SafetensorsMetadata extra;
  if (m.mesh.recorded) extra = {{"tp_size", std::to_string(m.mesh.tp)}, {"tp_rank", std::to_string(m.mesh.tp_rank)}};
  std::optional<DurableFileWriter> out;  // rank 0's file
  run_agreed(s.host_comm, [&] {
    const SafetensorsPlan plan = plan_checkpoint_safetensors(m, t, extra);  // the same on every rank
    if (r != 0) return;
    out.emplace(dir + "/" + kWeightsFileName);
    write_safetensors_header(*out, plan);
  });
  // A unit's parameters tile flat elements [0, numel) in declaration order,
  // as its tensors follow each other in the file: one write per unit.
  auto append = [&](UnitId u, const void* full) { out->write(full, s.info(u).numel * dtype_size(t)); };
  const auto units = static_cast<UnitId>(s.units.size());
  if (s.stage() < 3) {
    // Every rank holds the full compute copy: rank 0 writes its own.
    run_agreed(s.host_comm, [&] {
      if (r != 0) return;
      for (UnitId u = 0; u < units; ++u) {
        HostBuffer holder;
        append(u, s.store->read(u, {ArrayKind::params}, holder));
      }
    });
  } else {
    // Stage 3: one unit at a time, every rank's shard (wherever its tier
    // keeps it: swap files on nvme) all-gathered, then appended by rank 0.
    for (UnitId u = 0; u < units; ++u) {
      HostBuffer holder;
      const void* shard = nullptr;
      run_agreed(s.host_comm, [&] { shard = s.store->read(u, {ArrayKind::params}, holder); });
      const std::vector<std::byte> full = gather_host(s, u, shard, t);
      run_agreed(s.host_comm, [&] {
        if (r == 0) append(u, full.data());
      });
    }
  }
  ManifestWeights w;
  run_agreed(s.host_comm, [&] {
    if (r != 0) return;
    out->finish();
    w = ManifestWeights{.recorded = true, .name = kWeightsFileName, .dtype = std::string(dtype_name(t)),
                        .bytes = out->size(), .crc32 = out->crc32()};
  });
  return w;
}

}  // namespace zeroshard
