// I/O engine and swap directory: bitwise round trips at padding-sensitive
// sizes on both engines and with O_DIRECT and buffered files, empty batches,
// several batches in flight, registered buffers, misuse checks.
// Failure paths (ENOSPC, injected EIO) are in test_io_faults.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "io_test_util.h"
#include "offload/host_pool.h"
#include "offload/swap_directory.h"
#include "offload/swap_naming.h"

using namespace zeroshard;
using namespace zeroshard::test;

namespace {

const std::vector<std::uint64_t> kSizes = {0, 1, 511, 512, 513, 4095, 4097, (1u << 20) + 3};

// Writes every size under its own key, reads each back into a buffer
// pre-filled with 0xAB, checks the bytes, the sizes and the on-disk file
// (payload then zero padding). Returns the on-disk files, in kSizes order.
std::vector<std::vector<char>> round_trip_all(SwapDirectory& dir, HostPool& pool) {
  std::vector<std::vector<char>> on_disk;
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    const std::uint64_t n = kSizes[k];
    const std::string key = "unit.7/shard3/size" + std::to_string(n);
    CAPTURE(n);
    HostBuffer src = pool.acquire(SwapDirectory::padded_size(n) == 0 ? 1 : SwapDirectory::padded_size(n),
                                  MemCategory::optimizer_states);
    fill_pattern(std::span(src.data(), n), k + 11);
    dir.write(key, src.capacity_span(), n).wait();
    const SwapFile* f = dir.find(key);
    REQUIRE(f != nullptr);
    CHECK(f->logical_size == n);
    CHECK(f->padded_size == SwapDirectory::padded_size(n));
    CHECK(f->padded_size % 4096 == 0);
    CHECK(std::filesystem::file_size(f->path) == f->padded_size);

    HostBuffer dst = pool.acquire(src.capacity(), MemCategory::optimizer_states);
    std::memset(dst.data(), 0xAB, dst.capacity());
    dir.read(key, dst.capacity_span()).wait();
    CHECK(first_mismatch(std::span<const std::byte>(dst.data(), n), k + 11) == -1);

    std::vector<char> file = slurp(f->path);
    REQUIRE(file.size() == f->padded_size);
    CHECK(first_mismatch(std::as_bytes(std::span(file)).first(n), k + 11) == -1);
    CHECK(std::all_of(file.begin() + static_cast<long>(n), file.end(), [](char c) { return c == 0; }));
    on_disk.push_back(std::move(file));
  }
  return on_disk;
}

}  // namespace

TEST_CASE("round trip is bitwise at sizes 0..1 MiB+3 on both engines, O_DIRECT and buffered") {
  MemoryLedger ledger;
  HostPool pool(ledger);
  TempDir tmp;
  std::vector<std::vector<char>> reference;
  for (const std::uint64_t block : {std::uint64_t{64} << 10, std::uint64_t{1} << 20}) {
    for (AioConfig cfg : engine_configs(block, 4)) {
      for (const bool buffered : {false, true}) {
        auto engine = make_io_engine(cfg);
        AioConfig dcfg = cfg;
        dcfg.force_buffered_io = buffered;
        const auto where = tmp.path() / fmt::format("{}_{}_{}", engine->name(), block, buffered);
        SwapDirectory dir(*engine, where, dcfg);
        CAPTURE(engine->name());
        CAPTURE(block);
        CAPTURE(buffered);
        CHECK(dir.direct() == (!buffered && !env_flag("ZS_FORCE_BUFFERED_IO")));
        auto files = round_trip_all(dir, pool);
        if (reference.empty()) {
          reference = files;
        } else {
          CHECK(files == reference);  // identical bytes on disk in every mode
        }
      }
    }
  }
  CHECK(ledger.current(MemCategory::optimizer_states, MemTier::host) == 0);
}

TEST_CASE("round trip on /dev/shm (tmpfs) with forced buffered I/O and io_uring off") {
  if (!std::filesystem::is_directory("/dev/shm")) {
    MESSAGE("skipped: /dev/shm does not exist here");
    return;
  }
  MemoryLedger ledger;
  HostPool pool(ledger);
  const auto shm = std::filesystem::path("/dev/shm") / fmt::format("zs_io_test_{}", ::getpid());
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } cleanup{shm};
  TempDir disk;
  AioConfig uring;
  auto e1 = make_io_engine(uring);
  SwapDirectory on_disk(*e1, disk.path(), uring);
  const auto reference = round_trip_all(on_disk, pool);

  AioConfig fallback;
  fallback.force_no_io_uring = true;
  fallback.force_buffered_io = true;
  auto e2 = make_io_engine(fallback);
  CHECK(e2->name() == "thread_pool");
  SwapDirectory shm_forced(*e2, shm / "forced", fallback);
  CHECK_FALSE(shm_forced.direct());
  CHECK(round_trip_all(shm_forced, pool) == reference);

  // Whatever the probe decides for tmpfs (kernels >= 6.6 accept O_DIRECT
  // there, older ones fall back to buffered I/O with one log line).
  SwapDirectory shm_probe(*e1, shm / "probed", uring);
  const std::string verdict = shm_probe.direct() ? "accepted" : "refused, buffered fallback";
  MESSAGE("/dev/shm: O_DIRECT " << verdict);
  CHECK(round_trip_all(shm_probe, pool) == reference);
}

TEST_CASE("ZS_FORCE_NO_IO_URING=1 and ZS_FORCE_BUFFERED_IO=1 force the fallbacks") {
  MemoryLedger ledger;
  HostPool pool(ledger);
  TempDir tmp;
  auto normal = make_io_engine(AioConfig{});
  SwapDirectory reference_dir(*normal, tmp.path() / "normal");
  const auto reference = round_trip_all(reference_dir, pool);
  std::unique_ptr<IoEngine> forced;
  std::unique_ptr<SwapDirectory> forced_dir;
  {
    const ScopedEnv no_uring("ZS_FORCE_NO_IO_URING", "1");
    const ScopedEnv buffered("ZS_FORCE_BUFFERED_IO", "1");
    forced = make_io_engine(AioConfig{});
    forced_dir = std::make_unique<SwapDirectory>(*forced, tmp.path() / "forced");
  }
  CHECK(forced->name() == "thread_pool");
  CHECK_FALSE(forced_dir->direct());
  CHECK(round_trip_all(*forced_dir, pool) == reference);
}

TEST_CASE("an empty batch returns at once") {
  TempDir tmp;
  for (const AioConfig& cfg : engine_configs(1 << 20, 32)) {
    auto engine = make_io_engine(cfg);
    const IoTicket t = engine->submit({});
    CHECK(t.id == 0);
    CHECK(engine->is_done(t));
    engine->wait(t);
    SwapDirectory dir(*engine, tmp.path() / std::string(engine->name()), cfg);
    SwapBatch w = dir.write(std::span<const SwapItem>{});
    CHECK(w.done());
    w.wait();
    SwapBatch r = dir.read(std::span<const SwapItem>{});
    r.wait();
  }
}

TEST_CASE("many requests and batches in flight, waited out of order") {
  TempDir tmp;
  for (const AioConfig& cfg : engine_configs(256 << 10, 8)) {
    auto engine = make_io_engine(cfg);
    CAPTURE(engine->name());
    const FileHandle f = FileHandle::open(tmp.path() / "many.bin", FileMode::write_create, true);
    constexpr std::size_t kReq = 3 << 20;  // 3 MiB: 12 pieces each
    constexpr int kBatches = 4;
    constexpr int kPerBatch = 3;
    AlignedBuffer<std::byte> data(kReq * kBatches * kPerBatch);
    fill_pattern(data.span(), 5);
    std::vector<IoTicket> tickets;
    for (int b = 0; b < kBatches; ++b) {
      std::vector<IoRequest> reqs;
      for (int r = 0; r < kPerBatch; ++r) {
        const std::size_t off = kReq * static_cast<std::size_t>(b * kPerBatch + r);
        reqs.push_back(IoRequest{IoOp::write, &f, off, data.data() + off, kReq});
      }
      tickets.push_back(engine->submit(reqs));
    }
    for (int b = kBatches - 1; b >= 0; --b) engine->wait(tickets[static_cast<std::size_t>(b)]);
    f.sync_data();

    const FileHandle g = FileHandle::open(tmp.path() / "many.bin", FileMode::read, true);
    AlignedBuffer<std::byte> back(data.size());
    const IoRequest whole{IoOp::read, &g, 0, back.data(), back.bytes()};
    const IoTicket t = engine->submit(std::span(&whole, 1));
    engine->wait(t);
    CHECK(std::memcmp(back.data(), data.data(), data.bytes()) == 0);
    CHECK_THROWS_AS(engine->wait(t), InvariantError);  // a ticket is waited once
  }
}

TEST_CASE("io_uring options: registered buffers, single_submit, waves without overlap_events") {
  TempDir tmp;
  MemoryLedger ledger;
  HostPool pool(ledger);
  pool.reserve(5 << 20, 2);
  AioConfig base;
  base.block_size = 128 << 10;
  base.queue_depth = 4;
  for (int variant = 0; variant < 3; ++variant) {
    AioConfig cfg = base;
    cfg.single_submit = variant == 1;
    cfg.overlap_events = variant != 2;
    auto engine = make_io_engine(cfg);
    CAPTURE(variant);
    const bool registered = engine->register_buffers(pool.blocks());
    if (engine->name() == "io_uring") CHECK(registered);
    SwapDirectory dir(*engine, tmp.path() / std::to_string(variant), cfg);
    HostBuffer a = pool.acquire((5 << 20) - 7, MemCategory::master_weights);
    HostBuffer b = pool.acquire((5 << 20) - 7, MemCategory::master_weights);
    fill_pattern(a.span(), 77 + variant);
    dir.write("w", a.capacity_span(), a.size()).wait();
    std::memset(b.data(), 0, b.capacity());
    dir.read("w", b.capacity_span()).wait();
    CHECK(first_mismatch(b.span(), 77 + variant) == -1);
    // Unregistered memory still works on a registered engine.
    AlignedBuffer<std::byte> plain(SwapDirectory::padded_size(a.size()));
    dir.read("w", plain.span()).wait();
    CHECK(first_mismatch(plain.span().first(a.size()), 77 + variant) == -1);
    CHECK(engine->register_buffers({}) == (engine->name() == "io_uring"));
  }
}

TEST_CASE("misuse is an InvariantError, not a crash") {
  TempDir tmp;
  auto engine = make_io_engine(AioConfig{});
  const FileHandle f = FileHandle::open(tmp.path() / "x", FileMode::write_create, true);
  AlignedBuffer<std::byte> buf(8192);
  const IoRequest odd_len{IoOp::write, &f, 0, buf.data(), 100};
  CHECK_THROWS_AS(engine->submit(std::span(&odd_len, 1)), InvariantError);
  const IoRequest odd_ptr{IoOp::write, &f, 0, buf.data() + 1, 4096};
  CHECK_THROWS_AS(engine->submit(std::span(&odd_ptr, 1)), InvariantError);
  CHECK_THROWS_AS(engine->wait(IoTicket{12345}), InvariantError);

  SwapDirectory dir(*engine, tmp.path() / "d");
  CHECK_THROWS_AS(dir.read("never-written", buf.span()), InvariantError);
  CHECK_THROWS_AS(dir.write("k", std::span(buf.data(), 4096), 4097), InvariantError);
  const SwapItem twice[] = {{"k", buf.span().first(4096), 1}, {"k", buf.span().subspan(4096), 1}};
  CHECK_THROWS_AS(dir.write(twice), InvariantError);
  {
    SwapBatch pending = dir.write("k", buf.span(), 10);
    CHECK_THROWS_AS(dir.write("k", buf.span(), 10), InvariantError);
    CHECK_THROWS_AS(dir.remove("k"), InvariantError);
  }  // the destructor waits
  CHECK(dir.find("k") != nullptr);
}

TEST_CASE("a read past the end of a file is an IoError naming the file") {
  TempDir tmp;
  for (const AioConfig& cfg : engine_configs(1 << 20, 8)) {
    auto engine = make_io_engine(cfg);
    const auto p = tmp.path() / "short.bin";
    {
      const FileHandle w = FileHandle::open(p, FileMode::write_create, false);
      AlignedBuffer<std::byte> d(4096);
      const IoRequest r{IoOp::write, &w, 0, d.data(), 4096};
      engine->wait(engine->submit(std::span(&r, 1)));
    }
    const FileHandle f = FileHandle::open(p, FileMode::read, false);
    AlignedBuffer<std::byte> d(3 << 20);
    const IoRequest r{IoOp::read, &f, 0, d.data(), d.bytes()};
    const IoTicket t = engine->submit(std::span(&r, 1));
    try {
      engine->wait(t);
      FAIL("expected IoError");
    } catch (const IoError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(p.string()) != std::string::npos);
      CHECK(msg.find("end of file") != std::string::npos);
    }
  }
}

TEST_CASE("a 10,000-character unit name keeps every path component under 255 bytes") {
  TempDir tmp;
  auto engine = make_io_engine(AioConfig{});
  SwapDirectory dir(*engine, tmp.path(), AioConfig{});
  const std::string unit(10000, 'u');
  const std::string k1 = unit + "/shard0/exp_avg";
  const std::string k2 = unit + "/shard0/exp_avg_sq";
  const std::string k3 = unit + "_shard0_exp_avg";
  AlignedBuffer<std::byte> buf(8192);
  for (const std::string& k : {k1, k2, k3}) {
    fill_pattern(buf.span(), k.size());
    dir.write(k, buf.span(), 5000).wait();
  }
  CHECK(dir.path_for(k1) != dir.path_for(k2));
  CHECK(dir.path_for(k1) != dir.path_for(k3));
  for (const std::string& k : {k1, k2, k3}) {
    std::memset(buf.data(), 0, buf.bytes());
    dir.read(k, buf.span()).wait();
    CHECK(first_mismatch(buf.span().first(5000), k.size()) == -1);
    for (const auto& part : dir.path_for(k)) CHECK(part.string().size() < 255);
  }
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    CHECK(entry.path().filename().string().size() < 255);
    ++files;
  }
  CHECK(files == 3);
  CHECK(swap_file_name("layers.0.attn") == "layers.0.attn.zs");
  CHECK(swap_file_name("a/b") != swap_file_name("a_b"));
  CHECK(swap_file_name("").size() > 3);
}

TEST_CASE("link_current: a hard link keeps a key's content while later writes replace it") {
  TempDir tmp;
  auto engine = make_io_engine(AioConfig{});
  SwapDirectory dir(*engine, tmp.path() / "d");
  AlignedBuffer<std::byte> buf(8192);
  std::fill(buf.span().begin(), buf.span().end(), std::byte{7});
  dir.write("k", buf.span(), 5001).wait();  // odd size: padded to 8192 on disk
  const std::filesystem::path link = tmp.path() / "snapshot-k";
  CHECK(dir.link_current("k", link));
  std::fill(buf.span().begin(), buf.span().end(), std::byte{9});
  dir.write("k", buf.span(), 5001).wait();  // a new generation: renamed over the name
  std::ifstream in(link, std::ios::binary);
  std::vector<char> kept(8192);
  in.read(kept.data(), static_cast<std::streamsize>(kept.size()));
  CHECK(in.gcount() == 8192);
  CHECK(std::all_of(kept.begin(), kept.begin() + 5001, [](char c) { return c == 7; }));
  CHECK(std::all_of(kept.begin() + 5001, kept.end(), [](char c) { return c == 0; }));  // the zeroed pad
  AlignedBuffer<std::byte> now(8192);
  dir.read("k", now.span()).wait();
  CHECK(now[0] == std::byte{9});
  CHECK_THROWS_AS(dir.link_current("never-written", tmp.path() / "x"), InvariantError);
  {
    SwapBatch pending = dir.write("k", buf.span(), 10);
    CHECK_THROWS_AS(dir.link_current("k", tmp.path() / "y"), InvariantError);
  }
  // An existing target is an IoError naming both paths (EEXIST is not "no hard links here").
  try {
    dir.link_current("k", link);
    FAIL("linking over an existing file did not throw");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()).find(link.string()) != std::string::npos);
  }
}
