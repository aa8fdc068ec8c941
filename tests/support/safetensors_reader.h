// A small, strict safetensors reader for the tests of the files zeroshard
// writes (zs_ckpt_export's fp32 export, save_checkpoint's consolidated
// weights): parses the header, checks the layout rules (8-byte header
// length, space padding, dtype F32, BF16 or F16, data_offsets contiguous
// from 0 and exactly covering the data) and returns each tensor's shape,
// dtype, raw bytes and values widened to float (exactly).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace zeroshard::testing {

/// One tensor read back.
struct SafetensorsTensor {
  std::vector<std::int64_t> shape;
  std::string dtype;                 ///< "F32", "BF16" or "F16"
  std::string bytes;                 ///< the raw little-endian data
  std::vector<float> values;         ///< widened to float (exact for the 16-bit types)
  std::uint64_t begin = 0, end = 0;  ///< data_offsets
};

/// A parsed safetensors file.
struct SafetensorsFile {
  std::uint64_t header_bytes = 0;                 ///< N
  std::vector<std::string> order;                 ///< tensor names in header order
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;    ///< __metadata__
};

/// Reads and validates `path`. Throws std::runtime_error naming the rule
/// that the file breaks.
inline SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() < 8) throw std::runtime_error(path + ": shorter than the 8-byte header length");
  SafetensorsFile f;
  for (int i = 7; i >= 0; --i) f.header_bytes = (f.header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  if (f.header_bytes % 8 != 0) throw std::runtime_error("header length is not a multiple of 8");
  if (f.header_bytes > bytes.size() - 8) throw std::runtime_error("header runs past the end of the file");
  std::string text = bytes.substr(8, f.header_bytes);
  const std::size_t last = text.find_last_not_of(' ');
  if (last == std::string::npos || text[last] != '}') throw std::runtime_error("header is not a JSON object padded with spaces");
  const nlohmann::ordered_json h = nlohmann::ordered_json::parse(text.substr(0, last + 1));
  const std::uint64_t data_size = bytes.size() - 8 - f.header_bytes;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, s] : v.items()) f.metadata[k] = s.get<std::string>();
      continue;
    }
    SafetensorsTensor t;
    t.dtype = v.at("dtype").get<std::string>();
    const std::uint64_t size = t.dtype == "F32" ? 4 : t.dtype == "BF16" || t.dtype == "F16" ? 2 : 0;
    if (size == 0) throw std::runtime_error(name + ": dtype is not F32, BF16 or F16");
    t.shape = v.at("shape").get<std::vector<std::int64_t>>();
    const auto off = v.at("data_offsets").get<std::vector<std::uint64_t>>();
    if (off.size() != 2 || off[0] > off[1] || off[1] > data_size) throw std::runtime_error(name + ": bad data_offsets");
    t.begin = off[0];
    t.end = off[1];
    // Checked: a negative dimension or a product that overflows (which
    // could wrap to the byte count) is an error, not a huge allocation.
    std::uint64_t numel = 1;
    for (auto d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel)) {
        throw std::runtime_error(name + ": shape has a negative or too large dimension");
      }
    }
    if (numel > (t.end - t.begin) / size || t.end - t.begin != numel * size) {
      throw std::runtime_error(name + ": data_offsets do not match the shape");
    }
    t.bytes = bytes.substr(8 + f.header_bytes + t.begin, t.end - t.begin);
    t.values.resize(numel);
    for (std::uint64_t i = 0; i < numel; ++i) {
      if (size == 4) {
        std::memcpy(&t.values[i], t.bytes.data() + 4 * i, 4);
        continue;
      }
      std::uint16_t half = 0;
      std::memcpy(&half, t.bytes.data() + 2 * i, 2);
      t.values[i] = t.dtype == "BF16" ? bf16_to_float(half) : f16_to_float(half);
    }
    ranges.emplace_back(t.begin, t.end);
    f.order.push_back(name);
    if (!f.tensors.emplace(name, std::move(t)).second) throw std::runtime_error(name + ": listed twice");
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t pos = 0;
  for (const auto& [b, e] : ranges) {
    if (b != pos) throw std::runtime_error("data_offsets leave a gap or overlap at byte " + std::to_string(pos));
    pos = e;
  }
  if (pos != data_size) {
    throw std::runtime_error("tensors cover " + std::to_string(pos) + " bytes of " + std::to_string(data_size) +
                             " bytes of data");
  }
  return f;
}

}  // namespace zeroshard::testing
