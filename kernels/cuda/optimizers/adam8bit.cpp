// Argument checks, quantization tables and scalars of the 8-bit-state
// Adam kernel; see kernels/cuda/optimizers/adam8bit.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/optimizers/adam8bit.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/convert.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

namespace {

// The constants of both maps, as the CPU's vector kernels use them.
detail::QuantDeviceTables device_tables() {
  detail::QuantDeviceTables q{};
  const QuantMap maps[2] = {QuantMap::signed_dynamic, QuantMap::unsigned_dynamic};
  for (int k = 0; k < 2; ++k) {
    const kernels::detail::QuantTables& t = kernels::detail::quant_tables(maps[k]);
    for (int i = 0; i < 16; ++i) {
      q.dec_r[k][i] = t.dec_r[i];
      q.dec_c[k][i] = t.dec_c[i];
    }
    for (int i = 0; i < 8; ++i) {
      q.enc_next[k][i] = t.enc_next[i];
      q.enc_scale[k][i] = t.enc_scale[i];
      q.enc_offset[k][i] = t.enc_offset[i];
    }
    q.lmax[k] = t.lmax;
  }
  return q;
}

}  // namespace

void adam8bit_update(const Adam8bitTensor& t, std::size_t block, const AdamScalars& s,
                     DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  check_kernel_dtype(grad_dtype, "grad");
  const bool copy = t.param_copy != nullptr;
  if (copy) check_copy_dtype(copy_dtype);
  check_quant_block(block, "gpu::adam8bit_update");
  ZS_CHECK(t.n == 0 || (t.param != nullptr && t.grad != nullptr &&
                        t.state.exp_avg_code != nullptr && t.state.exp_avg_absmax != nullptr &&
                        t.state.exp_avg_sq_code != nullptr && t.state.exp_avg_sq_absmax != nullptr),
           "gpu::adam8bit_update: an array of a tensor of {} elements is null", t.n);
  static const detail::QuantDeviceTables tables = device_tables();
  ZS_CUDA_CHECK(detail::launch_adam8bit(t, block, tables, detail::adam_device_scalars(s),
                                        grad_dtype, copy, copy_dtype, stream));
}

}  // namespace zeroshard::kernels::gpu
