// The GEMM's packing (tensor/kernels/gemm.cpp is the driver): A into MR-tall panels and B
// into NR-wide panels, k-major and zero-padded. Internal to the GEMM.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "tensor/kernels/gemm_micro.h"
#include "tensor/parallel.h"

namespace attend::kernel::gemm_detail {

// ---- packing ---------------------------------------------------------------------------

// Eight k of a full MR = 6 row panel of a row-major f32 A: rows[i] points at A[row i, k0].
// The six rows and two zero rows go through an 8x8 register transpose; each k's six values
// are stored as 4 + 2 floats, so nothing is written past dst[8 * MR) (a neighbouring panel
// may belong to another thread). The same values as the scalar copy.
__attribute__((target("avx2"))) inline void pack_a_rows_6x8(const float* const* rows, float* dst) {
  const __m256 z = _mm256_setzero_ps();
  const __m256 r0 = _mm256_loadu_ps(rows[0]), r1 = _mm256_loadu_ps(rows[1]),
               r2 = _mm256_loadu_ps(rows[2]), r3 = _mm256_loadu_ps(rows[3]),
               r4 = _mm256_loadu_ps(rows[4]), r5 = _mm256_loadu_ps(rows[5]);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
               t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(z, z), t7 = t6;
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  const __m256 c[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                       _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                       _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                       _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
  for (int j = 0; j < 8; ++j) {
    _mm_storeu_ps(dst + j * 6, _mm256_castps256_ps128(c[j]));
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + j * 6 + 4), _mm256_extractf128_ps(c[j], 1));
  }
}

// A[0:M, pc:pc+kc] -> ceil(M/MR) panels, each kc x MR (k-major), zero-padded rows.
template <typename T>
inline void pack_a(int64_t M, int64_t kc, int64_t pc, MatrixRef<T> A, T* out, bool parallel) {
  const int64_t panels = (M + MR - 1) / MR;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      T* dst = out + p * kc * MR;
      if (A.row_stride == 1 && p * MR + MR <= M) {
        // A is a transposed view (a gradient's x^T or P^T): the panel's MR rows at one k
        // are adjacent in memory, so copy them together, k by k (the row-by-row order
        // below would stride across kc cache lines MR times).
        const T* src = A.data + p * MR + pc * A.col_stride;
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = src[k * A.col_stride + i];
        continue;
      }
      if constexpr (std::is_same_v<T, float> && MR == 6) {
        if (kHasAvx2 && A.col_stride == 1 && p * MR + MR <= M) {
          const float* rows[MR];
          for (int64_t i = 0; i < MR; ++i) rows[i] = A.data + (p * MR + i) * A.row_stride + pc;
          int64_t k = 0;
          for (; k + 8 <= kc; k += 8) {
            pack_a_rows_6x8(rows, dst + k * MR);
            for (auto& r : rows) r += 8;
          }
          for (const int64_t k8 = k; k < kc; ++k)  // the last kc % 8, one by one
            for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = rows[i][k - k8];
          continue;
        }
      }
      for (int64_t i = 0; i < MR; ++i) {
        int64_t row = p * MR + i;
        if (row < M) {
          const T* src = A.data + row * A.row_stride + pc * A.col_stride;
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = src[k * A.col_stride];
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = T(0);
        }
      }
    }
  };
  if (parallel)
    parallel_for(panels, 4, body);
  else
    body(0, panels);
}

// Eight k-rows of two 8-column halves from a B whose row stride is 1 (a transposed
// weight, W^T: column j of B is row j of W): src points at B[k0, j0], column j at
// src + j * cs. Writes dst[k * 16 + j] for k, j < 8 and the next 8 columns at + 8, an 8x8
// transpose per half in registers (unpack, shuffle, permute), the same values as the
// scalar copy.
__attribute__((target("avx2"))) inline void pack_b_transposed_8x16(const float* src, int64_t cs,
                                                                   float* dst) {
  for (int half = 0; half < 2; ++half) {
    const float* s = src + half * 8 * cs;
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + cs), r2 = _mm256_loadu_ps(s + 2 * cs),
           r3 = _mm256_loadu_ps(s + 3 * cs), r4 = _mm256_loadu_ps(s + 4 * cs),
           r5 = _mm256_loadu_ps(s + 5 * cs), r6 = _mm256_loadu_ps(s + 6 * cs),
           r7 = _mm256_loadu_ps(s + 7 * cs);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
           t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
           t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float* d = dst + half * 8;
    _mm256_storeu_ps(d + 0 * 16, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + 1 * 16, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * 16, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * 16, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * 16, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * 16, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * 16, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * 16, _mm256_permute2f128_ps(u3, u7, 0x31));
  }
}

// B[pc:pc+kc, jc:jc+nc] -> ceil(nc/NR) panels, each kc x NR (k-major), zero-padded columns.
template <typename T>
inline void pack_b(int64_t nc, int64_t kc, int64_t pc, int64_t jc, MatrixRef<T> B, T* out,
                   bool parallel) {
  constexpr int64_t NR = nr<T>();
  const int64_t panels = (nc + NR - 1) / NR;
  auto body = [&](int64_t b, int64_t e) {
    if (B.col_stride == 1) {
      // Row-major B (W in dX = dY W, X in dW = dY^T X, V and K in attention): read row by
      // row, each row's NR-wide pieces into their panels, so memory is read in its order
      // (a panel at a time would walk kc rows per NR columns, kc cache misses per panel).
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = B.data + (pc + k) * B.row_stride + jc;
        for (int64_t p = b; p < e; ++p) {
          T* d = out + p * kc * NR + k * NR;
          const int64_t j0 = p * NR, cols = std::min(NR, nc - j0);
          if (cols == NR) {
            std::copy(src + j0, src + j0 + NR, d);
          } else {
            std::copy(src + j0, src + j0 + cols, d);
            std::fill(d + cols, d + NR, T(0));
          }
        }
      }
      return;
    }
    for (int64_t p = b; p < e; ++p) {
      T* dst = out + p * kc * NR;
      const int64_t cols = std::min(NR, nc - p * NR);
      int64_t k = 0;
      if constexpr (std::is_same_v<T, float>) {
        if (kHasAvx2 && B.row_stride == 1 && B.col_stride != 1 && cols == NR) {
          // B = W^T: eight k at a time through 8x8 register transposes.
          const T* src = B.data + pc + (jc + p * NR) * B.col_stride;
          for (; k + 8 <= kc; k += 8) pack_b_transposed_8x16(src + k, B.col_stride, dst + k * NR);
        }
      }
      for (; k < kc; ++k) {
        const T* src = B.data + (pc + k) * B.row_stride + (jc + p * NR) * B.col_stride;
        T* d = dst + k * NR;
        if (B.col_stride == 1) {
          for (int64_t j = 0; j < cols; ++j) d[j] = src[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) d[j] = src[j * B.col_stride];
        }
        for (int64_t j = cols; j < NR; ++j) d[j] = T(0);
      }
    }
  };
  if (parallel)
    parallel_for(panels, 4, body);
  else
    body(0, panels);
}

}  // namespace attend::kernel::gemm_detail
