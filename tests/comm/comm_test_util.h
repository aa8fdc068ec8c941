// Helpers shared by the communicator tests: typed element access on byte
// buffers, deterministic per-rank values whose reductions are exact, and the
// reference combination of two elements (for bf16/f16 the per-pair
// fp32-then-round definition of comm/mpi/mpi_types.h, written here
// independently from core/dtype.h).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace zeroshard::test {

/// The communicator over every rank of the test job, shared by the suites
/// of one program (created once; MPI finalises at exit).
inline Communicator& world() {
  static std::unique_ptr<Communicator> w = make_world_communicator();
  return *w;
}

/// Calls work.test() until it reports completion, sleeping 20 us between
/// calls. A loop that calls test() back to back starves the ranks it waits
/// for when ranks share cores: with 4 ranks on 2 cores across the testbed's
/// hosts, two such loops (each test() ends in Open MPI's sched_yield) left
/// the other two ranks about 14% of a core each, and a 0.3 s check took 50 s.
/// `Work` is anything with a bool test() (CommWork, OrderedReduction).
template <class Work>
void poll_until_done(Work& work) {
  while (!work.test()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

/// Element counts every collective is tested with (0 and 1 find edge cases,
/// 7 and 57 are odd sizes, 10001 spans many cache lines and MPI segments).
inline const std::vector<std::size_t> kCounts = {0, 1, 7, 57, 10001};
inline const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
inline const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

/// Byte buffer of count elements of dtype (operator new alignment, >= 16).
using Bytes = std::vector<unsigned char>;

inline Bytes make_bytes(DType t, std::size_t count, unsigned char fill = 0) {
  return Bytes(count * dtype_size(t), fill);
}

/// Stores v (exactly representable in t) as element i.
inline void put(DType t, void* buf, std::size_t i, double v) {
  auto* p = static_cast<unsigned char*>(buf) + i * dtype_size(t);
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::bf16: {
      const std::uint16_t h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::f16: {
      const std::uint16_t h = float_to_f16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::u8: *p = static_cast<unsigned char>(v); break;  // bytes: not a reduction dtype
  }
}

/// Element i as a double (exact for every type).
inline double get(DType t, const void* buf, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(buf) + i * dtype_size(t);
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::bf16:
    case DType::f16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return t == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
    }
    case DType::u8: return *p;
  }
  return 0;
}

/// Value of element i on rank r: a multiple of 1/4 in [-7.5, 7.5], so every
/// partial sum over up to 16 ranks is exact even in bf16 (8 significant bits).
inline double value(int r, std::size_t i, int salt = 0) {
  const long k =
      static_cast<long>(
          (i * 7 + static_cast<std::size_t>(r) * 13 + static_cast<std::size_t>(salt) * 5) % 61) -
      30;
  return static_cast<double>(k) / 4.0;
}

/// Reference: acc_i = combine(a_i, acc_i) as each backend defines it (native
/// arithmetic for f32/f64; fp32 then round-to-nearest-even for bf16/f16).
inline void combine_into(DType t, ReduceOp op, const void* a, void* acc, std::size_t i) {
  auto pick = [op](auto x, auto y) {
    switch (op) {
      case ReduceOp::sum: return x + y;
      case ReduceOp::max: return std::max(x, y);
      case ReduceOp::min: return std::min(x, y);
    }
    return x;
  };
  const std::size_t s = dtype_size(t);
  const auto* pa = static_cast<const unsigned char*>(a) + i * s;
  auto* pc = static_cast<unsigned char*>(acc) + i * s;
  if (t == DType::f32) {
    float x, y;
    std::memcpy(&x, pa, 4);
    std::memcpy(&y, pc, 4);
    const float r = pick(x, y);
    std::memcpy(pc, &r, 4);
  } else if (t == DType::f64) {
    double x, y;
    std::memcpy(&x, pa, 8);
    std::memcpy(&y, pc, 8);
    const double r = pick(x, y);
    std::memcpy(pc, &r, 8);
  } else {
    std::uint16_t x, y;
    std::memcpy(&x, pa, 2);
    std::memcpy(&y, pc, 2);
    const bool bf = t == DType::bf16;
    const float fx = bf ? bf16_to_float(x) : f16_to_float(x);
    const float fy = bf ? bf16_to_float(y) : f16_to_float(y);
    const float fr = pick(fx, fy);
    const std::uint16_t r = bf ? float_to_bf16(fr) : float_to_f16(fr);
    std::memcpy(pc, &r, 2);
  }
}

/// Compares count elements bit for bit; returns "" when equal, else the
/// number of wrong elements (nccl-tests' #wrong) and the first one.
inline std::string diff(DType t, const void* got, const void* want, std::size_t count) {
  const std::size_t s = dtype_size(t);
  std::size_t wrong = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(static_cast<const unsigned char*>(got) + i * s,
                    static_cast<const unsigned char*>(want) + i * s, s) != 0) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return "";
  return fmt::format("{} of {} {} elements wrong; first at {}: got {} want {}", wrong, count,
                     dtype_name(t), first, get(t, got, first), get(t, want, first));
}

/// Short label for failure messages.
inline std::string label(const Communicator& c, DType t, std::size_t count) {
  return fmt::format("{} rank {}/{} {} count {}", c.backend(), c.rank(), c.world_size(),
                     dtype_name(t), count);
}

inline const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

}  // namespace zeroshard::test
