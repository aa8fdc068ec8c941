// State formats and their arrays: see optimizer/state_format.h.
#include "optimizer/state_format.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"

namespace zeroshard {

std::string_view state_dtype_name(StateDtype d) {
  switch (d) {
    case StateDtype::fp32: return "fp32";
    case StateDtype::q8: return "8bit";
    case StateDtype::bf16: return "bf16";
  }
  return "?";
}

DType UnitStates::array_dtype(int k) const {
  switch (dtype) {
    case StateDtype::fp32: return DType::f32;
    case StateDtype::bf16: return DType::bf16;
    case StateDtype::q8: return is_absmax(k) ? DType::f32 : DType::u8;
  }
  return DType::f32;
}

std::size_t UnitStates::array_numel(int k, std::size_t elements, std::size_t window) const {
  if (!is_absmax(k)) return elements;
  if (elements == 0) return 0;
  ZS_CHECK(window > 0 && elements % window == 0, "state arrays: {} elements are not whole windows of {}", elements,
           window);
  return elements / window * kernels::quant_block_count(window, block);
}

void UnitStates::array_range(int k, std::size_t begin, std::size_t end, std::size_t& first,
                             std::size_t& last) const {
  ZS_CHECK(begin <= end, "state arrays: range [{}, {})", begin, end);
  if (!is_absmax(k)) {
    first = begin;
    last = end;
    return;
  }
  ZS_CHECK(begin % block == 0, "state arrays: range [{}, {}) does not start at a block boundary (block {})", begin,
           end, block);
  first = begin / block;
  last = kernels::quant_block_count(end, block);
}

std::size_t PackedStates::count(std::size_t w) const {
  std::size_t n = 0;
  for (const auto& [b, e] : runs.at(w)) n += e - b;
  return n;
}

std::size_t PackedStates::index(std::size_t w, std::size_t x) const {
  std::size_t n = 0;
  for (const auto& [b, e] : runs.at(w)) {
    if (x <= b) break;
    n += std::min(x, e) - b;
  }
  return n;
}

std::size_t UnitStates::window_numel(int k, std::size_t w, std::size_t window) const {
  return packs(k) ? packed->count(w) : array_numel(k, window, window);
}

std::size_t UnitStates::window_offset(int k, std::size_t w, std::size_t window) const {
  if (!packs(k)) return w * array_numel(k, window, window);
  std::size_t n = 0;
  for (std::size_t v = 0; v < w; ++v) n += packed->count(v);
  return n;
}

void UnitStates::window_range(int k, std::size_t w, std::size_t begin, std::size_t end, std::size_t& first,
                              std::size_t& last) const {
  if (!packs(k)) return array_range(k, begin, end, first, last);
  ZS_CHECK(begin <= end, "state arrays: range [{}, {})", begin, end);
  first = packed->index(w, begin);
  last = packed->index(w, end);
}

std::uint64_t UnitStates::bytes(std::size_t elements, std::size_t window) const {
  std::uint64_t n = 0;
  for (int k = 0; k < arrays(); ++k) n += array_numel(k, elements, window) * dtype_size(array_dtype(k));
  return n;
}

UnitStates unit_states(const StateFormat& f, int count, std::size_t unit_numel) {
  UnitStates s;
  s.dtype = count == 0 ? StateDtype::fp32 : f.for_unit(unit_numel);
  s.block = s.dtype == StateDtype::q8 ? f.block_size : 0;
  s.count = count;
  return s;
}

double state_bytes_per_element(const StateFormat& f, int count) {
  switch (f.dtype) {
    case StateDtype::fp32: return 4.0 * count;
    case StateDtype::bf16: return 2.0 * count;
    case StateDtype::q8: return count * (1.0 + 4.0 / static_cast<double>(f.block_size));
  }
  return 4.0 * count;
}

}  // namespace zeroshard
