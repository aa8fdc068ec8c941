// BackgroundWriter: see runtime/checkpoint/background_writer.h.
#include "runtime/checkpoint/background_writer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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

BackgroundWriter::~BackgroundWriter() { join(); }

void BackgroundWriter::start(std::vector<StagedFile> files, int rank) {
  ZS_CHECK(!running(), "BackgroundWriter::start while a write is running");
  finished_.store(false, std::memory_order_release);
  results_.clear();
  error_ = nullptr;
  begin_ns_ = Tracer::now_ns();
  try {
    thread_ = std::thread([this, files = std::move(files), rank]() mutable {
      run(std::move(files), rank);
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

void BackgroundWriter::join() {
  if (thread_.joinable()) thread_.join();
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
  // Below the training threads: on cores the ranks share, the write (its
  // CRC-32 and copies into the page cache) yields to the steps. Best effort:
  // a failure leaves the thread at the process's priority.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kNice);
  try {
    for (const StagedFile& f : files) {
      DurableFileWriter out(f.path);
      const auto* bytes = static_cast<const std::byte*>(f.data);
      for (std::size_t at = 0; at < f.bytes;) {
        const std::size_t n = std::min(kPieceBytes, f.bytes - at);
        checkpoint_write_delay();
        out.write(bytes + at, n);
        at += n;
        if (at == n) {  // after the first piece: the file exists, part written
          checkpoint_write_error_point(f.path, at, std::min(kPieceBytes, f.bytes - at));
          checkpoint_fail_point(f.path, rank);
          checkpoint_crash_point("writing", rank);
        }
      }
      out.finish();
      results_.push_back(WrittenFile{.bytes = out.size(), .crc32 = out.crc32()});
    }
  } catch (...) {
    error_ = std::current_exception();
  }
}

}  // namespace zeroshard
