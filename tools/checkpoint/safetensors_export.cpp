#include "tools/checkpoint/safetensors_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <functional>
#include <memory>

#include "core/error.h"
#include "tools/checkpoint/checkpoint_verify.h"
#include "examples/report/progress_line.h"
#include "core/durable_file.h"
#include "runtime/checkpoint/safetensors_writer.h"

namespace zeroshard::tools {

using examples::ProgressLine;

namespace fs = std::filesystem;

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
void read_master_range(const Manifest& m, const std::vector<std::unique_ptr<FileReader>>& files,
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

// A checkpoint directory, its manifest and its rank files, verified (size
// and CRC-32 against the manifest) and open for reading.
struct VerifiedCheckpoint {
  std::string dir;
  Manifest m;
  std::vector<std::unique_ptr<FileReader>> files;
};

// Resolves `path` (a checkpoint directory, or a save directory whose
// `latest` names one), reads its manifest and verifies every rank file
// before anything is written. Throws IoError naming the first bad file.
VerifiedCheckpoint open_verified(const std::string& path) {
  VerifiedCheckpoint c;
  c.dir = resolve_checkpoint_dir(path);
  c.m = Manifest::read(c.dir);  // validated: runtime/checkpoint/manifest_checks.h
  for (const ManifestFile& f : c.m.files) {
    c.files.push_back(std::make_unique<FileReader>(c.dir + "/" + f.name));
    const RankFileCheck k = check_rank_file(c.m, f, *c.files.back());
    if (!k.ok()) throw IoError(fmt::format("{}: {}", k.path, k.problem));
  }
  return c;
}

// The product of shape[from, to) (1 when the range is empty).
std::size_t product(const std::vector<std::int64_t>& shape, std::size_t from, std::size_t to) {
  std::size_t n = 1;
  for (std::size_t i = from; i < to; ++i) n *= static_cast<std::size_t>(shape[i]);
  return n;
}

// Fills dst with the fp32 values of one planned tensor (t.param->numel of them).
using TensorSource = std::function<void(const ExportTensor& t, float* dst)>;

// Writes the safetensors file of `plan`: the 8-byte header length, the
// padded header, then each non-empty tensor in plan order, filled by `fill`
// into one reused buffer of plan.layout.largest_bytes. Writes out_path + ".tmp",
// fsyncs it and renames it over out_path (its directory fsynced); on any
// error the temporary file is removed and out_path is untouched.
// `m` is the manifest the plan was made from (tag and step of the result);
// `checkpoint_dir` is reported as ExportResult::checkpoint_dir. Throws
// IoError (write failure) and whatever `fill` throws.
ExportResult write_safetensors(const ExportPlan& plan, const Manifest& m, const std::string& checkpoint_dir,
                               const std::string& out_path, bool show_progress, const TensorSource& fill) {
  const std::string tmp = out_path + ".tmp";
  TempFileGuard guard(tmp);
  DurableFileWriter out(tmp);
  const std::string prefix = safetensors_prefix(plan.layout);
  out.write(prefix.data(), prefix.size());

  std::vector<float> buffer(plan.layout.largest_bytes / sizeof(float));
  std::optional<ProgressLine> progress;
  if (show_progress) progress.emplace("export", static_cast<std::int64_t>(plan.tensors.size()), stderr);
  std::int64_t done = 0;
  for (const ExportTensor& t : plan.tensors) {
    const std::uint64_t n = t.param->numel;
    ++done;
    if (progress) progress->update(done, t.param->name);
    if (n == 0) continue;
    fill(t, buffer.data());
    out.write(buffer.data(), n * sizeof(float));
  }
  if (progress) progress->finish();
  out.finish();
  const fs::path parent = fs::path(out_path).parent_path();
  rename_durable(tmp, out_path, parent.empty() ? "." : parent.string());
  guard.release();

  ExportResult r;
  r.checkpoint_dir = checkpoint_dir;
  r.tag = m.tag;
  r.optimizer_step = m.optimizer_steps;
  r.tensors = plan.tensors.size();
  r.data_bytes = plan.layout.data_bytes;
  r.file_bytes = plan.layout.file_bytes();
  r.buffer_bytes = plan.layout.largest_bytes;
  return r;
}

}  // namespace

ExportPlan plan_safetensors_export(const Manifest& m) {
  ExportPlan plan;
  plan.layout = plan_checkpoint_safetensors(m, DType::f32);
  std::size_t k = 0;
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    for (const ManifestParam& p : m.units[u].params) {
      const SafetensorsEntry& e = plan.layout.tensors[k++];
      plan.tensors.push_back(ExportTensor{.unit = u, .param = &p, .begin = e.begin, .end = e.end});
    }
  }
  return plan;
}

ExportResult export_mesh_safetensors(const std::string& save_dir, const std::string& out_path, bool progress) {
  // Every tp rank's checkpoint, checked to be one save of one mesh.
  std::vector<VerifiedCheckpoint> parts;
  parts.push_back(open_verified(save_dir + "/tp-00"));
  const int tp = parts[0].m.mesh.tp;
  for (int t = 1; t < tp; ++t) {
    const std::string path = fmt::format("{}/tp-{:02d}", save_dir, t);
    if (!fs::exists(path)) {
      throw IoError(fmt::format("{}: missing; {} was saved at tensor-parallel size {}", path,
                                parts[0].dir + "/manifest.json", tp));
    }
    parts.push_back(open_verified(path));
  }
  for (int t = 0; t < tp; ++t) {
    const Manifest& m = parts[static_cast<std::size_t>(t)].m;
    if (m.mesh.tp != tp || m.mesh.tp_rank != t || m.tag != parts[0].m.tag ||
        m.optimizer_steps != parts[0].m.optimizer_steps || m.units.size() != parts[0].m.units.size()) {
      throw IoError(fmt::format("{}/manifest.json: tp rank {} of {}, tag \"{}\", step {}: not the same save as {} "
                                "(tp rank {} of {}, tag \"{}\", step {})",
                                parts[static_cast<std::size_t>(t)].dir, m.mesh.tp_rank, m.mesh.tp, m.tag,
                                m.optimizer_steps, parts[0].dir, t, tp, parts[0].m.tag, parts[0].m.optimizer_steps));
    }
  }
  // The full model's manifest: split dimensions multiplied by tp.
  Manifest full = parts[0].m;
  for (auto& u : full.units) {
    for (auto& p : u.params) {
      if (p.tp_split_dim < 0) continue;
      p.shape[static_cast<std::size_t>(p.tp_split_dim)] *= tp;
      p.numel *= static_cast<std::uint64_t>(tp);
    }
  }
  const ExportPlan plan = plan_safetensors_export(full);
  std::vector<float> slice;
  return write_safetensors(plan, full, save_dir, out_path, progress, [&](const ExportTensor& t, float* dst) {
    const ManifestParam& fp = *t.param;
    const std::size_t u = t.unit;
    if (fp.tp_split_dim < 0) {
      read_master_range(parts[0].m, parts[0].files, u, fp.offset, fp.numel, dst);
      return;
    }
    // [outer, split, inner]: tp rank r's [outer, split / tp, inner] block goes to its split range.
    const auto i = static_cast<std::size_t>(t.param - full.units[u].params.data());
    const auto d = static_cast<std::size_t>(fp.tp_split_dim);
    const std::size_t outer = product(fp.shape, 0, d), inner = product(fp.shape, d + 1, fp.shape.size());
    const std::size_t local = static_cast<std::size_t>(fp.shape[d]) / static_cast<std::size_t>(tp);
    for (int r = 0; r < tp; ++r) {
      const VerifiedCheckpoint& c = parts[static_cast<std::size_t>(r)];
      const ManifestParam& lp = c.m.units[u].params[i];
      slice.resize(lp.numel);
      read_master_range(c.m, c.files, u, lp.offset, lp.numel, slice.data());
      for (std::size_t o = 0; o < outer; ++o) {
        std::copy_n(slice.data() + o * local * inner, local * inner,
                    dst + (o * static_cast<std::size_t>(fp.shape[d]) + static_cast<std::size_t>(r) * local) * inner);
      }
    }
  });
}

ExportResult export_safetensors(const std::string& ckpt_path, const std::string& out_path, bool progress) {
  // A save directory of an engine on a mesh with tp > 1: one checkpoint per tp rank.
  if (fs::exists(ckpt_path + "/tp-00")) return export_mesh_safetensors(ckpt_path, out_path, progress);
  // Verify every rank file before writing anything, and keep them open.
  const VerifiedCheckpoint c = open_verified(ckpt_path);
  const ExportPlan plan = plan_safetensors_export(c.m);
  return write_safetensors(plan, c.m, c.dir, out_path, progress, [&](const ExportTensor& t, float* dst) {
    read_master_range(c.m, c.files, t.unit, t.param->offset, t.param->numel, dst);
  });
}

}  // namespace zeroshard::tools
