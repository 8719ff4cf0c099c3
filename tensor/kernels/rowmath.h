// Vectorisable pieces shared by the kernels (internal to tensor/kernels).
//
// exp_f32 and the row loops are written so GCC vectorises them, which it does only when
// it may assume floating-point operations do not trap: every file that includes this
// header is compiled with -fno-trapping-math (tensor/CMakeLists.txt). Sums run over eight
// fixed lanes, so a row's result depends on its length only, never on threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace attend::kernel {

// e^x for f32 within about 2 ulp: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two
// parts for exactness), e^r by its degree-6 Taylor polynomial (remainder < 1.3e-7
// relative), 2^n through the exponent bits. Inputs are clamped to [-87.3, 88.3], so
// 2^n stays a normal float; below -87.3 (e^x under 1.2e-38, near the smallest normal
// float) the result is 0, so exp(-inf) is exactly 0 as softmax's masked keys need.
[[gnu::always_inline]] inline float exp_f32(float in) {
  const float x = std::min(std::max(in, -87.3f), 88.3f);
  const float n = std::floor(x * 1.44269504f + 0.5f);
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 +
                                          r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return in < -87.3f ? 0.0f : p * scale;
}

// exp_f32 in f32, std::exp in f64.
template <typename T>
[[gnu::always_inline]] inline T exp_fast(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

inline constexpr int64_t kLanes = 8;

// sum_{i < n} term(i) in double, term i in lane i % kLanes, lanes added in order.
template <typename F>
[[gnu::always_inline]] inline double lane_sum(int64_t n, F term) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += term(i + l);
  for (; i < n; ++i) lane[i % kLanes] += term(i);
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

// One row of attention's softmax: y[:valid] = softmax(ts x[:valid]), y[valid:n] = 0
// (y may be x). The max is exact in any order; the sum of the exponentials runs in double
// in kLanes lanes, element j in lane j % kLanes: so keys past `valid` that are 0 (a mask
// applied as -inf before the call) leave every lane's sum unchanged, and the masked row of
// a plain softmax gives the same bits as this one with `valid`.
template <typename T>
void softmax_row(const T* x, T* y, int64_t valid, int64_t n, T ts) {
  T lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<T>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      y[j + l] = x[j + l] * ts;
      lane_max[l] = lane_max[l] > y[j + l] ? lane_max[l] : y[j + l];
    }
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t l = 0; l < kLanes; ++l) m = std::max(m, lane_max[l]);
  for (; j < valid; ++j) {
    y[j] = x[j] * ts;
    m = std::max(m, y[j]);
  }
  double lane_sum[kLanes] = {};
  j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      y[j + l] = exp_fast(y[j + l] - m);
      lane_sum[l] += y[j + l];
    }
  for (; j < valid; ++j) {
    y[j] = exp_fast(y[j] - m);
    lane_sum[j % kLanes] += y[j];
  }
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lane_sum[l];
  const T inv = static_cast<T>(1.0 / s);
  for (j = 0; j < valid; ++j) y[j] *= inv;
  for (j = valid; j < n; ++j) y[j] = T(0);
}

// Its gradient: dx[:valid] = (y (g - sum_j g_j y_j)) ts, dx[valid:n] = 0 (dx may be g).
// The dot product runs in double in kLanes lanes as softmax_row's sum (zeros past `valid`
// change nothing).
template <typename T>
void softmax_grad_row(const T* y, const T* g, T* dx, int64_t valid, int64_t n, T ts) {
  double lane_dot[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lane_dot[l] += static_cast<double>(g[j + l]) * static_cast<double>(y[j + l]);
  for (; j < valid; ++j) lane_dot[j % kLanes] += static_cast<double>(g[j]) * y[j];
  double dot = 0;
  for (int64_t l = 0; l < kLanes; ++l) dot += lane_dot[l];
  const T tdot = static_cast<T>(dot);
  for (j = 0; j < valid; ++j) dx[j] = (y[j] * (g[j] - tdot)) * ts;
  for (j = valid; j < n; ++j) dx[j] = T(0);
}

}  // namespace attend::kernel
