#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#include <hwy/highway.h>
#include <hwy/targets.h>

#include "core/error.h"

namespace zeroshard::kernels {

namespace {

// Targets compiled here (HWY_TARGETS honours HWY_DISABLED_TARGETS) and
// supported by the CPU (or forced), as a bit mask; lower bits are better.
std::int64_t available() { return hwy::SupportedTargets() & HWY_TARGETS; }

// available() before any target was forced (computed on first use, which
// force_simd_target makes sure happens before it forces one).
std::int64_t real_available() {
  static const std::int64_t mask = available();
  return mask;
}

}  // namespace

const char* simd_target_name() {
  const std::int64_t t = available();
  return hwy::TargetName(t & -t);
}

std::vector<std::int64_t> simd_targets() {
  std::vector<std::int64_t> out;
  for (std::int64_t t = real_available(); t != 0; t &= t - 1) out.push_back(t & -t);
  return out;
}

void force_simd_target(std::int64_t target) {
  const std::int64_t real = real_available();
  ZS_CHECK(target == 0 || ((real & target) == target && (target & (target - 1)) == 0),
           "SIMD target {:#x} is not one this CPU supports among those compiled", target);
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace zeroshard::kernels
