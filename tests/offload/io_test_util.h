// Helpers shared by the offload tests: a temporary directory on the real
// disk, a tmpfs mount guard, deterministic byte patterns and engine
// variants.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/mount.h>

#include "offload/io/io_engine.h"

namespace zeroshard::test {

/// A fresh directory under /tmp (the real disk here), removed with its
/// contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zs_io_test.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Mounts a tmpfs of `options` (e.g. "size=1m") on `dir`; unmounts on
/// destruction. mounted() is false (and errno_value() says why) when the
/// mount was refused.
class TmpfsMount {
 public:
  TmpfsMount(const std::filesystem::path& dir, const char* options) : dir_(dir) {
    std::filesystem::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options) == 0;
    err_ = mounted_ ? 0 : errno;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return mounted_; }
  int errno_value() const { return err_; }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  int err_ = 0;
};

/// Sets an environment variable for its lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

/// Whether environment variable `name` is set to something other than "" or "0".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

/// Byte i of pattern `seed`: differs between seeds and positions.
inline std::byte pattern_byte(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ULL ^ (seed * 0xbf58476d1ce4e5b9ULL);
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xff);
}

inline void fill_pattern(std::span<std::byte> out, std::uint64_t seed) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pattern_byte(seed, i);
}

/// Index of the first byte that differs from pattern `seed`, or -1.
inline long long first_mismatch(std::span<const std::byte> got, std::uint64_t seed) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != pattern_byte(seed, i)) return static_cast<long long>(i);
  }
  return -1;
}

/// Whole file content, read with the C++ library (no O_DIRECT).
inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The engine kinds under test: "io_uring" (if the build and kernel allow)
/// and "thread_pool".
inline std::vector<AioConfig> engine_configs(std::uint64_t block_size, int queue_depth) {
  AioConfig uring;
  uring.block_size = block_size;
  uring.queue_depth = queue_depth;
  AioConfig pool = uring;
  pool.force_no_io_uring = true;
  pool.intra_op_parallelism = 2;
  return {uring, pool};
}

}  // namespace zeroshard::test
