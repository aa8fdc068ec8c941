#include "kernels/cpu/cast.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/reduce_ops.h"

namespace zeroshard::kernels {

namespace {

// Calls f(T*) with the array typed by its DType.
template <class F>
void with_type(DType t, const void* p, F&& f) {
  switch (t) {
    case DType::f32: return f(static_cast<const float*>(p));
    case DType::f64: return f(static_cast<const double*>(p));
    case DType::bf16: return f(static_cast<const bf16*>(p));
    case DType::f16: return f(static_cast<const f16*>(p));
  }
  ZS_CHECK(false, "unknown dtype {}", static_cast<int>(t));
}

template <class F>
void with_type(DType t, void* p, F&& f) {
  switch (t) {
    case DType::f32: return f(static_cast<float*>(p));
    case DType::f64: return f(static_cast<double*>(p));
    case DType::bf16: return f(static_cast<bf16*>(p));
    case DType::f16: return f(static_cast<f16*>(p));
  }
  ZS_CHECK(false, "unknown dtype {}", static_cast<int>(t));
}

}  // namespace

void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) {
  with_type(dst_type, dst, [&](auto* d) {
    using D = std::remove_pointer_t<decltype(d)>;
    with_type(src_type, src, [&](const auto* s) {
      if (scale == 1.0f) {
        for (std::size_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(s[i]));
      } else {
        for (std::size_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(s[i]) * scale);
      }
    });
  });
}

void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                     float scale) {
  with_type(dst_type, dst, [&](auto* d) {
    using D = std::remove_pointer_t<decltype(d)>;
    with_type(src_type, src, [&](const auto* s) {
      for (std::size_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(d[i]) + to_float(s[i]) * scale);
    });
  });
}

GradStats grad_stats(const void* data, DType type, std::size_t n) {
  GradStats st;
  if (type == DType::f32) {
    const float* x = static_cast<const float*>(data);
    st.sum_of_squares = sum_of_squares(x, n);
    if (!std::isfinite(st.sum_of_squares)) {
      for (std::size_t i = 0; i < n; ++i) st.nonfinite += !std::isfinite(x[i]);
    }
    return st;
  }
  with_type(type, data, [&](const auto* x) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < n; ++i) {
      const double v = to_float(x[i]);
      st.nonfinite += !std::isfinite(v);
      lane[i % 8] += v * v;
    }
    st.sum_of_squares = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  });
  return st;
}

}  // namespace zeroshard::kernels
