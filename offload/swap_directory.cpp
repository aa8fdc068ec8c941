#include "offload/swap_directory.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/tracer.h"
#include "offload/io/os_error.h"
#include "offload/swap_naming.h"

namespace zeroshard {

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// Whether files in `dir` can be written with O_DIRECT: EINVAL from open or
// from an aligned write means no. Other errors are left to the real writes.
bool probe_direct(const std::filesystem::path& dir) {
  const std::filesystem::path probe = dir / fmt::format(".zs_direct_probe.{}", ::getpid());
  int err = 0;
  FileHandle f = FileHandle::try_open(probe, FileMode::write_create, true, err);
  if (!f.valid()) {
    if (err == EINVAL) {
      log_once(fmt::format("{} does not support O_DIRECT (open: {}); using buffered I/O there (2-3x slower)",
                           dir.string(), errno_text(err)));
      return false;
    }
    throw_file_error("creating", probe, err);
  }
  AlignedBuffer<std::byte> block(kDirectIoAlignment);
  const ssize_t n = ::pwrite(f.fd(), block.data(), block.bytes(), 0);
  const int werr = n < 0 ? errno : 0;
  f = FileHandle();
  ::unlink(probe.c_str());
  if (werr == EINVAL) {
    log_once(fmt::format("{} does not support O_DIRECT (write: {}); using buffered I/O there (2-3x slower)",
                         dir.string(), errno_text(werr)));
    return false;
  }
  return true;
}

}  // namespace

SwapBatch::SwapBatch(SwapBatch&& o) noexcept
    : dir_(o.dir_),
      ticket_(o.ticket_),
      waited_(std::exchange(o.waited_, true)),
      writes_(std::move(o.writes_)),
      reads_(std::move(o.reads_)),
      issued_ns_(o.issued_ns_),
      bytes_(o.bytes_) {}

SwapBatch& SwapBatch::operator=(SwapBatch&& o) noexcept {
  if (this != &o) {
    finish();
    dir_ = o.dir_;
    ticket_ = o.ticket_;
    waited_ = std::exchange(o.waited_, true);
    writes_ = std::move(o.writes_);
    reads_ = std::move(o.reads_);
    issued_ns_ = o.issued_ns_;
    bytes_ = o.bytes_;
  }
  return *this;
}

SwapBatch::~SwapBatch() { finish(); }

void wait_traced(SwapBatch& batch, Tracer* tracer, bool write) {
  {
    const TraceScope waiting(tracer, write ? "swap_write_wait" : "swap_read_wait", TraceThread::engine,
                             TimeCategory::io_wait, {}, batch.bytes());
    batch.wait();
  }
  if (tracer != nullptr && tracer->spans_on()) {
    tracer->add_span(TraceSpan{write ? "swap_write" : "swap_read", TraceThread::io, {}, batch.bytes(),
                               batch.issued_ns(), Tracer::now_ns(), -1});
  }
}

void SwapBatch::finish() {
  if (waited_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    log_once(fmt::format("swap batch destroyed without wait() failed: {}", e.what()));
  }
}

bool SwapBatch::done() const { return waited_ || dir_->engine_.is_done(ticket_); }

void SwapBatch::wait() {
  if (waited_) return;
  waited_ = true;
  try {
    dir_->engine_.wait(ticket_);
  } catch (...) {
    dir_->abandon(writes_);
    reads_.clear();
    throw;
  }
  reads_.clear();
  dir_->commit(writes_);
}

SwapDirectory::SwapDirectory(IoEngine& engine, std::filesystem::path dir, const AioConfig& cfg)
    : engine_(engine), dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw_file_error("creating directory", dir_, ec.value());
  dir_fd_ = FileHandle::open_directory(dir_);
  if (cfg.force_buffered_io) {
    log_once(fmt::format("buffered I/O for {} (force_buffered_io is set)", dir_.string()));
    direct_ = false;
  } else if (env_flag("ZS_FORCE_BUFFERED_IO")) {
    log_once(fmt::format("buffered I/O for {} (ZS_FORCE_BUFFERED_IO=1)", dir_.string()));
    direct_ = false;
  } else {
    direct_ = probe_direct(dir_);
  }
}

std::uint64_t SwapDirectory::padded_size(std::uint64_t bytes) {
  return (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

std::filesystem::path SwapDirectory::path_for(std::string_view key) const {
  return dir_ / swap_file_name(key);
}

SwapBatch SwapDirectory::write(std::span<const SwapItem> items) {
  std::set<std::string_view> keys;
  for (const SwapItem& it : items) {
    ZS_CHECK(keys.insert(it.key).second, "swap key \"{}\" appears twice in one write batch", it.key);
    ZS_CHECK(!writing_.contains(it.key), "swap key \"{}\" is already being written by another batch", it.key);
    const std::uint64_t padded = padded_size(it.bytes);
    ZS_CHECK(it.buffer.size() >= padded,
             "swap write of \"{}\": buffer has {} bytes, needs {} ({} rounded up to 4096)", it.key,
             it.buffer.size(), padded, it.bytes);
    ZS_CHECK(!direct_ || padded == 0 || reinterpret_cast<std::uintptr_t>(it.buffer.data()) % kDirectIoAlignment == 0,
             "swap write of \"{}\": buffer is not 4 KiB aligned (O_DIRECT)", it.key);
  }
  SwapBatch batch(this);
  batch.writes_.reserve(items.size());
  try {
    for (const SwapItem& it : items) {
      const std::uint64_t padded = padded_size(it.bytes);
      if (padded > it.bytes) std::memset(it.buffer.data() + it.bytes, 0, padded - it.bytes);  // none for 0 bytes
      SwapBatch::PendingWrite w;
      w.key = std::string(it.key);
      w.final_path = path_for(it.key);
      w.tmp = w.final_path;
      w.tmp += fmt::format(".{}.tmp", next_generation_++);
      w.logical = it.bytes;
      w.padded = padded;
      w.file = FileHandle::open(w.tmp, FileMode::write_create, direct_);
      batch.writes_.push_back(std::move(w));
    }
    std::vector<IoRequest> reqs;
    reqs.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const SwapBatch::PendingWrite& w = batch.writes_[i];
      if (w.padded != 0) reqs.push_back(IoRequest{IoOp::write, &w.file, 0, items[i].buffer.data(), w.padded});
      batch.bytes_ += w.padded;
    }
    batch.issued_ns_ = Tracer::now_ns();
    batch.ticket_ = engine_.submit(reqs);
  } catch (...) {
    abandon(batch.writes_);
    throw;
  }
  for (const SwapBatch::PendingWrite& w : batch.writes_) writing_.insert(w.key);
  batch.waited_ = false;
  return batch;
}

SwapBatch SwapDirectory::write(std::string_view key, std::span<std::byte> buffer, std::uint64_t bytes) {
  const SwapItem item{key, buffer, bytes};
  return write(std::span<const SwapItem>(&item, 1));
}

SwapBatch SwapDirectory::read(std::span<const SwapItem> items) {
  std::vector<const SwapFile*> files;
  files.reserve(items.size());
  for (const SwapItem& it : items) {
    const SwapFile* f = find(it.key);
    ZS_CHECK(f != nullptr, "swap read of \"{}\": no such key was written to {}", it.key, dir_.string());
    ZS_CHECK(it.buffer.size() >= f->padded_size, "swap read of \"{}\": buffer has {} bytes, needs {}",
             it.key, it.buffer.size(), f->padded_size);
    ZS_CHECK(!direct_ || f->padded_size == 0 ||
                 reinterpret_cast<std::uintptr_t>(it.buffer.data()) % kDirectIoAlignment == 0,
             "swap read of \"{}\": buffer is not 4 KiB aligned (O_DIRECT)", it.key);
    files.push_back(f);
  }
  SwapBatch batch(this);
  batch.reads_.reserve(items.size());
  std::vector<IoRequest> reqs;
  reqs.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (files[i]->padded_size == 0) continue;
    batch.reads_.push_back(FileHandle::open(files[i]->path, FileMode::read, direct_));
    reqs.push_back(IoRequest{IoOp::read, &batch.reads_.back(), 0, items[i].buffer.data(), files[i]->padded_size});
    batch.bytes_ += files[i]->padded_size;
  }
  batch.issued_ns_ = Tracer::now_ns();
  batch.ticket_ = engine_.submit(reqs);
  batch.waited_ = false;
  return batch;
}

SwapBatch SwapDirectory::read(std::string_view key, std::span<std::byte> buffer) {
  const SwapItem item{key, buffer, 0};
  return read(std::span<const SwapItem>(&item, 1));
}

const SwapFile* SwapDirectory::find(std::string_view key) const {
  const auto it = files_.find(key);
  return it == files_.end() ? nullptr : &it->second;
}

bool SwapDirectory::link_current(std::string_view key, const std::filesystem::path& to) const {
  const SwapFile* f = find(key);
  ZS_CHECK(f != nullptr, "swap link of \"{}\": no such key was written to {}", key, dir_.string());
  ZS_CHECK(!writing_.contains(key), "swap key \"{}\" cannot be linked while it is being written", key);
  if (::link(f->path.c_str(), to.c_str()) == 0) return true;
  const int err = errno;
  if (err == EXDEV || err == EPERM || err == EMLINK || err == EOPNOTSUPP) return false;
  throw IoError(fmt::format("hard-linking swap file {} to {} failed: {}", f->path.string(), to.string(),
                            std::strerror(err)));
}

void SwapDirectory::remove(std::string_view key) {
  ZS_CHECK(!writing_.contains(key), "swap key \"{}\" cannot be removed while it is being written", key);
  const auto it = files_.find(key);
  if (it == files_.end()) return;
  if (::unlink(it->second.path.c_str()) != 0 && errno != ENOENT) {
    throw_file_error("removing", it->second.path, errno);
  }
  files_.erase(it);
}

void SwapDirectory::remove_all() {
  while (!files_.empty()) remove(files_.begin()->first);
}

std::uint64_t SwapDirectory::disk_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& [k, f] : files_) sum += f.padded_size;
  return sum;
}

void SwapDirectory::abandon(std::vector<SwapBatch::PendingWrite>& writes) noexcept {
  for (SwapBatch::PendingWrite& w : writes) {
    w.file = FileHandle();
    ::unlink(w.tmp.c_str());
    writing_.erase(w.key);
  }
  writes.clear();
}

void SwapDirectory::commit(std::vector<SwapBatch::PendingWrite>& writes) {
  if (writes.empty()) return;
  std::size_t renamed = 0;
  try {
    for (SwapBatch::PendingWrite& w : writes) {
      w.file.sync_data();
      w.file.close();
    }
    for (SwapBatch::PendingWrite& w : writes) {
      if (::rename(w.tmp.c_str(), w.final_path.c_str()) != 0) {
        throw_file_error(fmt::format("renaming {} over", w.tmp.string()), w.final_path, errno);
      }
      SwapFile& f = files_[w.key];
      f.key = w.key;
      f.path = w.final_path;
      f.logical_size = w.logical;
      f.padded_size = w.padded;
      ++f.generation;
      writing_.erase(w.key);
      ++renamed;
    }
    dir_fd_.sync_all();
  } catch (...) {
    std::vector<SwapBatch::PendingWrite> rest;
    for (std::size_t i = renamed; i < writes.size(); ++i) rest.push_back(std::move(writes[i]));
    abandon(rest);
    writes.clear();
    throw;
  }
  writes.clear();
}

}  // namespace zeroshard
