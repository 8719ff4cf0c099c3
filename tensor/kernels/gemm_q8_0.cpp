// The Q8_0 product (Note [The Q8_0 product], tensor/quant.h): a token's y = x W^T reading W
// as 34-byte blocks, 8.5 bits a weight, against x rounded to Q8_0 blocks, each block's 32
// products summed as integers.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

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

// X's rows as Q8_0: per row, K / 32 scales e (f32 of the half) and K int8 values (the
// blocks' values back to back, so two blocks are 64 contiguous bytes).
struct QuantizedRows {
  std::vector<float> scale;   // M * nb
  std::vector<int8_t> value;  // M * K
  int64_t nb = 0, K = 0;
  // fast: quantize_q8_0_fast (the same bytes); the twin keeps the plain one.
  QuantizedRows(int64_t M, int64_t K_, const float* X, int64_t ldx, bool fast)
      : scale(static_cast<size_t>(M * (K_ / kQ8Block))),
        value(static_cast<size_t>(M * K_)),
        nb(K_ / kQ8Block),
        K(K_) {
    uint8_t block[kQ8BlockBytes];
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < nb; ++b) {
        (fast ? quantize_q8_0_fast : quantize_q8_0)(X + m * ldx + b * kQ8Block, kQ8Block, block);
        scale[static_cast<size_t>(m * nb + b)] = block_scale(block);
        std::memcpy(value.data() + m * K + b * kQ8Block, block + 2, kQ8Block);
      }
  }
  const int8_t* row(int64_t m) const { return value.data() + m * K; }
  const float* scales(int64_t m) const { return scale.data() + m * nb; }
};

// Rows [n0, n1) of W against up to 4 rows of X, scalar: the Note's lanes spelled out.
void rows_scalar(int64_t M, int64_t n0, int64_t n1, const QuantizedRows& X, const uint8_t* W,
                 float* Y, int64_t ldy) {
  const int64_t nb = X.nb, row_bytes = nb * kQ8BlockBytes;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      float a[16] = {};
      for (int64_t b = 0; b < nb; b += 2)
        for (int l = 0; l < 16; ++l) {
          const int64_t c = b + l / 8;
          if (c >= nb) continue;  // the odd tail's missing block
          const uint8_t* blk = W + n * row_bytes + c * kQ8BlockBytes;
          const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
          const int8_t* p = X.row(m) + c * kQ8Block;
          int32_t s = 0;
          for (int j = 4 * (l % 8); j < 4 * (l % 8) + 4; ++j) s += int32_t{q[j]} * int32_t{p[j]};
          const float scale = block_scale(blk) * X.scales(m)[c];
          a[l] = std::fma(static_cast<float>(s), scale, a[l]);
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

// AVX-512 VNNI: a pair of blocks per 64-byte register. vpdpbusd multiplies unsigned by
// signed bytes, so x's values go in as |p| and W's with p's sign moved onto them (q * sgn p;
// |q| <= 127, so the negation is exact): the same integer products. R rows of W at a time,
// each W block read once for all M rows of X.
template <int R, int M>
__attribute__((target("avx512f,avx512bw,avx512vnni,f16c"))) void rows_vnni_r(
    int64_t n, const QuantizedRows& X, const uint8_t* W, float* Y, int64_t ldy) {
  const int64_t nb = X.nb, row_bytes = nb * kQ8BlockBytes;
  __m512 a[R][M];
  for (auto& r : a)
    for (auto& v : r) v = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t b = 0; b < nb; b += 2) {
    const bool pair = b + 1 < nb;
    __m512i ax[M];
    __mmask64 neg[M];
    __m512 ex[M];  // x's scales: lanes 0-7 block b, 8-15 block b + 1
    for (int m = 0; m < M; ++m) {
      const int8_t* p = X.row(m) + b * kQ8Block;
      const __m512i v =
          pair ? _mm512_loadu_si512(p)
               : _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      const __m512i vz = pair ? v : _mm512_inserti64x4(v, _mm256_setzero_si256(), 1);
      ax[m] = _mm512_abs_epi8(vz);
      neg[m] = _mm512_movepi8_mask(vz);
      const float e0 = X.scales(m)[b], e1 = pair ? X.scales(m)[b + 1] : 0.0f;
      ex[m] = _mm512_insertf32x8(_mm512_set1_ps(e0), _mm256_set1_ps(e1), 1);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + (n + r) * row_bytes + b * kQ8BlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch, _MM_HINT_T0);
      const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i q1 = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                    blk + kQ8BlockBytes + 2))
                              : _mm256_setzero_si256();
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
      // Both halves' scales converted at once, then spread: lanes 0-7 d_b, 8-15 d_b+1.
      uint16_t h0, h1 = 0;
      std::memcpy(&h0, blk, 2);
      if (pair) std::memcpy(&h1, blk + kQ8BlockBytes, 2);
      const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (uint32_t{h1} << 16))));
      const __m512 d = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(dd));
      for (int m = 0; m < M; ++m) {
        const __m512i signed_q = _mm512_mask_sub_epi8(q, neg[m], zero, q);
        const __m512i s = _mm512_dpbusd_epi32(zero, ax[m], signed_q);
        a[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, ex[m]), a[r][m]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum16(a[r][m]);
}

template <int M>
void rows_vnni_m(int64_t n0, int64_t n1, const QuantizedRows& X, const uint8_t* W, float* Y,
                 int64_t ldy) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) rows_vnni_r<4, M>(n, X, W, Y, ldy);
  for (; n < n1; ++n) rows_vnni_r<1, M>(n, X, W, Y, ldy);
}

void rows_vnni(int64_t M, int64_t n0, int64_t n1, const QuantizedRows& X, const uint8_t* W,
               float* Y, int64_t ldy) {
  switch (M) {  // the accumulators in registers: M known at compile time
    case 1:
      return rows_vnni_m<1>(n0, n1, X, W, Y, ldy);
    case 2:
      return rows_vnni_m<2>(n0, n1, X, W, Y, ldy);
    case 3:
      return rows_vnni_m<3>(n0, n1, X, W, Y, ldy);
    default:
      return rows_vnni_m<4>(n0, n1, X, W, Y, ldy);
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

// AVX2: one block per 32-byte register; vpmaddubsw sums byte products in pairs (|p q| <=
// 127 * 127, two of them fit an int16) and vpmaddwd by ones sums the pairs into the same
// int32 lanes of 4 products as vpdpbusd. Even blocks accumulate in a0 (the Note's lanes
// 0-7), odd ones in a1 (lanes 8-15). R rows of W at a time.
template <int R, int M>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2_r(int64_t n, const QuantizedRows& X,
                                                          const uint8_t* W, float* Y,
                                                          int64_t ldy) {
  const int64_t nb = X.nb, row_bytes = nb * kQ8BlockBytes;
  __m256 a[R][M][2];
  for (auto& r : a)
    for (auto& m : r) m[0] = m[1] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i ax[M], px[M];
    for (int m = 0; m < M; ++m) {
      px[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(X.row(m) + b * kQ8Block));
      ax[m] = _mm256_sign_epi8(px[m], px[m]);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = W + (n + r) * row_bytes + b * kQ8BlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch, _MM_HINT_T0);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const float d = scale_f16c(blk);
      for (int m = 0; m < M; ++m) {
        const __m256i pairs = _mm256_maddubs_epi16(ax[m], _mm256_sign_epi8(q, px[m]));
        const __m256i s = _mm256_madd_epi16(pairs, ones);
        const __m256 scale = _mm256_set1_ps(d * X.scales(m)[b]);
        a[r][m][b % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, a[r][m][b % 2]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum8x2(a[r][m][0], a[r][m][1]);
}

template <int M>
void rows_avx2_m(int64_t n0, int64_t n1, const QuantizedRows& X, const uint8_t* W, float* Y,
                 int64_t ldy) {
  int64_t n = n0;
  for (; n + 2 <= n1; n += 2) rows_avx2_r<2, M>(n, X, W, Y, ldy);
  for (; n < n1; ++n) rows_avx2_r<1, M>(n, X, W, Y, ldy);
}

void rows_avx2(int64_t M, int64_t n0, int64_t n1, const QuantizedRows& X, const uint8_t* W,
               float* Y, int64_t ldy) {
  switch (M) {
    case 1:
      return rows_avx2_m<1>(n0, n1, X, W, Y, ldy);
    case 2:
      return rows_avx2_m<2>(n0, n1, X, W, Y, ldy);
    case 3:
      return rows_avx2_m<3>(n0, n1, X, W, Y, ldy);
    default:
      return rows_avx2_m<4>(n0, n1, X, W, Y, ldy);
  }
}

const bool kHasF16c = __builtin_cpu_supports("f16c");
const bool kHasVnni =
    __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");

using RowsFn = void (*)(int64_t, int64_t, int64_t, const QuantizedRows&, const uint8_t*, float*,
                        int64_t);

void run(RowsFn rows, int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
         const uint8_t* W, float* Y, int64_t ldy, bool parallel) {
  const bool fast = rows != rows_scalar;
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int64_t mr = std::min<int64_t>(4, M - m0);
    const QuantizedRows xq(mr, K, X + m0 * ldx, ldx, fast);
    auto body = [&](int64_t n0, int64_t n1) { rows(mr, n0, n1, xq, W, Y + m0 * ldy, ldy); };
    // Threads when a product reads enough of W to pay for them: ~64 K weights per thread.
    if (parallel && N * K >= (1 << 17))
      parallel_for(N, std::max<int64_t>(16, (int64_t{1} << 16) / K), body);
    else
      body(0, N);
  }
}

}  // namespace

void gemm_q8_0_reference(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
                         const uint8_t* W, float* Y, int64_t ldy) {
  run(rows_scalar, M, N, K, X, ldx, W, Y, ldy, false);
}

void gemm_q8_0(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
               float* Y, int64_t ldy, bool parallel) {
  const kernel::GemmKernel k = kernel::gemm_kernel();
  // The SIMD kernels read scales with F16C (every AVX2 CPU made has it; else the twin runs);
  // an AVX-512 CPU without VNNI runs the AVX2 kernel (the same bits).
  const RowsFn rows = !kHasF16c                                    ? rows_scalar
                      : k == kernel::GemmKernel::avx512 && kHasVnni ? rows_vnni
                      : k != kernel::GemmKernel::portable           ? rows_avx2
                                                                    : rows_scalar;
  run(rows, M, N, K, X, ldx, W, Y, ldy, parallel);
}

}  // namespace attend::quant
