// The optimizer states of a unit window by window, as stored and as fp32:
// what checkpoints, Engine::optimizer_state and gather_optimizer_state read
// and write ([Note: state arrays] in optimizer/state_format.h).
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/quant_map.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

namespace {

// The quantization map of optimizer state i (Adam: exp_avg signed,
// exp_avg_sq unsigned).
kernels::QuantMap map_of(int state) {
  return state == 0 ? kernels::QuantMap::signed_dynamic : kernels::QuantMap::unsigned_dynamic;
}

}  // namespace

std::vector<std::byte> state_array_window(EngineState& s, UnitId u, int k, int w) {
  const UnitStates& st = s.store->states(u);
  ZS_CHECK(k >= 0 && k < st.arrays(), "unit {}: state array {} of {}", u, k, st.arrays());
  ZS_CHECK(s.stage() == 0 || w == s.rank(), "state window {} is not on rank {} at stage {}", w, s.rank(), s.stage());
  const std::size_t W = s.info(u).shard;
  const std::size_t per = st.array_numel(k, W, W), bytes = per * dtype_size(st.array_dtype(k));
  HostBuffer holder;
  const auto* p = static_cast<const std::byte*>(s.store->read(u, {ArrayKind::state, k}, holder));
  const std::size_t idx = s.stage() == 0 ? static_cast<std::size_t>(w) : 0;
  if (bytes == 0) return {};
  return std::vector<std::byte>(p + idx * bytes, p + (idx + 1) * bytes);
}

std::vector<float> state_window_f32(EngineState& s, UnitId u, int state, int w) {
  const UnitStates& st = s.store->states(u);
  ZS_CHECK(state >= 0 && state < st.count, "optimizer state index {} out of range ({} states)", state, st.count);
  const std::size_t W = s.info(u).shard;
  std::vector<float> out(W);
  switch (st.dtype) {
    case StateDtype::fp32: {
      const std::vector<std::byte> b = state_array_window(s, u, state, w);
      if (W > 0) std::memcpy(out.data(), b.data(), W * sizeof(float));
      break;
    }
    case StateDtype::bf16: {
      const std::vector<std::byte> b = state_array_window(s, u, state, w);
      for (std::size_t i = 0; i < W; ++i) {
        std::uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    }
    case StateDtype::q8: {
      const std::vector<std::byte> codes = state_array_window(s, u, 2 * state, w);
      const std::vector<std::byte> absmax = state_array_window(s, u, 2 * state + 1, w);
      if (W > 0) {
        kernels::dequantize_blockwise(reinterpret_cast<const std::uint8_t*>(codes.data()),
                                      reinterpret_cast<const float*>(absmax.data()), W, st.block, map_of(state),
                                      out.data());
      }
      break;
    }
  }
  return out;
}

std::vector<std::vector<std::byte>> state_arrays_from_f32(const EngineState& s, UnitId u,
                                                          const std::vector<std::vector<float>>& values) {
  const UnitStates& st = s.store->states(u);
  ZS_CHECK(values.size() == static_cast<std::size_t>(st.count), "unit {}: {} state value arrays for {} states", u,
           values.size(), st.count);
  const std::size_t W = s.info(u).shard;
  std::vector<std::vector<std::byte>> out;
  for (int i = 0; i < st.count; ++i) {
    const std::vector<float>& v = values[static_cast<std::size_t>(i)];
    ZS_CHECK(v.size() == W, "unit {}: state {} has {} values for a window of {}", u, i, v.size(), W);
    switch (st.dtype) {
      case StateDtype::fp32: {
        out.emplace_back(W * sizeof(float));
        if (W > 0) std::memcpy(out.back().data(), v.data(), W * sizeof(float));
        break;
      }
      case StateDtype::bf16: {
        out.emplace_back(W * 2);
        for (std::size_t j = 0; j < W; ++j) {
          const std::uint16_t h = float_to_bf16(v[j]);
          std::memcpy(out.back().data() + 2 * j, &h, 2);
        }
        break;
      }
      case StateDtype::q8: {
        std::vector<std::byte> codes(W), absmax(kernels::quant_block_count(W, st.block) * sizeof(float));
        if (W > 0) {
          kernels::quantize_blockwise(v.data(), W, st.block, map_of(i), reinterpret_cast<std::uint8_t*>(codes.data()),
                                      reinterpret_cast<float*>(absmax.data()));
        }
        out.push_back(std::move(codes));
        out.push_back(std::move(absmax));
        break;
      }
    }
  }
  return out;
}

}  // namespace zeroshard
