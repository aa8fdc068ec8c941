// BackgroundWriter: see runtime/checkpoint/background_writer.h.
#include "runtime/checkpoint/background_writer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/tracer.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/save_hooks.h"

namespace zeroshard {

std::uint64_t async_staging_bytes(const Manifest& m, bool weights, DType dtype, int rank) {
  std::uint64_t bytes = m.file_bytes();
  if (weights && rank == 0) {
    bytes += plan_checkpoint_safetensors(m, dtype, mesh_safetensors_metadata(m)).file_bytes();
  }
  return bytes;
}

void remove_snapshot_links(const std::vector<StagedPiece>& pieces) noexcept {
  std::set<std::string> folders;
  for (const StagedPiece& p : pieces) {
    for (const FileExtent& x : p.extents) {
      if (x.path.empty()) continue;
      ::unlink(x.path.c_str());
      folders.insert(std::filesystem::path(x.path).parent_path().string());
    }
  }
  for (const std::string& d : folders) ::rmdir(d.c_str());
}

std::uint64_t linked_snapshot_bytes(UnitId units, int stage, bool mixed, int rank,
                                    const std::function<MemTier(UnitId, ArrayRef)>& tier,
                                    const std::function<const UnitStates&(UnitId)>& states,
                                    const std::function<std::size_t(UnitId)>& shard) {
  if (stage == 0) return 0;
  std::uint64_t bytes = 0;
  for (UnitId u = 0; u < units; ++u) {
    if (tier(u, ArrayRef{mixed ? ArrayKind::master : ArrayKind::params}) == MemTier::nvme) {
      bytes += shard(u) * sizeof(float);
    }
    const UnitStates& st = states(u);
    for (int k = 0; k < st.arrays(); ++k) {
      if (st.packs(k) || tier(u, ArrayRef{ArrayKind::state, k}) != MemTier::nvme) continue;
      bytes += st.window_numel(k, static_cast<std::size_t>(rank), shard(u)) * dtype_size(st.array_dtype(k));
    }
  }
  return bytes;
}

BackgroundWriter::~BackgroundWriter() { join(); }

void BackgroundWriter::start(std::vector<StagedFile> files, int rank) {
  ZS_CHECK(!running(), "BackgroundWriter::start while a write is running");
  finished_.store(false, std::memory_order_release);
  results_.clear();
  error_ = nullptr;
  begin_ns_ = Tracer::now_ns();
  try {
    thread_ = std::thread([this, files = std::move(files), rank]() mutable {
      {
        const std::lock_guard lock(tid_mutex_);
        tid_ = static_cast<int>(::gettid());
      }
      run_below_training();
      run(std::move(files), rank);
      {
        const std::lock_guard lock(tid_mutex_);
        tid_ = 0;
      }
      end_ns_ = Tracer::now_ns();
      finished_.store(true, std::memory_order_release);
    });
  } catch (const std::system_error& e) {
    error_ = std::make_exception_ptr(
        IoError(fmt::format("checkpoint writer: cannot start its thread: {}; nothing was written", e.what())));
    end_ns_ = Tracer::now_ns();
    finished_.store(true, std::memory_order_release);
  }
}

void run_below_training() {
  sched_param none{};
  (void)::sched_setscheduler(0, SCHED_IDLE, &none);
}

void BackgroundWriter::join() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(tid_mutex_);
    if (tid_ != 0) {
      sched_param none{};
      (void)::sched_setscheduler(tid_, SCHED_OTHER, &none);
    }
  }
  thread_.join();
}

const std::vector<WrittenFile>& BackgroundWriter::results() const {
  ZS_CHECK(!running(), "BackgroundWriter::results before join()");
  if (error_) std::rethrow_exception(error_);
  return results_;
}

double BackgroundWriter::seconds() const {
  ZS_CHECK(!running(), "BackgroundWriter::seconds before join()");
  return static_cast<double>(end_ns_ - begin_ns_) / 1e9;
}

std::string BackgroundWriter::error() const {
  ZS_CHECK(!running(), "BackgroundWriter::error before join()");
  if (!error_) return "";
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void BackgroundWriter::run(std::vector<StagedFile> files, int rank) {
  try {
    std::vector<std::byte> buffer;  // a slice read from a hard link
    for (const StagedFile& f : files) {
      DurableFileWriter out(f.path);
      std::uint64_t written = 0, next_delay = 0;
      // Writes n <= kSliceBytes bytes at p, then yields the core (the test
      // hook's delay once per kPieceBytes); after the file's first write
      // (the file exists, part written) the test hooks' points.
      auto put = [&](const std::byte* p, std::size_t n) {
        if (written >= next_delay) {
          checkpoint_write_delay();
          next_delay = written + kPieceBytes;
        }
        out.write(p, n);
        const bool first = written == 0;
        written += n;
        if (first) {
          checkpoint_write_error_point(f.path, n, kPieceBytes);
          checkpoint_fail_point(f.path, rank);
          checkpoint_crash_point("writing", rank);
        }
        ::sched_yield();
      };
      for (const StagedPiece& piece : f.pieces) {
        if (piece.data != nullptr) {
          const auto* bytes = static_cast<const std::byte*>(piece.data);
          for (std::size_t at = 0; at < piece.bytes;) {
            const std::size_t n = std::min<std::size_t>(kSliceBytes, piece.bytes - at);
            put(bytes + at, n);
            at += n;
          }
          continue;
        }
        const std::size_t value = checked_value_bytes(piece.check);
        std::uint64_t done = 0;  // bytes of the piece so far
        buffer.resize(kSliceBytes);
        for (const FileExtent& x : piece.extents) {
          std::optional<FileReader> in;  // buffered: the swap file was written with O_DIRECT or not
          if (!x.path.empty()) in.emplace(x.path);
          for (std::uint64_t at = 0; at < x.bytes;) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kSliceBytes, x.bytes - at));
            if (in) {
              in->read(x.offset + at, buffer.data(), n);
            } else {
              std::memset(buffer.data(), 0, n);
            }
            check_before_save(buffer.data(), n, piece.check, piece.source, done / value);
            put(buffer.data(), n);
            at += n;
            done += n;
          }
        }
      }
      out.finish();
      results_.push_back(WrittenFile{.bytes = out.size(), .crc32 = out.crc32()});
    }
  } catch (...) {
    error_ = std::current_exception();
  }
  for (const StagedFile& f : files) remove_snapshot_links(f.pieces);
}

}  // namespace zeroshard
