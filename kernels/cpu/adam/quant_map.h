// Blockwise 8-bit quantization of optimizer states with the dynamic tree
// quantization maps of Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization" (ICLR 2022; the data type is from Dettmers 2016, "8-Bit
// Approximations for Parallelism in Deep Learning"), as bitsandbytes'
// AdamW8bit stores exp_avg and exp_avg_sq.
#pragma once

#include <cstddef>
#include <cstdint>

// [Note: dynamic tree quantization map]
// A code's bits, read from the top: (signed map only) a sign bit; then E
// zero bits, the exponent; then a one bit, the indicator; then the F
// remaining bits, a linear fraction k in [0, 2^F). Its value is
//   10^-E * (0.1 + 0.9 * (k + 1) / 2^F)
// so each exponent covers one decade (10^-E * (0.1, 1]) with 2^F equally
// spaced points, the top one 10^-E itself; fewer exponent bits leave more
// fraction bits, so large magnitudes get fine steps and small ones still
// exist. All-zero magnitude bits encode 0. The signed map (exp_avg) has 7
// magnitude bits: E = 0..6 with F = 6 - E, values from 1e-6 to 1; the
// unsigned map (exp_avg_sq, which is >= 0) has 8: E = 0..7 with F = 7 - E,
// values from 1e-7 to 1. The magnitude bits, read as an integer u, are in
// increasing order of value, so u is the index into the sorted magnitudes.
// Taking the upper end of each linear bin (bitsandbytes takes bin midpoints
// and appends 1.0) puts 1.0 in the map, so the block's largest element is
// stored exactly and a dequantized block requantizes to the same codes.
// Each value is computed in float as N_u * R_L with N_u = 9u + 9 - 8 * 2^L
// and R_L = 1 / (2^L * 10^(E+1)) (L = F = floor(log2 u); N_u and the
// denominator are exact in float, R_L is rounded once), the same on the
// CPU, its vector kernels and the GPU.
//
// A block of `block` consecutive elements x is stored as absmax = max |x|
// (fp32) and one byte per element: the code nearest to x / absmax, computed
// as x * (1 / absmax) (a float multiply by the block's rounded inverse).
// "Nearest": the decision points between neighbouring codes u and u + 1
// are the thresholds of quant_map_thresholds(), each within 1e-4 of the
// code step of the exact midpoint (tested); the fused kernels reach them
// by arithmetic (a scaled, rounded position within the exponent's linear
// range), the scalar references by binary search over the thresholds.
// Dequantization is value(code) * absmax (two roundings: the map value,
// then the scaling), with the sign bit set for a negative signed code.
// Error bound: |dequantize(quantize(x)) - x| <= (gap / 2) * absmax * (1 +
// 1e-4) + 2 ulp(x), gap = the largest step of the map, 0.9 / 2^6 for the
// signed map and 0.9 / 2^7 for the unsigned one.
//
// Non-finite values: a block holding a NaN stores absmax = NaN (the quiet
// NaN 0x7fc00000) and an Inf absmax = Inf; both make every code 0 and the
// whole block NaN when dequantized, so a NaN or Inf state is never silently
// replaced by numbers. A NaN input element encodes as code 0. A block of
// zeros stores absmax 0 and codes 0.
//
// State layout (what an engine, the memory ledger or the planner sizes):
// for n elements and block size B, one state is n code bytes
// (quant_codes_bytes) plus ceil(n / B) fp32 absmax values
// (quant_absmax_bytes); block b covers elements [b * B, min(n, (b + 1) * B)).
// A caller that updates a chunk of a state passes arrays offset by a
// multiple of B elements (codes + k * B, absmax + k), so blocks are the
// same whichever way the array is split.

namespace zeroshard::kernels {

/// Which dynamic tree map a state uses: signed (exp_avg: sign bit + 7
/// magnitude bits) or unsigned (exp_avg_sq: 8 magnitude bits).
enum class QuantMap : std::uint8_t { signed_dynamic, unsigned_dynamic };

/// Block size used when none is given (elements), as bitsandbytes' CPU/GPU
/// blockwise optimizers default to.
inline constexpr std::size_t kQuantBlockDefault = 256;
/// Smallest and largest supported block sizes (elements; powers of two).
inline constexpr std::size_t kQuantBlockMin = 64;
inline constexpr std::size_t kQuantBlockMax = 4096;

/// Throws InvariantError naming `where` unless block is a power of two in
/// [kQuantBlockMin, kQuantBlockMax]. Thread safety: pure.
void check_quant_block(std::size_t block, const char* where);

/// Blocks of a state of n elements: ceil(n / block) (block > 0).
constexpr std::size_t quant_block_count(std::size_t n, std::size_t block) {
  return (n + block - 1) / block;
}
/// Bytes of one state's codes: n (one byte per element).
constexpr std::size_t quant_codes_bytes(std::size_t n) { return n; }
/// Bytes of one state's absmax array: 4 * ceil(n / block).
constexpr std::size_t quant_absmax_bytes(std::size_t n, std::size_t block) {
  return 4 * quant_block_count(n, block);
}
/// Bytes of both 8-bit Adam states (exp_avg and exp_avg_sq: codes and
/// absmax each) for n elements: 2 * (n + 4 * ceil(n / block)).
constexpr std::size_t adam8bit_state_bytes(std::size_t n, std::size_t block) {
  return 2 * (quant_codes_bytes(n) + quant_absmax_bytes(n, block));
}

/// The 256 values of a map indexed by code (signed: code 0x80 | u is
/// -value(u); 0x80 itself is -0.0 and is never produced by quantization).
/// Static storage, built on first use. Thread safety: safe.
const float* quant_map_values(QuantMap map);

/// Largest magnitude code of a map: 127 (signed) or 255 (unsigned).
unsigned quant_map_max_magnitude(QuantMap map);

/// The decision thresholds of a map's magnitudes: element u (u <
/// quant_map_max_magnitude) is the smallest float a >= 0 that quantizes to
/// a magnitude above u; increasing, each between value(u) and value(u + 1).
/// Static storage. Thread safety: safe.
const float* quant_map_thresholds(QuantMap map);

/// The block's absmax as stored: max |x[i]| over i < n, or the quiet NaN
/// 0x7fc00000 when some x[i] is NaN; 0 for n == 0. Pure.
float quant_block_absmax(const float* x, std::size_t n);

/// The multiplier that maps a block onto [-1, 1]: 1 / absmax rounded to
/// float when absmax > 0 (0 when absmax is 0 or NaN; 1 / Inf = 0). Pure.
inline float quant_inverse_absmax(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

/// Scalar reference of one element: the code of x in a block with inverse
/// scale inv (quant_inverse_absmax), by binary search over the thresholds.
/// Signed map: sign bit = (x * inv < 0). Unsigned map: |x * inv| (a
/// negative input is quantized by magnitude). |x * inv| > 1 (not reached
/// with inv = quant_inverse_absmax of the block) gives the top magnitude;
/// NaN gives code 0. Pure.
std::uint8_t quantize_value(QuantMap map, float x, float inv);

/// Scalar reference of one element: value(code) * absmax (signed map:
/// with the sign bit set for codes >= 0x80). Pure.
float dequantize_value(QuantMap map, std::uint8_t code, float absmax);

/// Quantizes n fp32 values blockwise: absmax[b] = quant_block_absmax of
/// block b, codes[i] = quantize_value(map, x[i], 1 / absmax). codes: n
/// bytes, absmax: quant_block_count(n, block) floats. Vectorised (Highway,
/// run-time target) and split over kernel_pool() by whole blocks; bitwise
/// equal to quantize_blockwise_reference for any thread count and target.
/// Throws InvariantError for an unsupported block size (check_quant_block).
/// For converting fp32 states to 8-bit (checkpoint load, a new state).
/// Thread safety: touches only its arguments.
void quantize_blockwise(const float* x, std::size_t n, std::size_t block, QuantMap map,
                        std::uint8_t* codes, float* absmax);

/// Scalar reference of quantize_blockwise.
void quantize_blockwise_reference(const float* x, std::size_t n, std::size_t block, QuantMap map,
                                  std::uint8_t* codes, float* absmax);

/// x[i] = dequantize_value(map, codes[i], absmax[i / block]) for i < n;
/// as quantize_blockwise otherwise (vectorised, threads, errors). For
/// converting 8-bit states to fp32 (checkpoints read as fp32 states).
void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::size_t n,
                          std::size_t block, QuantMap map, float* x);

/// Scalar reference of dequantize_blockwise.
void dequantize_blockwise_reference(const std::uint8_t* codes, const float* absmax,
                                    std::size_t n, std::size_t block, QuantMap map, float* x);

namespace detail {

/// The constants the vector kernels (quant_map-inl.h) and the GPU kernels
/// compute codes and values with; see [Note: dynamic tree quantization
/// map]. lmax = 6 (signed) or 7 (unsigned) is the top level.
struct QuantTables {
  // Decode: t = 2u + 1 in float (exact) has the exponent field 128 + L for
  // u >= 1 (L = floor(log2 u)) and 127 for u = 0, so i = e(t) & 15 is L, or
  // 15 for u = 0; value(u) = fma(float(u), 9, dec_c[i]) * dec_r[i] with
  // dec_c[L] = 9 - 8 * 2^L (the fma is N_u = 9u + 9 - 8 * 2^L, exact) and
  // dec_r[L] = R_L; dec_c[15] = dec_r[15] = 0 (value 0).
  alignas(64) float dec_r[16];
  alignas(64) float dec_c[16];
  // Encode, step 0: a = min(|x * inv|, 1) (NaN handled before: see
  // quantize_magnitude_arith).
  // Step 1: the region (level L's linear range, extended down to level
  // L - 1's top value; 0 for [0, value(1))) of a is base + (a >= bound):
  // base = the number of region bounds value(2^L - 1), L = 1..lmax, that
  // are <= 2^k for a in the binade [2^k, 2^(k+1)), which is
  //   clamp(lmax + 1 + floor(k * 1233 / 4096), 0, lmax)    (k = e(a) - 127;
  // 1233 / 4096 ~ log10(2), exact for every k of a float) and equals
  // enc_base[max(e(a), 96) - 96]; bound = enc_next[base], the next region
  // bound above base (Inf above the top), equal in effect to enc_bound[same
  // index], the bound inside that binade (Inf if none): a binade holds at
  // most one bound, as they are a decade apart.
  alignas(64) std::int32_t enc_base[32];
  alignas(64) float enc_bound[32];
  alignas(64) float enc_next[16];
  // Step 2: u = trunc(fma(a, enc_scale[r], enc_offset[r])): the rounded
  // position within region r (never above the region's top code for a <= 1).
  alignas(64) float enc_scale[16];
  alignas(64) float enc_offset[16];
  // The same steps as the vector kernels take them ([Note: 8-bit vector
  // encoder] in quant_map-inl.h): a is max(|x * inv|, 2^-31) there, at most
  // 1 + 2^-21, so its binade e(a) is 96..127 (a < 2^-31 has code 0 as all of
  // binade 96; binade 127 is in the top region).
  // AVX-512: enc_bound_base[e(a) - 96] is enc_bound of that binade
  // (0x7f7ffff0 for Inf) with its low 4 bits replaced by the base region
  // plus enc_region_offset, and region + enc_region_offset indexes
  // enc_scale_both / enc_offset_both, which hold the signed map's
  // enc_scale / enc_offset at 0..7 and the unsigned map's at 8..15 (the same
  // arrays in both maps' tables).
  alignas(64) float enc_bound_base[32];
  alignas(64) float enc_scale_both[16];
  alignas(64) float enc_offset_both[16];
  int enc_region_offset;  // 0 (signed) or 8 (unsigned)
  // AVX2 and the portable targets, by groups of four binades: group
  // g = (e(a) - 96) / 4 holds at most two region bounds (they are a decade,
  // 3.3 binades, apart), enc_group_lo[g] the lower one (0x7f7ffff8 if none)
  // with its low 3 bits replaced by the base region of the group's first
  // binade, enc_group_hi[g] the upper one (0x7f7ffff8 if none); region =
  // base + (a >= lo) + (a >= hi), indexing enc_scale / enc_offset.
  alignas(32) float enc_group_lo[8];
  alignas(32) float enc_group_hi[8];
  float values[256];      // by code (quant_map_values)
  float thresholds[256];  // by magnitude (quant_map_thresholds)
  unsigned max_magnitude;  // 127 or 255
  int lmax;                // 6 or 7
  bool is_signed;
};

/// Step 1's base region of a binade by arithmetic (see QuantTables): e is
/// the biased exponent field of a (0..255). Pure.
inline int quant_region_base(int lmax, int e) {
  const int b = lmax + 1 + ((e - 127) * 1233 >> 12);  // arithmetic shift: floor
  return b < 0 ? 0 : (b > lmax ? lmax : b);
}

/// The tables of a map (static storage, built on first use; thread safe).
const QuantTables& quant_tables(QuantMap map);

/// The magnitude code of a (a >= 0) by the arithmetic of the vector
/// kernels (QuantTables steps 0-2): a NaN gives 0, a > 1 the top code.
/// The vector kernels never see a NaN here (a block whose inverse scale is
/// not a positive finite number takes the scalar path). Pure.
unsigned quantize_magnitude_arith(const QuantTables& t, float a);

}  // namespace detail

}  // namespace zeroshard::kernels
