// The Q8_0 product (Note [The Q8_0 product], tensor/quant.h): a token's y = x W^T reading W
// as 34-byte blocks, 8.5 bits a weight, widened to f32 in registers.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "tensor/half.h"
#include "tensor/kernels/gemm.h"
#include "tensor/parallel.h"
#include "tensor/quant.h"

namespace attend::quant {

namespace {

float block_scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return half_to_float(h);
}

// Rows [n0, n1) of W against up to 4 rows of X, scalar.
void rows_scalar(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* X, int64_t ldx,
                 const uint8_t* W, float* Y, int64_t ldy) {
  const int64_t nb = K / kQ8Block, row_bytes = nb * kQ8BlockBytes;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      float a[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = W + n * row_bytes + b * kQ8BlockBytes;
        const float d = block_scale(blk);
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
        const float* x = X + m * ldx + b * kQ8Block;
        for (int l = 0; l < 16; ++l) {
          const float v =
              std::fma(static_cast<float>(q[16 + l]), x[16 + l], static_cast<float>(q[l]) * x[l]);
          a[l] = std::fma(d, v, a[l]);
        }
      }
      for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l) a[l] += a[l + w];
      Y[m * ldy + n] = a[0];
    }
}

// GCC 12's headers leave _mm512_undefined_* uninitialised on purpose and then warn about it
// where the conversions inline (GCC bug 105593, fixed in 13); as rowmath.h does.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

__attribute__((target("avx512f"))) float hsum16(__m512 a) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// How far ahead of a block its row is fetched: the hardware prefetcher alone leaves one
// core's Q8_0 product at a third of the f32 product's bytes per second from DRAM.
constexpr int kPrefetch = 4096;

// A block's scale, f16 -> f32 in one instruction (exact, as half_to_float).
__attribute__((target("f16c"))) inline float scale_f16c(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return _cvtsh_ss(h);
}

// AVX-512: one 16-lane accumulator per (row of W, row of X); R rows of W at a time so the
// accumulations' latency overlaps, each W block read once for all M rows of X.
template <int R, int M>
__attribute__((target("avx512f,f16c"))) void rows_avx512_r(int64_t n, int64_t K, const float* X,
                                                           int64_t ldx, const uint8_t* W, float* Y,
                                                           int64_t ldy) {
  const int64_t nb = K / kQ8Block, row_bytes = nb * kQ8BlockBytes;
  __m512 a[R][M];
  for (auto& r : a)
    for (auto& v : r) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + (n + r) * row_bytes + b * kQ8BlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch, _MM_HINT_T0);
      const __m512 d = _mm512_set1_ps(scale_f16c(blk));
      const __m512 lo = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
      const __m512 hi = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
      for (int m = 0; m < M; ++m) {
        const float* x = X + m * ldx + b * kQ8Block;
        const __m512 v =
            _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x)));
        a[r][m] = _mm512_fmadd_ps(d, v, a[r][m]);
      }
    }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum16(a[r][m]);
}

template <int M>
void rows_avx512_m(int64_t n0, int64_t n1, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
                   float* Y, int64_t ldy) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) rows_avx512_r<4, M>(n, K, X, ldx, W, Y, ldy);
  for (; n < n1; ++n) rows_avx512_r<1, M>(n, K, X, ldx, W, Y, ldy);
}

void rows_avx512(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* X, int64_t ldx,
                 const uint8_t* W, float* Y, int64_t ldy) {
  switch (M) {  // the accumulators in registers: M known at compile time
    case 1:
      return rows_avx512_m<1>(n0, n1, K, X, ldx, W, Y, ldy);
    case 2:
      return rows_avx512_m<2>(n0, n1, K, X, ldx, W, Y, ldy);
    case 3:
      return rows_avx512_m<3>(n0, n1, K, X, ldx, W, Y, ldy);
    default:
      return rows_avx512_m<4>(n0, n1, K, X, ldx, W, Y, ldy);
  }
}

#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) float hsum8x2(__m256 a0, __m256 a1) {
  const __m256 s8 = _mm256_add_ps(a0, a1);  // lanes l and l + 8
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// AVX2: the 16 lanes as two 8-lane registers (lanes 0-7, 8-15), the same sums; R rows of
// W at a time.
template <int R, int M>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2_r(int64_t n, int64_t K, const float* X,
                                                          int64_t ldx, const uint8_t* W, float* Y,
                                                          int64_t ldy) {
  const int64_t nb = K / kQ8Block, row_bytes = nb * kQ8BlockBytes;
  __m256 a[R][M][2];
  for (auto& r : a)
    for (auto& m : r) m[0] = m[1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + (n + r) * row_bytes + b * kQ8BlockBytes;
      const __m256 d = _mm256_set1_ps(scale_f16c(blk));
      __m256 q[4];  // weights 0-7, 8-15, 16-23, 24-31
      for (int i = 0; i < 4; ++i)
        q[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * i))));
      for (int m = 0; m < M; ++m) {
        const float* x = X + m * ldx + b * kQ8Block;
        for (int h = 0; h < 2; ++h) {
          const __m256 v = _mm256_fmadd_ps(q[2 + h], _mm256_loadu_ps(x + 16 + 8 * h),
                                           _mm256_mul_ps(q[h], _mm256_loadu_ps(x + 8 * h)));
          a[r][m][h] = _mm256_fmadd_ps(d, v, a[r][m][h]);
        }
      }
    }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum8x2(a[r][m][0], a[r][m][1]);
}

template <int M>
void rows_avx2_m(int64_t n0, int64_t n1, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
                 float* Y, int64_t ldy) {
  int64_t n = n0;
  for (; n + 2 <= n1; n += 2) rows_avx2_r<2, M>(n, K, X, ldx, W, Y, ldy);
  for (; n < n1; ++n) rows_avx2_r<1, M>(n, K, X, ldx, W, Y, ldy);
}

void rows_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* X, int64_t ldx,
               const uint8_t* W, float* Y, int64_t ldy) {
  switch (M) {
    case 1:
      return rows_avx2_m<1>(n0, n1, K, X, ldx, W, Y, ldy);
    case 2:
      return rows_avx2_m<2>(n0, n1, K, X, ldx, W, Y, ldy);
    case 3:
      return rows_avx2_m<3>(n0, n1, K, X, ldx, W, Y, ldy);
    default:
      return rows_avx2_m<4>(n0, n1, K, X, ldx, W, Y, ldy);
  }
}

const bool kHasF16c = __builtin_cpu_supports("f16c");

}  // namespace

void gemm_q8_0_reference(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
                         const uint8_t* W, float* Y, int64_t ldy) {
  for (int64_t m0 = 0; m0 < M; m0 += 4)
    rows_scalar(std::min<int64_t>(4, M - m0), 0, N, K, X + m0 * ldx, ldx, W, Y + m0 * ldy, ldy);
}

void gemm_q8_0(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
               float* Y, int64_t ldy, bool parallel) {
  const kernel::GemmKernel k = kernel::gemm_kernel();
  // The SIMD kernels read scales with F16C (every AVX2 CPU made has it; else the twin runs).
  auto rows = !kHasF16c                         ? rows_scalar
              : k == kernel::GemmKernel::avx512 ? rows_avx512
              : k == kernel::GemmKernel::avx2   ? rows_avx2
                                                : rows_scalar;
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int64_t mr = std::min<int64_t>(4, M - m0);
    auto body = [&](int64_t n0, int64_t n1) {
      rows(mr, n0, n1, K, X + m0 * ldx, ldx, W, Y + m0 * ldy, ldy);
    };
    // Threads when a product reads enough of W to pay for them: ~64 K weights per thread.
    if (parallel && N * K >= (1 << 17))
      parallel_for(N, std::max<int64_t>(16, (int64_t{1} << 16) / K), body);
    else
      body(0, N);
  }
}

}  // namespace attend::quant
