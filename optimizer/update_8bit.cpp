// 8-bit Adam / AdamW over runs of parameter groups: see optimizer/update_8bit.h.
#include "optimizer/update_8bit.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"

namespace zeroshard {

namespace {

// The state arrays of a part starting at element `at` (a block boundary).
kernels::Adam8bitState offset(const kernels::Adam8bitState& s, std::size_t at, std::size_t block) {
  return kernels::Adam8bitState{.exp_avg_code = s.exp_avg_code + at,
                                .exp_avg_absmax = s.exp_avg_absmax + at / block,
                                .exp_avg_sq_code = s.exp_avg_sq_code + at,
                                .exp_avg_sq_absmax = s.exp_avg_sq_absmax + at / block};
}

}  // namespace

void optimizer_update_8bit(const OptimizerHyper& h, std::int64_t step, float grad_scale, float* param,
                           const void* grad, DType grad_dtype, const kernels::Adam8bitState& state, void* copy,
                           DType copy_dtype, std::size_t n, std::size_t block, std::span<const UpdateRun> runs_in) {
  ZS_CHECK(h.kind == OptimizerKind::adam || h.kind == OptimizerKind::adamw,
           "8-bit optimizer states are implemented for Adam and AdamW, not {}", optimizer_name(h.kind));
  kernels::check_quant_block(block, "optimizer_update_8bit");
  // Non-empty runs, adjacent ones with the same values merged.
  std::vector<UpdateRun> runs;
  for (const UpdateRun& r : runs_in) {
    ZS_CHECK(r.begin <= r.end && r.end <= n, "optimizer_update_8bit: run [{}, {}) outside the range of {}", r.begin,
             r.end, n);
    ZS_CHECK(runs.empty() || r.begin >= runs.back().end, "optimizer_update_8bit: run [{}, {}) out of order", r.begin,
             r.end);
    if (r.begin == r.end) continue;
    if (!runs.empty() && runs.back().end == r.begin && runs.back().lr == r.lr &&
        runs.back().weight_decay == r.weight_decay) {
      runs.back().end = r.end;
    } else {
      runs.push_back(r);
    }
  }
  const std::size_t ge = dtype_size(grad_dtype), ce = copy != nullptr ? dtype_size(copy_dtype) : 0;
  const auto* g = static_cast<const std::byte*>(grad);
  auto* c = static_cast<std::byte*>(copy);
  auto at_copy = [&](std::size_t i) { return c != nullptr ? c + i * ce : nullptr; };
  std::vector<float> m, v;  // a shared block, dequantized
  std::size_t r = 0, cur = runs.empty() ? n : runs[0].begin;
  while (r < runs.size()) {
    if (cur >= runs[r].end) {
      if (++r < runs.size()) cur = runs[r].begin;
      continue;
    }
    const std::size_t k = cur / block, b0 = k * block, b1 = std::min(n, b0 + block);
    const bool next_in_block = r + 1 < runs.size() && runs[r + 1].begin < b1;
    if (cur == b0 && !next_in_block) {
      // Whole blocks of run r, up to its end or to the block the next run
      // starts in.
      std::size_t e = runs[r].end;
      if (r + 1 < runs.size() && runs[r + 1].begin < (e + block - 1) / block * block) e = e / block * block;
      const kernels::AdamScalars s = adam_scalars(h, runs[r].lr, runs[r].weight_decay, step, grad_scale);
      kernels::adam8bit_update(param + b0, g + b0 * ge, grad_dtype, offset(state, b0, block), at_copy(b0),
                               copy_dtype, e - b0, block, s);
      cur = e;
      continue;
    }
    // Block k is shared by runs (or run r starts inside it): dequantize,
    // update each run's part with the fp32 kernel, requantize.
    const std::size_t len = b1 - b0;
    m.resize(len);
    v.resize(len);
    const kernels::Adam8bitState st = offset(state, b0, block);
    kernels::dequantize_blockwise(st.exp_avg_code, st.exp_avg_absmax, len, block, kernels::QuantMap::signed_dynamic,
                                  m.data());
    kernels::dequantize_blockwise(st.exp_avg_sq_code, st.exp_avg_sq_absmax, len, block,
                                  kernels::QuantMap::unsigned_dynamic, v.data());
    std::size_t q = r;
    for (; q < runs.size() && runs[q].begin < b1; ++q) {
      const std::size_t lo = std::max({runs[q].begin, b0, q == r ? cur : b0}), hi = std::min(runs[q].end, b1);
      float* states[2] = {m.data() + (lo - b0), v.data() + (lo - b0)};
      optimizer_update_mixed(h, runs[q].lr, runs[q].weight_decay, step, grad_scale, param + lo, g + lo * ge,
                             grad_dtype, states, at_copy(lo), copy_dtype, hi - lo);
    }
    kernels::quantize_blockwise(m.data(), len, block, kernels::QuantMap::signed_dynamic, st.exp_avg_code,
                                st.exp_avg_absmax);
    kernels::quantize_blockwise(v.data(), len, block, kernels::QuantMap::unsigned_dynamic, st.exp_avg_sq_code,
                                st.exp_avg_sq_absmax);
    r = q - 1;
    cur = b1;
  }
}

}  // namespace zeroshard
