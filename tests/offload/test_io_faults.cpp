// Failure paths of the I/O engines and the swap directory: ENOSPC on a
// small tmpfs (or injected, where mounting is not permitted), injected EIO
// on reads and writes, the free-space check. Every failure must be an
// IoError naming the file, must not hang, and must leave the previous
// generation of every file readable.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "io_test_util.h"
#include "offload/io/fault_injection.h"
#include "offload/io/free_space.h"
#include "offload/swap_directory.h"
#include "offload/swap_folder.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using namespace zeroshard::test;

namespace {

// Runs `f`, which must throw IoError; returns its message.
std::string io_error_of(auto&& f) { return testing::required_error_message<IoError>(f, "expected an IoError"); }

// Checks that `key` in `dir` still reads back as pattern `seed` of `n` bytes.
void check_readable(SwapDirectory& dir, const std::string& key, std::uint64_t n, std::uint64_t seed) {
  const SwapFile* f = dir.find(key);
  REQUIRE(f != nullptr);
  CHECK(f->logical_size == n);
  AlignedBuffer<std::byte> back(SwapDirectory::padded_size(n));
  dir.read(key, back.span()).wait();
  CHECK(first_mismatch(back.span().first(n), seed) == -1);
}

// No temporary files may be left in `dir` after a failed write.
void check_no_tmp(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    CHECK_MESSAGE(e.path().extension() != ".tmp", "left behind: " << e.path().string());
  }
}

}  // namespace

TEST_CASE("ENOSPC: IoError naming the file, no hang, the previous generation stays readable") {
  TempDir tmp;
  const auto small = tmp.path() / "small";
  TmpfsMount mnt(small, "size=1m");
  for (const AioConfig& cfg : engine_configs(128 << 10, 8)) {
    auto engine = make_io_engine(cfg);
    CAPTURE(engine->name());
    const auto where = small / std::string(engine->name());
    SwapDirectory dir(*engine, where, cfg);
    AlignedBuffer<std::byte> first(256 << 10);
    fill_pattern(first.span(), 1);
    dir.write("state", first.span(), first.bytes() - 5).wait();

    AlignedBuffer<std::byte> big(2 << 20);
    fill_pattern(big.span(), 2);
    std::string msg;
    if (mnt.mounted()) {
      CHECK_THROWS_AS(check_free_space(where, big.bytes()), IoError);
      CHECK_NOTHROW(check_free_space(where, 4096));
      msg = io_error_of([&] { dir.write("state", big.span(), big.bytes()).wait(); });
    } else {
#if ZS_TEST_HOOKS
      MESSAGE("mount -t tmpfs refused (" << std::strerror(mnt.errno_value())
                                         << "); injecting ENOSPC instead");
      inject_io_fault(parse_io_fault("write:1:ENOSPC"));
      msg = io_error_of([&] { dir.write("state", big.span(), big.bytes()).wait(); });
#else
      MESSAGE("skipped: mount refused and test hooks are compiled out");
      return;
#endif
    }
    CHECK(msg.find("ENOSPC") != std::string::npos);
    CHECK(msg.find((where / "state.zs").string()) != std::string::npos);  // the temporary of that file
    CHECK(msg.find("offset") != std::string::npos);
    check_readable(dir, "state", first.bytes() - 5, 1);
    check_no_tmp(where);
    dir.remove_all();
  }
}

TEST_CASE("check_free_space names the directory, the need and what is available") {
  TempDir tmp;
  CHECK_NOTHROW(check_free_space(tmp.path(), 1));
  const std::uint64_t huge = std::uint64_t{1} << 62;
  const std::string msg = io_error_of([&] { check_free_space(tmp.path(), huge); });
  CHECK(msg.find(tmp.path().string()) != std::string::npos);
  CHECK(msg.find(std::to_string(huge)) != std::string::npos);
  CHECK(msg.find("available") != std::string::npos);
  CHECK_THROWS_AS(available_bytes(tmp.path() / "does-not-exist"), IoError);
}

TEST_CASE("check_free_space counts every rank writing to the file system") {
  TempDir tmp;
  const std::uint64_t avail = available_bytes(tmp.path());
  REQUIRE(avail > 1024 * 1024);
  // Each rank's share fits alone (with slack for other writers), not three times over.
  const std::uint64_t share = avail / 2;
  CHECK_NOTHROW(check_free_space(tmp.path(), share, 1));
  const std::string msg = io_error_of([&] { check_free_space(tmp.path(), share, 3); });
  CHECK(msg.find("for each of the 3 ranks writing to this file system") != std::string::npos);
  CHECK(msg.find(std::to_string(share * 3)) != std::string::npos);
  // Huge counts saturate instead of wrapping around to a small need.
  CHECK_THROWS_AS(check_free_space(tmp.path(), std::uint64_t{1} << 62, 1 << 30), IoError);
}

#if ZS_TEST_HOOKS

TEST_CASE("injected EIO on a write and on a read: IoError, earlier state readable") {
  TempDir tmp;
  for (const AioConfig& cfg : engine_configs(64 << 10, 4)) {
    for (const bool buffered : {false, true}) {
      auto engine = make_io_engine(cfg);
      AioConfig dcfg = cfg;
      dcfg.force_buffered_io = buffered;
      const auto where = tmp.path() / fmt::format("{}_{}", engine->name(), buffered);
      SwapDirectory dir(*engine, where, dcfg);
      CAPTURE(engine->name());
      CAPTURE(buffered);
      constexpr std::uint64_t n = (1 << 20) + 3;
      AlignedBuffer<std::byte> buf(SwapDirectory::padded_size(n));
      // Four keys, each written once.
      for (int k = 0; k < 4; ++k) {
        fill_pattern(buf.span(), 100 + k);
        dir.write(fmt::format("k{}", k), buf.span(), n).wait();
      }
      // A batch rewriting all four, whose third write fails.
      std::vector<AlignedBuffer<std::byte>> bufs;
      std::vector<SwapItem> items;
      for (int k = 0; k < 4; ++k) bufs.emplace_back(buf.size());
      for (int k = 0; k < 4; ++k) {
        fill_pattern(bufs[k].span(), 200 + k);
        items.push_back(SwapItem{"", bufs[k].span(), n});
      }
      const std::string keys[] = {"k0", "k1", "k2", "k3"};
      for (int k = 0; k < 4; ++k) items[k].key = keys[k];
      inject_io_fault(IoFault{IoOp::write, 3, EIO});
      const std::string wmsg = io_error_of([&] { dir.write(items).wait(); });
      CHECK(wmsg.find("EIO") != std::string::npos);
      CHECK(wmsg.find("write of") != std::string::npos);
      CHECK(wmsg.find((where / "k2.zs").string()) != std::string::npos);
      for (int k = 0; k < 4; ++k) check_readable(dir, keys[k], n, 100 + k);
      check_no_tmp(where);

      // A read that fails, then succeeds when retried.
      inject_io_fault(IoFault{IoOp::read, 1, EIO});
      const std::string rmsg = io_error_of([&] { dir.read("k1", buf.span()).wait(); });
      CHECK(rmsg.find("EIO") != std::string::npos);
      CHECK(rmsg.find("read of") != std::string::npos);
      CHECK(rmsg.find((where / "k1.zs").string()) != std::string::npos);
      check_readable(dir, "k1", n, 101);

      // The batch that failed can be written again.
      dir.write(items).wait();
      for (int k = 0; k < 4; ++k) check_readable(dir, keys[k], n, 200 + k);
      clear_io_fault();
    }
  }
}

TEST_CASE("ZS_FAULT_INJECT arms a fault from the environment; malformed specs are rejected") {
  TempDir tmp;
  auto engine = make_io_engine(AioConfig{});
  SwapDirectory dir(*engine, tmp.path());
  AlignedBuffer<std::byte> buf(8192);
  fill_pattern(buf.span(), 9);
  dir.write("e", buf.span(), 8000).wait();
  {
    const ScopedEnv env("ZS_FAULT_INJECT", "read:2:EIO");
    load_io_fault_from_env();
  }
  dir.read("e", buf.span()).wait();  // the first read passes
  const std::string msg = io_error_of([&] { dir.read("e", buf.span()).wait(); });
  CHECK(msg.find("Input/output error (EIO)") != std::string::npos);
  check_readable(dir, "e", 8000, 9);

  const IoFault f = parse_io_fault("write:3:ENOSPC");
  CHECK(f.op == IoOp::write);
  CHECK(f.nth == 3);
  CHECK(f.err == ENOSPC);
  CHECK(parse_io_fault("read:1:5").err == 5);
  CHECK_THROWS_AS(parse_io_fault("write:0:EIO"), ConfigError);
  CHECK_THROWS_AS(parse_io_fault("append:1:EIO"), ConfigError);
  CHECK_THROWS_AS(parse_io_fault("write:1:ENOTANERRNO"), ConfigError);
  CHECK_THROWS_AS(parse_io_fault("write"), ConfigError);
  clear_io_fault();
}

#endif  // ZS_TEST_HOOKS

TEST_CASE("a 10 MB nvme_path that cannot be created: the message quotes it once, cut") {
  const std::string base(10 << 20, 'n');
  const std::string m = io_error_of(
      [&] { make_swap_folder(base, "zero_optimization.offload_optimizer.nvme_path", 0, 0, "optimizer"); });
  CHECK(m.find("\"zero_optimization.offload_optimizer.nvme_path\" = \"nnnn") == 0);
  CHECK(m.find("... (10485760 bytes)\": cannot create the swap folder zeroshard-") != std::string::npos);
  CHECK(m.find("-rank0-e0/optimizer in it: ") != std::string::npos);
  CHECK(m.size() < 400);
}
