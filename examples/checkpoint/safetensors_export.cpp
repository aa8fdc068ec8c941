#include "examples/checkpoint/safetensors_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "examples/checkpoint/checkpoint_verify.h"
#include "runtime/checkpoint_files.h"

namespace zeroshard::examples {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "safetensors and zeroshard rank files are little-endian; this export copies bytes as they are");

namespace {

/// Removes a temporary file unless released (the export completed).
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove(path_, ec);
    }
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

/// Reads logical elements [lo, lo + n) of unit u's master tensor from the
/// rank files (rank q holds [q*shard, (q+1)*shard)) into dst.
void read_master_range(const Manifest& m, const std::vector<std::unique_ptr<CheckpointReader>>& files,
                       std::size_t u, std::uint64_t lo, std::uint64_t n, float* dst) {
  const std::uint64_t shard = m.units[u].shard;
  const std::uint64_t base = m.file_offset(u, 0);
  for (std::uint64_t e = lo; e < lo + n;) {
    const std::uint64_t q = e / shard, off = e % shard;
    const std::uint64_t count = std::min(lo + n - e, shard - off);
    files[q]->read(base + off * sizeof(float), dst + (e - lo), count * sizeof(float));
    e += count;
  }
}

}  // namespace

ExportPlan plan_safetensors_export(const Manifest& m) {
  ExportPlan plan;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"tag", m.tag},
                            {"optimizer_step", std::to_string(m.optimizer_steps)},
                            {"world_size", std::to_string(m.world_size)},
                            {"stage", std::to_string(m.stage)},
                            {"compute_dtype", m.compute_dtype}};
  std::uint64_t pos = 0;
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    for (const ManifestParam& p : m.units[u].params) {
      if (p.name == "__metadata__") {
        throw IoError("a parameter named \"__metadata__\" cannot be exported: safetensors reserves that key");
      }
      const std::uint64_t bytes = p.numel * sizeof(float);
      plan.tensors.push_back(ExportTensor{.unit = u, .param = &p, .begin = pos, .end = pos + bytes});
      header[p.name] = {{"dtype", "F32"}, {"shape", p.shape}, {"data_offsets", {pos, pos + bytes}}};
      pos += bytes;
      plan.largest_bytes = std::max(plan.largest_bytes, bytes);
    }
  }
  plan.data_bytes = pos;
  plan.header = header.dump();
  plan.header.resize((plan.header.size() + 7) / 8 * 8, ' ');
  return plan;
}

ExportResult export_safetensors(const std::string& ckpt_path, const std::string& out_path) {
  const std::string dir = resolve_checkpoint_dir(ckpt_path);
  const Manifest m = Manifest::read(dir);  // validated: runtime/manifest_checks.h

  // Verify every rank file before writing anything, and keep them open.
  std::vector<std::unique_ptr<CheckpointReader>> files;
  for (const ManifestFile& f : m.files) {
    files.push_back(std::make_unique<CheckpointReader>(dir + "/" + f.name));
    const RankFileCheck c = check_rank_file(m, f, *files.back());
    if (!c.ok()) throw IoError(fmt::format("{}: {}", c.path, c.problem));
  }

  const ExportPlan plan = plan_safetensors_export(m);
  const std::string tmp = out_path + ".tmp";
  TempFileGuard guard(tmp);
  CheckpointWriter out(tmp);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(plan.header.size()) >> (8 * i));
  out.write(length, sizeof length);
  out.write(plan.header.data(), plan.header.size());

  std::vector<float> buffer(plan.largest_bytes / sizeof(float));
  for (const ExportTensor& t : plan.tensors) {
    const std::uint64_t n = t.param->numel;
    if (n == 0) continue;
    read_master_range(m, files, t.unit, t.param->offset, n, buffer.data());
    out.write(buffer.data(), n * sizeof(float));
  }
  out.finish();
  const fs::path parent = fs::path(out_path).parent_path();
  rename_durable(tmp, out_path, parent.empty() ? "." : parent.string());
  guard.release();

  ExportResult r;
  r.checkpoint_dir = dir;
  r.tag = m.tag;
  r.optimizer_step = m.optimizer_steps;
  r.tensors = plan.tensors.size();
  r.data_bytes = plan.data_bytes;
  r.file_bytes = 8 + plan.header.size() + plan.data_bytes;
  r.buffer_bytes = plan.largest_bytes;
  return r;
}

}  // namespace zeroshard::examples
