// Vectorisable pieces shared by the kernels (internal to tensor/kernels).
//
// exp_f32 and the row loops are written so GCC vectorises them, which it does only when
// it may assume floating-point operations do not trap: every file that includes this
// header is compiled with -fno-trapping-math (tensor/CMakeLists.txt). Sums run over eight
// fixed lanes, so a row's result depends on its length only, never on threads.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::kernel {

// e^x for f32 within about 2 ulp: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two
// parts for exactness), e^r by its degree-6 Taylor polynomial (remainder < 1.3e-7
// relative), 2^n through the exponent bits. Inputs are clamped to [-87.3, 88.3], so
// 2^n stays a normal float; below -87.3 (e^x under 1.2e-38, near the smallest normal
// float) the result is 0, so exp(-inf) is exactly 0 as softmax's masked keys need.
inline constexpr float kExpLog2e = 1.44269504f, kExpLn2Hi = 0.693145751953125f,
                       kExpLn2Lo = 1.428606765330187e-06f;  // ln 2 = hi + lo, hi exact in f32

[[gnu::always_inline]] inline float exp_f32(float in) {
  const float x = std::min(std::max(in, -87.3f), 88.3f);
  const float n = std::floor(x * kExpLog2e + 0.5f);
  const float r = (x - n * kExpLn2Hi) - n * kExpLn2Lo;
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
void softmax_row_plain(const T* x, T* y, int64_t valid, int64_t n, T ts) {
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
void softmax_grad_row_plain(const T* y, const T* g, T* dx, int64_t valid, int64_t n, T ts) {
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

#if defined(__AVX512F__)
// ---- The same rows 16 floats at a time (AVX-512; builds with -march=native on a CPU that has
// it). The plain loops above vectorise 8 wide and finish a row's last valid % 8 elements one
// by one, with scalar exps: for attention's short causal rows (C: 32 or 64 keys) that tail
// was most of the row's time. These use masked vectors for the tail and give the plain rows'
// bits for every row without NaN (tests/tensor/test_kernels.cpp compares them): the same
// exp (exp16 equals exp_f32 bit for bit on every float <= 88, checked exhaustively; softmax
// only passes values <= 0), the same max, the sum in the same eight double lanes (element j
// in lane j % 8, lanes added in order) and the same multiplies.

// GCC 12's headers leave _mm512_undefined_* uninitialised on purpose and then warn about it
// where _mm512_cvtps_pd and _mm512_extractf64x4_pd inline (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

[[gnu::always_inline]] inline __m512 exp16(__m512 in) {
  const __m512 x = _mm512_min_ps(_mm512_max_ps(in, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kExpLog2e), _mm512_set1_ps(0.5f)),
                           _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x));
  __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 720), _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(r, p, _mm512_set1_ps(1.0f));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  const __mmask16 under = _mm512_cmp_ps_mask(in, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
}

// The first `count` (< 16) lanes.
[[gnu::always_inline]] inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Adds v's 16 floats to 8 double lanes: elements 0-7 to lanes 0-7, then 8-15 to lanes 0-7.
[[gnu::always_inline]] inline __m512d add_lanes(__m512d acc, __m512 v) {
  acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  return _mm512_add_pd(
      acc, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

// The 8 lanes added in order, as the plain rows do.
[[gnu::always_inline]] inline double sum_lanes(__m512d acc) {
  alignas(64) double lane[kLanes];
  _mm512_store_pd(lane, acc);
  double s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

inline void softmax_row_avx512(const float* x, float* y, int64_t valid, int64_t n, float ts) {
  const __m512 vts = _mm512_set1_ps(ts);
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= valid; j += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + j), vts);
    _mm512_storeu_ps(y + j, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  if (j < valid) {
    const __mmask16 k = first_lanes(valid - j);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), vts);
    _mm512_mask_storeu_ps(y + j, k, v);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, v);
  }
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512d acc = _mm512_setzero_pd();
  for (j = 0; j + 16 <= valid; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(y + j), vm));
    _mm512_storeu_ps(y + j, e);
    acc = add_lanes(acc, e);
  }
  if (j < valid) {
    const __mmask16 k = first_lanes(valid - j);
    const __m512 e =
        _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + j), vm)));
    _mm512_mask_storeu_ps(y + j, k, e);
    acc = add_lanes(acc, e);  // the zeros past `valid` leave every lane's sum as it is
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum_lanes(acc)));
  for (j = 0; j + 16 <= valid; j += 16)
    _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_loadu_ps(y + j), inv));
  if (j < valid) {
    const __mmask16 k = first_lanes(valid - j);
    _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + j), inv));
  }
  std::fill(y + valid, y + n, 0.0f);
}

inline void softmax_grad_row_avx512(const float* y, const float* g, float* dx, int64_t valid,
                                    int64_t n, float ts) {
  // Each product of two floats is exact in double, so lane + g y rounds once either way.
  __m512d acc = _mm512_setzero_pd();
  int64_t j = 0;
  auto dot16 = [&](__m512 gv, __m512 yv) {
    const __m256 glo = _mm512_castps512_ps256(gv), ylo = _mm512_castps512_ps256(yv);
    const __m256 ghi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(gv), 1));
    const __m256 yhi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(yv), 1));
    acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_cvtps_pd(glo), _mm512_cvtps_pd(ylo)));
    acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_cvtps_pd(ghi), _mm512_cvtps_pd(yhi)));
  };
  for (; j + 16 <= valid; j += 16) dot16(_mm512_loadu_ps(g + j), _mm512_loadu_ps(y + j));
  if (j < valid) {
    const __mmask16 k = first_lanes(valid - j);
    dot16(_mm512_maskz_loadu_ps(k, g + j), _mm512_maskz_loadu_ps(k, y + j));
  }
  const __m512 tdot = _mm512_set1_ps(static_cast<float>(sum_lanes(acc))), vts = _mm512_set1_ps(ts);
  for (j = 0; j + 16 <= valid; j += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(g + j), tdot);
    _mm512_storeu_ps(dx + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(y + j), d), vts));
  }
  if (j < valid) {
    const __mmask16 k = first_lanes(valid - j);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, g + j), tdot);
    _mm512_mask_storeu_ps(dx + j, k,
                          _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + j), d), vts));
  }
  std::fill(dx + valid, dx + n, 0.0f);
}
#pragma GCC diagnostic pop
#endif

// The rows the kernels call: the AVX-512 ones for f32 where the build has AVX-512.
template <typename T>
void softmax_row(const T* x, T* y, int64_t valid, int64_t n, T ts) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    softmax_row_avx512(x, y, valid, n, ts);
    return;
  }
#endif
  softmax_row_plain(x, y, valid, n, ts);
}

template <typename T>
void softmax_grad_row(const T* y, const T* g, T* dx, int64_t valid, int64_t n, T ts) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    softmax_grad_row_avx512(y, g, dx, valid, n, ts);
    return;
  }
#endif
  softmax_grad_row_plain(y, g, dx, valid, n, ts);
}

// ---- Attention masks --------------------------------------------------------------------
// Row i of (Tq, Tk) scores sees keys [first_key(i), end_key(i)):
//   causal (offset >= 0): j <= i + offset (the future hidden)
//   sliding window W > 0 (Mistral): also j > i + offset - W, i.e. the W newest keys
//   offset < 0: every key (no mask; a window needs a causal mask)
inline int64_t end_key(int64_t i, int64_t Tk, int64_t offset) {
  return offset < 0 ? Tk : std::min(Tk, i + offset + 1);
}
inline int64_t first_key(int64_t i, int64_t offset, int64_t window) {
  return offset < 0 || window <= 0 ? 0 : std::max<int64_t>(0, i + offset - window + 1);
}

// softmax_row over the keys [lo, valid) of a row of n (zeros elsewhere). The lanes count
// from lo, so the fused attention (which starts its block at some key <= lo) and
// scaled_softmax give the same bits whenever both start the row's keys at lo.
template <typename T>
void softmax_row_range(const T* x, T* y, int64_t lo, int64_t valid, int64_t n, T ts) {
  if (lo > 0) std::fill(y, y + std::min(lo, n), T(0));
  if (lo >= valid) {
    std::fill(y, y + n, T(0));
    return;
  }
  softmax_row(x + lo, y + lo, valid - lo, n - lo, ts);
}

template <typename T>
void softmax_grad_row_range(const T* y, const T* g, T* dx, int64_t lo, int64_t valid, int64_t n,
                            T ts) {
  if (lo > 0) std::fill(dx, dx + std::min(lo, n), T(0));
  if (lo >= valid) {
    std::fill(dx, dx + n, T(0));
    return;
  }
  softmax_grad_row(y + lo, g + lo, dx + lo, valid - lo, n - lo, ts);
}

}  // namespace attend::kernel
#pragma GCC visibility pop
