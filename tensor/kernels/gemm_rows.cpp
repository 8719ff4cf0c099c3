#include "tensor/kernels/gemm_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/error.h"
#include "tensor/kernels/gemm_bf16.h"
#include "tensor/kernels/gemm_micro.h"
#include "tensor/parallel.h"

namespace attend::kernel::gemm_detail {

bool few_rows_applies(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B) {
  return kHasAvx2 && g_kernel.load(std::memory_order_relaxed) != GemmKernel::portable && M >= 1 &&
         M <= kMaxFewRows && N >= 8 && K >= 1 && A.col_stride == 1 &&
         (B.row_stride == 1 || B.col_stride == 1);
}

namespace {

// 32 outputs at a time: four groups of eight, four independent chains of fused
// multiply-adds per row of A, enough to hide their latency.
constexpr int kGroups = 4;
constexpr int64_t kChunk = 8 * kGroups;

// Eight and one of B's values as the kernels multiply them: f32 as they are, or rounded to
// bf16 (Bf16), or widened from bf16 bits (a weight kept in bf16 for decoding, or a decoder's
// bf16 key and value cache: the same values as rounding the f32 they were made from).
template <bool Bf16, typename Src>
__attribute__((target("avx2,fma"))) inline __m256 load8(const Src* p) {
  if constexpr (std::is_same_v<Src, uint16_t>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (Bf16) {
    return bf16_round_ps_x8(_mm256_loadu_ps(p));
  } else {
    return _mm256_loadu_ps(p);
  }
}
template <bool Bf16, typename Src>
inline float load1(const Src* p) {
  if constexpr (std::is_same_v<Src, uint16_t>) {
    return bf16_value(*p);
  } else if constexpr (Bf16) {
    return bf16_round(*p);
  } else {
    return *p;
  }
}

// Eight k from eight rows (r[i] + k) as eight column vectors: c[j] lane i = r[i][k + j]
// (bf16 bits widened; f32 values as they are).
template <typename Src>
__attribute__((target("avx2,fma"))) inline void columns8(const Src* const* r, int64_t k,
                                                         __m256* c) {
  const __m256 r0 = load8<false>(r[0] + k), r1 = load8<false>(r[1] + k),
               r2 = load8<false>(r[2] + k), r3 = load8<false>(r[3] + k),
               r4 = load8<false>(r[4] + k), r5 = load8<false>(r[5] + k),
               r6 = load8<false>(r[6] + k), r7 = load8<false>(r[7] + k);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
               t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  c[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  c[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  c[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  c[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  c[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  c[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  c[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  c[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// One k from eight rows as a vector (lane i = r[i][k]), as load1 gives each.
template <bool Bf16, typename Src>
__attribute__((target("avx2,fma"))) inline __m256 column(const Src* const* r, int64_t k) {
  return _mm256_setr_ps(load1<Bf16>(r[0] + k), load1<Bf16>(r[1] + k), load1<Bf16>(r[2] + k),
                        load1<Bf16>(r[3] + k), load1<Bf16>(r[4] + k), load1<Bf16>(r[5] + k),
                        load1<Bf16>(r[6] + k), load1<Bf16>(r[7] + k));
}

// Outputs [n0, n0 + 32) of M rows (rows of W past N repeat row N - 1: computed, not
// stored).
// Bf16: A's rows come rounded (gemm_few_rows), W's values are rounded here (or come as
// bf16 bits); per pair of k the products of k+1 then of k, an odd block's last k after a
// product of zeros.
template <int M, bool Bf16, typename Src>
__attribute__((target("avx2,fma"))) void chunk(int64_t n0, int64_t N, int64_t K, const float* A,
                                               int64_t lda, const Src* W, int64_t ldw, float* C,
                                               int64_t ldc, bool accumulate) {
  static_assert(Bf16 || std::is_same_v<Src, float>);
  const Src* rows[kGroups][8];
  for (int64_t g = 0; g < kGroups; ++g)
    for (int64_t i = 0; i < 8; ++i) rows[g][i] = W + std::min(n0 + 8 * g + i, N - 1) * ldw;
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    __m256 acc[M][kGroups];
    for (auto& row : acc)
      for (auto& a : row) a = _mm256_setzero_ps();
    int64_t k = pc;
    {
      const FlushToZero<Bf16> ftz;
      // Fully unrolled so that acc stays in registers (indexed by constants only).
      for (; k + 8 <= end; k += 8) {
#pragma GCC unroll 4
        for (int g = 0; g < kGroups; ++g) {
          __m256 c[8];
          columns8(rows[g], k, c);
          if constexpr (Bf16 && std::is_same_v<Src, float>) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) c[j] = bf16_round_ps_x8(c[j]);
          }
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) {
            const float* a = A + m * lda + k;
            if constexpr (Bf16) {
#pragma GCC unroll 4
              for (int j = 0; j < 8; j += 2) {
                acc[m][g] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + j + 1), c[j + 1], acc[m][g]);
                acc[m][g] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + j), c[j], acc[m][g]);
              }
            } else {
#pragma GCC unroll 8
              for (int j = 0; j < 8; ++j)
                acc[m][g] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + j), c[j], acc[m][g]);
            }
          }
        }
      }
      // The block's last k % 8: in order (f32), or by pairs as above (bf16).
      if constexpr (Bf16) {
        for (; k < end; k += 2)
          for (int64_t g = 0; g < kGroups; ++g) {
            const __m256 c0 = column<Bf16>(rows[g], k);
            const __m256 c1 = k + 1 < end ? column<Bf16>(rows[g], k + 1) : _mm256_setzero_ps();
            for (int m = 0; m < M; ++m) {
              const float a1 = k + 1 < end ? A[m * lda + k + 1] : 0.0f;
              acc[m][g] = _mm256_fmadd_ps(_mm256_set1_ps(a1), c1, acc[m][g]);
              acc[m][g] = _mm256_fmadd_ps(_mm256_set1_ps(A[m * lda + k]), c0, acc[m][g]);
            }
          }
      } else {
        for (; k < end; ++k)
          for (int64_t g = 0; g < kGroups; ++g) {
            const __m256 c = column<Bf16>(rows[g], k);
            for (int m = 0; m < M; ++m)
              acc[m][g] = _mm256_fmadd_ps(_mm256_set1_ps(A[m * lda + k]), c, acc[m][g]);
          }
      }
    }
    const bool store = pc == 0 && !accumulate;
    for (int m = 0; m < M; ++m)
      for (int64_t g = 0; g < kGroups; ++g) {
        const int64_t n = n0 + 8 * g;
        if (n >= N) break;
        alignas(32) float s[8];
        _mm256_store_ps(s, acc[m][g]);
        float* c = C + m * ldc + n;
        const int64_t width = std::min<int64_t>(8, N - n);
        if (store) {
          for (int64_t j = 0; j < width; ++j) c[j] = s[j];
        } else {
          for (int64_t j = 0; j < width; ++j) c[j] += s[j];
        }
      }
  }
}

// Row-major B (a weight kept transposed for decoding, W^T contiguous): outputs
// [n0, n0 + width) of M rows. For each k, one fused multiply-add per output with B's row
// segment, read in order; the sums live in `sum` (a thread's share of N: L1 or L2) until
// the KC block ends. Whole row segments, not narrow tiles: a narrow tile would visit K
// pages of B for a few hundred bytes each.
// Bf16 as chunk's: rows k+1 then k of B per pair, rounded as they are read (or, from bf16
// bits, widened).
template <int M, bool Bf16, typename Src>
__attribute__((target("avx2,fma"))) void rows_row_major(int64_t n0, int64_t width, int64_t K,
                                                        const float* A, int64_t lda, const Src* B,
                                                        int64_t ldb, float* C, int64_t ldc,
                                                        bool accumulate) {
  static_assert(Bf16 || std::is_same_v<Src, float>);
  thread_local std::vector<float> buffer;
  const int64_t stride = (width + 7) / 8 * 8;
  if (static_cast<int64_t>(buffer.size()) < M * stride)
    buffer.resize(static_cast<size_t>(M * stride));
  float* sum = buffer.data();
  const int64_t full = width / 8 * 8;
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    std::fill(sum, sum + M * stride, 0.0f);
    if constexpr (Bf16) {
      const FlushToZero<> ftz;
      for (int64_t k = pc; k < end; k += 2) {
        // b1 null: an odd block's last k, after a product of zeros (gemm_bf16.h)
        const Src* b0 = B + k * ldb + n0;
        const Src* b1 = k + 1 < end ? b0 + ldb : nullptr;
        __m256 a0[M], a1[M];
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          a0[m] = _mm256_broadcast_ss(A + m * lda + k);
          a1[m] = b1 ? _mm256_broadcast_ss(A + m * lda + k + 1) : _mm256_setzero_ps();
        }
        for (int64_t j = 0; j < full; j += 8) {
          const __m256 x0 = load8<true>(b0 + j);
          const __m256 x1 = b1 ? load8<true>(b1 + j) : _mm256_setzero_ps();
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) {
            float* s = sum + m * stride + j;
            const __m256 t = _mm256_fmadd_ps(a1[m], x1, _mm256_loadu_ps(s));
            _mm256_storeu_ps(s, _mm256_fmadd_ps(a0[m], x0, t));
          }
        }
        for (int64_t j = full; j < width; ++j) {
          const float x0 = load1<true>(b0 + j), x1 = b1 ? load1<true>(b1 + j) : 0.0f;
          for (int m = 0; m < M; ++m) {
            const float a1s = b1 ? A[m * lda + k + 1] : 0.0f;
            float& s = sum[m * stride + j];
            s = flush_tiny(std::fma(a1s, x1, s));
            s = flush_tiny(std::fma(A[m * lda + k], x0, s));
          }
        }
      }
    } else {
      for (int64_t k = pc; k < end; ++k) {
        const Src* b = B + k * ldb + n0;
        __m256 a[M];
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) a[m] = _mm256_broadcast_ss(A + m * lda + k);
        for (int64_t j = 0; j < full; j += 8) {
          const __m256 x = load8<false>(b + j);
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) {
            float* s = sum + m * stride + j;
            _mm256_storeu_ps(s, _mm256_fmadd_ps(a[m], x, _mm256_loadu_ps(s)));
          }
        }
        for (int64_t j = full; j < width; ++j)
          for (int m = 0; m < M; ++m)
            sum[m * stride + j] = std::fma(A[m * lda + k], b[j], sum[m * stride + j]);
      }
    }
    const bool store = pc == 0 && !accumulate;
    for (int m = 0; m < M; ++m) {
      float* c = C + m * ldc + n0;
      const float* s = sum + m * stride;
      if (store) {
        for (int64_t j = 0; j < width; ++j) c[j] = s[j];
      } else {
        for (int64_t j = 0; j < width; ++j) c[j] += s[j];
      }
    }
  }
}

// f(std::integral_constant<int, M>) for M in 1..4.
template <typename F>
void with_rows(int64_t M, F&& f) {
  switch (M) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    default:
      f(std::integral_constant<int, 4>{});
      break;
  }
}

// Which thread computes an output changes nothing: each is one tile's or chunk's.
// Threads only for weights large enough. B = W^T row-major, whose threads each read a
// share of every row: below ~4 MB one thread reads it faster than a fork and join of two
// (measured: 0.9 MB, 23 us on one thread, 51 us on two). B = W (the chunk path), whose
// threads each stream their own contiguous rows: from 64 KB (measured 2026-12-05 on
// stories15m's shape, 2 threads: 16 K elements 1.45x the 4 MB threshold's tokens/s, 4 K
// elements and 1 both slower than 16 K).
bool use_threads(int64_t N, int64_t K, bool parallel, bool rows_of_w) {
  return parallel && N * K >= (rows_of_w ? (1 << 14) : (1 << 20)) && max_threads() > 1;
}

const bool kHasAvx512F = __builtin_cpu_supports("avx512f");
const bool kHasAvx512BW =
    kHasAvx512F && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");

// One row of A against `cols` <= 128 columns of a row-major B (K, ldb) (a decoding panel's,
// or V's rows in attention), with
// the sums in NV = ceil(cols / 16) AVX-512 registers (the last one masked), not in memory:
// rows_row_major<1, false>'s arithmetic (each sum a chain of FMAs over k, from zero in each
// KC block, then stored or added into C), so the same bits. The memory version stores and
// reloads every sum at every k; this one only streams the panel.
// 16 k-rows of the panel ahead: on the 2-core Xeon (2026-12-06) 8 KB gave the stories15m
// shape ~5-10% over no prefetch and over 2 KB (this VM's noise is of that order).
constexpr int64_t kPanelPrefetch = 8192;
// Rows of a row-major B (not a panel) prefetched this many rows ahead: in attention for one
// query, V's rows and the keys kept as columns are a few hundred bytes each, kilobytes apart,
// which the hardware prefetchers did not follow (bench_decode_attention, GPT-2's shape,
// 1,024 keys from DRAM: 7-9 GB/s).
constexpr int64_t kRowsAhead = 16;

// `ahead`: how far ahead of a row it prefetches, in bytes (a panel's kPanelPrefetch; V's rows
// in attention, kRowsAhead of its rows, which lie far apart).
template <int NV>
__attribute__((target("avx512f"))) void panel_f32_avx512(int64_t K, const float* A, const float* B,
                                                         int64_t ldb, int64_t cols, float* C,
                                                         bool accumulate = false,
                                                         int64_t ahead = kPanelPrefetch) {
  const __mmask16 last = static_cast<__mmask16>((1u << (cols - 16 * (NV - 1))) - 1);
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    __m512 s[NV];
    for (auto& v : s) v = _mm512_setzero_ps();
    for (int64_t k = pc; k < end; ++k) {
      const __m512 a = _mm512_set1_ps(A[k]);
      const float* b = B + k * ldb;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(b + 16 * j) + ahead, _MM_HINT_T0);
        const __m512 x = j + 1 < NV ? _mm512_loadu_ps(b + 16 * j)
                                    : _mm512_maskz_loadu_ps(last, b + 16 * j);
        s[j] = _mm512_fmadd_ps(a, x, s[j]);
      }
    }
    for (int j = 0; j < NV; ++j) {
      float* c = C + 16 * j;
      const __mmask16 m = j + 1 < NV ? __mmask16(0xFFFF) : last;
      _mm512_mask_storeu_ps(c, m, pc == 0 && !accumulate
                                      ? s[j]
                                      : _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), s[j]));
    }
  }
}

// The same under bf16 products for an f32 B (V's rows in attention, under bf16 products):
// rows_row_major<1, true>'s arithmetic (A's values rounded before, B's rounded as they are
// read; per pair of k, the product of k + 1 then of k, an odd block's last k after a
// product of zeros; flushed to zero while a block accumulates; the sums stored or added
// after), the sums in registers. The memory version stores and reloads every sum at every
// k: GPT-2's attention for one query under bf16 took 2.5-7x the f32 time (2026-12-07).
// From bf16 bits (a decoder's bf16 key and value cache), B's values are widened instead: the same
// values, half the bytes, no rounding.
template <int NV, typename Src>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void panel_bf16_rows_avx512(
    int64_t K, const float* A, const Src* B, int64_t ldb, int64_t cols, float* C, bool accumulate) {
  const __mmask16 last = static_cast<__mmask16>((1u << (cols - 16 * (NV - 1))) - 1);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  auto rounded = [&](const Src* p, __mmask16 m) {
    if constexpr (std::is_same_v<Src, uint16_t>)
      return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
          m, _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, p)), 16));
    else
      return _mm512_castsi512_ps(
          _mm512_and_si512(bf16_round_x16(_mm512_maskz_loadu_epi32(m, p)), high));
  };
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    __m512 s[NV];
    for (auto& v : s) v = _mm512_setzero_ps();
    {
      const FlushToZero<> ftz;
      for (int64_t k = pc; k < end; k += 2) {
        const Src* b0 = B + k * ldb;
        const bool two = k + 1 < end;
        const __m512 a0 = _mm512_set1_ps(A[k]), a1 = _mm512_set1_ps(two ? A[k + 1] : 0.0f);
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) {
          const __mmask16 m = j + 1 < NV ? __mmask16(0xFFFF) : last;
          _mm_prefetch(reinterpret_cast<const char*>(b0 + kRowsAhead * ldb + 16 * j), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(b0 + (kRowsAhead + 1) * ldb + 16 * j),
                       _MM_HINT_T0);
          const __m512 x0 = rounded(b0 + 16 * j, m);
          const __m512 x1 = two ? rounded(b0 + ldb + 16 * j, m) : _mm512_setzero_ps();
          s[j] = _mm512_fmadd_ps(a0, x0, _mm512_fmadd_ps(a1, x1, s[j]));
        }
      }
    }
    for (int j = 0; j < NV; ++j) {
      float* c = C + 16 * j;
      const __mmask16 m = j + 1 < NV ? __mmask16(0xFFFF) : last;
      _mm512_mask_storeu_ps(
          c, m, pc == 0 && !accumulate ? s[j] : _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), s[j]));
    }
  }
}

// f(std::integral_constant<int, NV>) for NV = ceil(cols / 16) in 1..8: a panel's columns
// in that many AVX-512 registers.
template <typename F>
void with_vectors(int64_t cols, F&& f) {
  switch ((cols + 15) / 16) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// Row-major B: one share of N per thread (multiples of 8, so shares start on whole vectors).
template <bool Bf16, typename Src>
void row_major(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const Src* B, int64_t ldb,
               float* C, int64_t ldc, bool threads, bool accumulate) {
  const int64_t shares = threads ? std::min<int64_t>(max_threads(), (N + 7) / 8) : 1;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t n0 = (N + 7) / 8 * q / shares * 8;
      const int64_t n1 = std::min(N, (N + 7) / 8 * (q + 1) / shares * 8), w = n1 - n0;
      if (w <= 0) continue;
      if (M == 1 && (Bf16 ? kHasAvx512BW : kHasAvx512F) &&
          g_kernel.load(std::memory_order_relaxed) == GemmKernel::avx512) {
        for (int64_t c0 = n0; c0 < n1; c0 += kDecodePanel) {  // sums in registers
          const int64_t cols = std::min(kDecodePanel, n1 - c0);
          with_vectors(cols, [&](auto nv) {
            if constexpr (Bf16)
              panel_bf16_rows_avx512<nv()>(K, A.data, B + c0, ldb, cols, C + c0, accumulate);
            else
              panel_f32_avx512<nv()>(K, A.data, B + c0, ldb, cols, C + c0, accumulate,
                                     kRowsAhead * ldb * static_cast<int64_t>(sizeof(float)));
          });
        }
        continue;
      }
      with_rows(M, [&](auto rows) {
        rows_row_major<rows(), Bf16>(n0, w, K, A.data, A.row_stride, B, ldb, C, ldc, accumulate);
      });
    }
  };
  shares > 1 ? parallel_for(shares, 1, body) : body(0, shares);
}

template <bool Bf16, typename Src>
void few_rows(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<Src> B, float* C,
              int64_t ldc, bool parallel, bool accumulate) {
  const bool threads = use_threads(N, K, parallel, B.col_stride != 1);
  if (B.col_stride == 1) {
    row_major<Bf16>(M, N, K, A, B.data, B.row_stride, C, ldc, threads, accumulate);
    return;
  }
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t n0 = q * kChunk;
      with_rows(M, [&](auto rows) {
        chunk<rows(), Bf16>(n0, N, K, A.data, A.row_stride, B.data, B.col_stride, C, ldc,
                            accumulate);
      });
    }
  };
  threads ? parallel_for(chunks, 1, body) : body(0, chunks);
}

// A's rows rounded to bf16 once (M x K values: a few KB, kept per thread).
MatrixRef<float> rounded_rows(int64_t M, int64_t K, MatrixRef<float> A) {
  thread_local std::vector<float> a;
  if (static_cast<int64_t>(a.size()) < M * K) a.resize(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      a[static_cast<size_t>(m * K + k)] = bf16_round(A.data[m * A.row_stride + k]);
  return {a.data(), K, 1};
}

}  // namespace

void gemm_few_rows(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B,
                   float* C, int64_t ldc, bool parallel, bool accumulate, bool bf16) {
  if (!bf16) {
    few_rows<false>(M, N, K, A, B, C, ldc, parallel, accumulate);
    return;
  }
  // W's values rounded as they are read.
  few_rows<true>(M, N, K, rounded_rows(M, K, A), B, C, ldc, parallel, accumulate);
}

void gemm_few_rows_bf16_bits(int64_t M, int64_t N, int64_t K, MatrixRef<float> A,
                             MatrixRef<uint16_t> B, float* C, int64_t ldc, bool parallel,
                             bool accumulate) {
  few_rows<true>(M, N, K, rounded_rows(M, K, A), B, C, ldc, parallel, accumulate);
}

}  // namespace attend::kernel::gemm_detail

namespace attend::kernel {

using namespace gemm_detail;

bool gemm_panels_apply(int64_t M, int64_t N, int64_t K) {
  return kHasAvx2 && g_kernel.load(std::memory_order_relaxed) != GemmKernel::portable && M >= 1 &&
         M <= kMaxFewRows && N >= 8 && K >= 1;
}

namespace {

// GCC 12's headers leave _mm512_undefined_* uninitialised on purpose and then warn about it
// where the conversions inline (GCC bug 105593, fixed in 13); as rowmath.h does.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The same for bf16 panels under bf16 products (gemm.h: pair words, k in the low half, k+1
// in the high half, as the blocked GEMM packs B), rows_row_major<1, true>'s arithmetic: per
// pair, the second product first, then the first, each result below f32's smallest normal
// flushed (an odd K's last pair has a zero high half and a zero x). Two kernels, the same
// bits (gemm_bf16.h):
//   emulated  the word's halves split into two f32 vectors (a shift, an and), two FMAs
//             under MXCSR's flush-to-zero;
//   native    AVX512_BF16's vdpbf16ps on the word as it is and x's pair as a word: one
//             instruction a pair and no splitting. Decoding waits on memory, not on the
//             arithmetic, so it is the faster even on Intel, where vdpbf16ps has half the
//             f32 FMA rate (2-core Xeon, 2026-12-06: 10.8-14.3 vs 9.5-12.7 GB/s from DRAM).
// Sums are stored or added into C after the flush-to-zero scope, under the caller's MXCSR,
// as the blocked kernels do.
template <int NV>
__attribute__((target("avx512f"))) void panel_bf16_emulated(int64_t K, const float* A,
                                                            const uint32_t* B, int64_t ldb,
                                                            int64_t cols, float* C) {
  const __mmask16 last = static_cast<__mmask16>((1u << (cols - 16 * (NV - 1))) - 1);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    __m512 s[NV];
    for (auto& v : s) v = _mm512_setzero_ps();
    {
      const FlushToZero<> ftz;
      for (int64_t k = pc; k < end; k += 2) {
        const uint32_t* w = B + k / 2 * ldb;
        const __m512 a0 = _mm512_set1_ps(A[k]), a1 = _mm512_set1_ps(k + 1 < end ? A[k + 1] : 0.0f);
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) {
          _mm_prefetch(reinterpret_cast<const char*>(w + 16 * j) + kPanelPrefetch, _MM_HINT_T0);
          const __m512i x = _mm512_maskz_loadu_epi32(j + 1 < NV ? __mmask16(0xFFFF) : last,
                                                     w + 16 * j);
          const __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
          const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(x, high));
          s[j] = _mm512_fmadd_ps(a0, lo, _mm512_fmadd_ps(a1, hi, s[j]));
        }
      }
    }
    for (int j = 0; j < NV; ++j) {
      float* c = C + 16 * j;
      const __mmask16 m = j + 1 < NV ? __mmask16(0xFFFF) : last;
      _mm512_mask_storeu_ps(c, m, pc == 0 ? s[j] : _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), s[j]));
    }
  }
}

// xb: x's bf16 bits, zero past K (to an even count), read a pair at a time as a word: x_k's
// bits low, x_k+1's high (little-endian).
template <int NV>
__attribute__((target("avx512f,avx512bf16"))) void panel_bf16_native(int64_t K, const uint16_t* xb,
                                                                     const uint32_t* B, int64_t ldb,
                                                                     int64_t cols, float* C) {
  const __mmask16 last = static_cast<__mmask16>((1u << (cols - 16 * (NV - 1))) - 1);
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    __m512 s[NV];
    for (auto& v : s) v = _mm512_setzero_ps();
    for (int64_t k = pc; k < end; k += 2) {
      const uint32_t* w = B + k / 2 * ldb;
      uint32_t pair;
      std::memcpy(&pair, xb + k, sizeof pair);
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(w + 16 * j) + kPanelPrefetch, _MM_HINT_T0);
        const __m512i x = _mm512_maskz_loadu_epi32(j + 1 < NV ? __mmask16(0xFFFF) : last,
                                                   w + 16 * j);
        s[j] = _mm512_dpbf16_ps(s[j], a, reinterpret_cast<__m512bh>(x));
      }
    }
    for (int j = 0; j < NV; ++j) {
      float* c = C + 16 * j;
      const __mmask16 m = j + 1 < NV ? __mmask16(0xFFFF) : last;
      _mm512_mask_storeu_ps(c, m, pc == 0 ? s[j] : _mm512_add_ps(_mm512_maskz_loadu_ps(m, c), s[j]));
    }
  }
}

// The AVX2 twin for M rows of A (and for CPUs without AVX-512): sums in memory, eight
// columns a vector, the rest one at a time with flush_tiny.
template <int M>
__attribute__((target("avx2,fma"))) void pairs_rows_avx2(int64_t K, const float* A, int64_t lda,
                                                        const uint32_t* B, int64_t ldb,
                                                        int64_t cols, float* C, int64_t ldc) {
  thread_local std::vector<float> buffer;
  const int64_t stride = (cols + 7) / 8 * 8;
  if (static_cast<int64_t>(buffer.size()) < M * stride) buffer.resize(static_cast<size_t>(M * stride));
  float* sum = buffer.data();
  const int64_t full = cols / 8 * 8;
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t end = std::min(K, pc + KC);
    std::fill(sum, sum + M * stride, 0.0f);
    {
      const FlushToZero<> ftz;
      for (int64_t k = pc; k < end; k += 2) {
        const uint32_t* w = B + k / 2 * ldb;
        const bool two = k + 1 < end;
        __m256 a0[M], a1[M];
#pragma GCC unroll 4
        for (int m = 0; m < M; ++m) {
          a0[m] = _mm256_broadcast_ss(A + m * lda + k);
          a1[m] = two ? _mm256_broadcast_ss(A + m * lda + k + 1) : _mm256_setzero_ps();
        }
        for (int64_t j = 0; j < full; j += 8) {
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j));
          const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
          const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(x, high));
#pragma GCC unroll 4
          for (int m = 0; m < M; ++m) {
            float* s = sum + m * stride + j;
            _mm256_storeu_ps(s, _mm256_fmadd_ps(a0[m], lo, _mm256_fmadd_ps(a1[m], hi, _mm256_loadu_ps(s))));
          }
        }
        for (int64_t j = full; j < cols; ++j) {
          const float lo = bf16_value(w[j] & 0xffffu), hi = bf16_value(w[j] >> 16);
          for (int m = 0; m < M; ++m) {
            float& s = sum[m * stride + j];
            s = flush_tiny(std::fma(two ? A[m * lda + k + 1] : 0.0f, hi, s));
            s = flush_tiny(std::fma(A[m * lda + k], lo, s));
          }
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      float* c = C + m * ldc;
      const float* s = sum + m * stride;
      if (pc == 0) {
        for (int64_t j = 0; j < cols; ++j) c[j] = s[j];
      } else {
        for (int64_t j = 0; j < cols; ++j) c[j] += s[j];
      }
    }
  }
}

#pragma GCC diagnostic pop

static_assert(kDecodePanel == 128);  // eight vectors of 16 at most

// Panels of B = W^T (gemm.h): panel p holds columns [n0, n0 + width) as `depth` rows of
// `width` elements (f32 values: K rows; bf16 pair words: ceil(K / 2) rows), after the n0
// depth elements of the full panels before it. Threads (for 64 KB and more, use_threads)
// split the N columns evenly at multiples of 16, whatever the panels: a share may start or
// end inside a panel and reads its columns of each of the panel's rows (N 288 in panels of
// 128, 128 and 32 gave one thread 256 columns and the other 32 when threads took whole
// panels). Each column's sum is the same chain whoever computes it: the bits do not depend
// on the thread count. piece(n0, width, j0, j1): columns [j0, j1) of the panel at n0.
template <typename Piece>
void for_panel_pieces(int64_t M, int64_t N, int64_t K, int64_t lda, bool parallel, Piece piece) {
  ATTEND_CHECK(gemm_panels_apply(M, N, K) && lda >= 0, "decoding panels: a (", M, ", ", K,
               ") x (", K, ", ", N, ") product they do not take (see gemm_panels_apply)");
  const int64_t vectors = (N + 15) / 16;
  const int64_t shares =
      use_threads(N, K, parallel, true) ? std::min<int64_t>(max_threads(), vectors) : 1;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const int64_t c0 = std::min(N, vectors * q / shares * 16);
      const int64_t c1 = std::min(N, vectors * (q + 1) / shares * 16);
      for (int64_t n0 = c0 / kDecodePanel * kDecodePanel; n0 < c1; n0 += kDecodePanel) {
        const int64_t width = std::min(kDecodePanel, N - n0);
        const int64_t j0 = std::max(c0, n0) - n0, j1 = std::min(c1, n0 + width) - n0;
        if (j1 > j0) piece(n0, width, j0, j1);
      }
    }
  };
  shares > 1 ? parallel_for(shares, 1, body) : body(0, shares);
}

bool avx512_in_use() {
  return kHasAvx512F && g_kernel.load(std::memory_order_relaxed) == GemmKernel::avx512;
}

template <typename Dst, typename Put>
void make_panels(const float* W, int64_t N, int64_t K, Dst* out, Put put) {
  for (int64_t n0 = 0; n0 < N; n0 += kDecodePanel) {
    const int64_t width = std::min(kDecodePanel, N - n0);
    Dst* panel = out + n0 * K;
    for (int64_t j = 0; j < width; ++j)
      for (int64_t k = 0; k < K; ++k) panel[k * width + j] = put(W[(n0 + j) * K + k]);
  }
}

const bool kHasAvx512Bf16Insn = __builtin_cpu_supports("avx512bf16");
std::atomic<Bf16Kernel> g_decode_bf16{kHasAvx512Bf16Insn ? Bf16Kernel::native : Bf16Kernel::fma};

}  // namespace

Bf16Kernel decode_bf16_kernel() { return g_decode_bf16.load(); }

Bf16Kernel set_decode_bf16_kernel(Bf16Kernel k) {
  if (!kHasAvx512Bf16Insn) k = Bf16Kernel::fma;
  return g_decode_bf16.exchange(k);
}

void gemm_f32_panels(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const float* B,
                     float* C, int64_t ldc, bool parallel) {
  ATTEND_CHECK(A.col_stride == 1, "decoding panels: A's rows must be contiguous");
  const bool registers = M == 1 && avx512_in_use();
  for_panel_pieces(M, N, K, A.row_stride, parallel,
                   [&](int64_t n0, int64_t width, int64_t j0, int64_t j1) {
    const float* panel = B + n0 * K;
    if (registers) {
      with_vectors(j1 - j0, [&](auto nv) {
        panel_f32_avx512<nv()>(K, A.data, panel + j0, width, j1 - j0, C + n0 + j0);
      });
      return;
    }
    with_rows(M, [&](auto rows) {
      rows_row_major<rows(), false>(j0, j1 - j0, K, A.data, A.row_stride, panel, width, C + n0,
                                    ldc, false);
    });
  });
}

int64_t decode_panels_bf16_words(int64_t N, int64_t K) { return N * ((K + 1) / 2); }

void gemm_bf16_panels(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint32_t* words,
                      float* C, int64_t ldc, bool parallel) {
  ATTEND_CHECK(A.col_stride == 1, "decoding panels: A's rows must be contiguous");
  const int64_t Kw = (K + 1) / 2;  // pair words a column
  const bool registers = avx512_in_use();
  const bool native = registers && g_decode_bf16.load(std::memory_order_relaxed) == Bf16Kernel::native;
  // The other kernels read x's rows rounded to bf16 (as f32 values, rows K apart).
  const MatrixRef<float> R = native ? A : rounded_rows(M, K, A);
  // vdpbf16ps reads x's pairs as words (x_k's bf16 bits low, x_k+1's high, zero past K): on a
  // little-endian machine the bf16 bits of the row in order, so to_bf16_bits (vectorized; the
  // rounding bf16_round's) writes them where the kernel reads them. A scalar loop over the
  // rounded row did, 1-6 us a product at K 768-3072 while the other threads waited: ~0.1 ms
  // of a GPT-2 token. This thread's buffer (no allocation a token), read by the others
  // through `xbits` (a thread_local named inside the region is theirs).
  static_assert(std::endian::native == std::endian::little);
  thread_local std::vector<uint16_t> xh;
  if (native) {
    xh.resize(static_cast<size_t>(M * 2 * Kw));
    for (int64_t m = 0; m < M; ++m) {
      uint16_t* row = xh.data() + m * 2 * Kw;
      to_bf16_bits(A.data + m * A.row_stride, row, K);
      if (K % 2 == 1) row[K] = 0;  // an odd K's last pair: x_K is zero
    }
  }
  const uint16_t* xbits = xh.data();
  for_panel_pieces(M, N, K, R.row_stride, parallel,
                   [&](int64_t n0, int64_t width, int64_t j0, int64_t j1) {
    const uint32_t* panel = words + n0 * Kw + j0;
    if (registers) {
      with_vectors(j1 - j0, [&](auto nv) {
        for (int64_t m = 0; m < M; ++m) {
          float* c = C + m * ldc + n0 + j0;
          if (native)
            panel_bf16_native<nv()>(K, xbits + m * 2 * Kw, panel, width, j1 - j0, c);
          else
            panel_bf16_emulated<nv()>(K, R.data + m * K, panel, width, j1 - j0, c);
        }
      });
      return;
    }
    with_rows(M, [&](auto rows) {
      pairs_rows_avx2<rows()>(K, R.data, K, panel, width, j1 - j0, C + n0 + j0, ldc);
    });
  });
}

void to_decode_panels(const float* W, int64_t N, int64_t K, float* out) {
  make_panels(W, N, K, out, [](float v) { return v; });
}

void to_decode_panels_bf16(const float* W, int64_t N, int64_t K, uint32_t* words) {
  const int64_t Kw = (K + 1) / 2;
  for (int64_t n0 = 0; n0 < N; n0 += kDecodePanel) {
    const int64_t width = std::min(kDecodePanel, N - n0);
    uint32_t* panel = words + n0 * Kw;
    for (int64_t j = 0; j < width; ++j) {
      const float* w = W + (n0 + j) * K;
      for (int64_t p = 0; p < Kw; ++p)
        panel[p * width + j] = bf16_word(w + 2 * p, 2 * p + 1 < K ? w + 2 * p + 1 : nullptr);
    }
  }
}

}  // namespace attend::kernel
