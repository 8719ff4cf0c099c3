// The GEMM's micro-kernels (tensor/kernels/gemm.cpp is the driver): the MR x NR tile of C
// from a packed A panel and packed B panel(s), portable, AVX2/FMA and AVX-512, and the
// choice among them. Internal to the GEMM: include only from tensor/kernels/gemm*.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "tensor/kernels/gemm.h"

namespace attend::kernel::gemm_detail {

constexpr int64_t MR = 6;     // rows of a micro-tile
constexpr int64_t KC = kGemmKBlock;  // shared-dim block: an A and a B panel stay in L1/L2
constexpr int64_t NC = 3072;  // columns per packed B block
constexpr int64_t MCP = 24;   // row panels per block of A reused against one B panel pair

template <typename T>
constexpr int64_t nr() {
  return 64 / sizeof(T);  // two AVX2 registers per row: 16 floats or 8 doubles
}

// What the CPU has and the f32 kernel in use (gemm_select.cpp: the widest the CPU has,
// unless ATTEND_GEMM or set_gemm_kernel picked another).
extern const bool kHasAvx2, kHasAvx512;
extern std::atomic<GemmKernel> g_kernel;

// ---- micro-kernels: the MR x NR tile at out (leading dimension ld) = sum_k a[k*MR + i] *
// b[k*NR + j], or out += that sum when add (the sum finished first, then added once) ----

// Each step one fused multiply-add, written as one (std::fma), as the SIMD kernels take it:
// `c += a * b` gave those bits only where the compiler chose to fuse it (-O2 with FMA in
// -march), and an -O1 build's portable kernel differed from the others.
template <typename T>
inline void micro_portable(int64_t kc, const T* a, const T* b, T* out, int64_t ld, bool add) {
  constexpr int64_t NR = nr<T>();
  T c[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k, a += MR, b += NR)
    for (int64_t i = 0; i < MR; ++i)
      for (int64_t j = 0; j < NR; ++j) c[i][j] = std::fma(a[i], b[j], c[i][j]);
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < NR; ++j) out[i * ld + j] = add ? out[i * ld + j] + c[i][j] : c[i][j];
}

// A finished MR x 16 (two 256-bit halves per row) or MR x 32 (two 512-bit halves) f32 tile
// from registers into out (leading dimension ld), or added to it: every f32 micro-kernel's
// (and the bf16 kernels') last step.
__attribute__((target("avx2"))) inline void store_tile(const __m256 (&c)[MR][2], float* out,
                                                       int64_t ld, bool add) {
  for (int64_t i = 0; i < MR; ++i) {
    float* o = out + i * ld;
    if (add) {
      _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), c[i][0]));
      _mm256_storeu_ps(o + 8, _mm256_add_ps(_mm256_loadu_ps(o + 8), c[i][1]));
    } else {
      _mm256_storeu_ps(o, c[i][0]);
      _mm256_storeu_ps(o + 8, c[i][1]);
    }
  }
}

__attribute__((target("avx512f"))) inline void store_tile(const __m512 (&c)[MR][2], float* out,
                                                          int64_t ld, bool add) {
  for (int64_t i = 0; i < MR; ++i) {
    float* o = out + i * ld;
    if (add) {
      _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), c[i][0]));
      _mm512_storeu_ps(o + 16, _mm512_add_ps(_mm512_loadu_ps(o + 16), c[i][1]));
    } else {
      _mm512_storeu_ps(o, c[i][0]);
      _mm512_storeu_ps(o + 16, c[i][1]);
    }
  }
}

// An MR x 16 f32 tile in twelve AVX2 registers, as named members (an indexed array made GCC
// spill one to the stack every step): the f32 kernel's and the bf16 emulation's.
struct Avx2Tile {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  __attribute__((target("avx2"))) Avx2Tile() {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  // Row i += a[i] x (x0, x1), one FMA per register.
  __attribute__((target("avx2,fma"))) void rank1(const float* a, __m256 x0, __m256 x1) {
    __m256 ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, x0, c00), c01 = _mm256_fmadd_ps(ai, x1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, x0, c10), c11 = _mm256_fmadd_ps(ai, x1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, x0, c20), c21 = _mm256_fmadd_ps(ai, x1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, x0, c30), c31 = _mm256_fmadd_ps(ai, x1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, x0, c40), c41 = _mm256_fmadd_ps(ai, x1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, x0, c50), c51 = _mm256_fmadd_ps(ai, x1, c51);
  }
  __attribute__((target("avx2"))) void store(float* out, int64_t ld, bool add) const {
    const __m256 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
    store_tile(c, out, ld, add);
  }
};

__attribute__((target("avx2,fma"))) inline void micro_avx2(int64_t kc, const float* a,
                                                           const float* b, float* out, int64_t ld,
                                                           bool add) {
  Avx2Tile t;
  for (int64_t k = 0; k < kc; ++k, a += MR, b += 16)
    t.rank1(a, _mm256_loadu_ps(b), _mm256_loadu_ps(b + 8));
  t.store(out, ld, add);
}

__attribute__((target("avx2,fma"))) inline void micro_avx2(int64_t kc, const double* a,
                                                           const double* b, double* out, int64_t ld,
                                                           bool add) {
  __m256d c00 = _mm256_setzero_pd(), c01 = _mm256_setzero_pd();
  __m256d c10 = _mm256_setzero_pd(), c11 = _mm256_setzero_pd();
  __m256d c20 = _mm256_setzero_pd(), c21 = _mm256_setzero_pd();
  __m256d c30 = _mm256_setzero_pd(), c31 = _mm256_setzero_pd();
  __m256d c40 = _mm256_setzero_pd(), c41 = _mm256_setzero_pd();
  __m256d c50 = _mm256_setzero_pd(), c51 = _mm256_setzero_pd();
  for (int64_t k = 0; k < kc; ++k, a += MR, b += 8) {
    __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
    __m256d ai = _mm256_broadcast_sd(a + 0);
    c00 = _mm256_fmadd_pd(ai, b0, c00), c01 = _mm256_fmadd_pd(ai, b1, c01);
    ai = _mm256_broadcast_sd(a + 1);
    c10 = _mm256_fmadd_pd(ai, b0, c10), c11 = _mm256_fmadd_pd(ai, b1, c11);
    ai = _mm256_broadcast_sd(a + 2);
    c20 = _mm256_fmadd_pd(ai, b0, c20), c21 = _mm256_fmadd_pd(ai, b1, c21);
    ai = _mm256_broadcast_sd(a + 3);
    c30 = _mm256_fmadd_pd(ai, b0, c30), c31 = _mm256_fmadd_pd(ai, b1, c31);
    ai = _mm256_broadcast_sd(a + 4);
    c40 = _mm256_fmadd_pd(ai, b0, c40), c41 = _mm256_fmadd_pd(ai, b1, c41);
    ai = _mm256_broadcast_sd(a + 5);
    c50 = _mm256_fmadd_pd(ai, b0, c50), c51 = _mm256_fmadd_pd(ai, b1, c51);
  }
  const __m256d c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t i = 0; i < MR; ++i) {
    double* o = out + i * ld;
    if (add) {
      _mm256_storeu_pd(o, _mm256_add_pd(_mm256_loadu_pd(o), c[i][0]));
      _mm256_storeu_pd(o + 4, _mm256_add_pd(_mm256_loadu_pd(o + 4), c[i][1]));
    } else {
      _mm256_storeu_pd(o, c[i][0]);
      _mm256_storeu_pd(o + 4, c[i][1]);
    }
  }
}

// An MR x 32 f32 tile in twelve AVX-512 registers, named as Avx2Tile's (so GCC keeps them
// in registers): the f32 kernel's and the bf16 emulation's (gemm_bf16.h).
struct Avx512Tile {
  __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  __attribute__((target("avx512f"))) Avx512Tile() {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm512_setzero_ps();
  }
  // Row i += a[i] x (x0, x1), one FMA per register.
  __attribute__((target("avx512f"))) void rank1(const float* a, __m512 x0, __m512 x1) {
    __m512 ai = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(ai, x0, c00), c01 = _mm512_fmadd_ps(ai, x1, c01);
    ai = _mm512_set1_ps(a[1]);
    c10 = _mm512_fmadd_ps(ai, x0, c10), c11 = _mm512_fmadd_ps(ai, x1, c11);
    ai = _mm512_set1_ps(a[2]);
    c20 = _mm512_fmadd_ps(ai, x0, c20), c21 = _mm512_fmadd_ps(ai, x1, c21);
    ai = _mm512_set1_ps(a[3]);
    c30 = _mm512_fmadd_ps(ai, x0, c30), c31 = _mm512_fmadd_ps(ai, x1, c31);
    ai = _mm512_set1_ps(a[4]);
    c40 = _mm512_fmadd_ps(ai, x0, c40), c41 = _mm512_fmadd_ps(ai, x1, c41);
    ai = _mm512_set1_ps(a[5]);
    c50 = _mm512_fmadd_ps(ai, x0, c50), c51 = _mm512_fmadd_ps(ai, x1, c51);
  }
  __attribute__((target("avx512f"))) void store(float* out, int64_t ld, bool add) const {
    const __m512 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
    store_tile(c, out, ld, add);
  }
};

// Two adjacent B panels at once: out[i, 0:16] from b0's panel, out[i, 16:32] from b1's, each
// element sum_k a[k*MR + i] * b[k*16 + j] by one FMA per k in k order, as micro_avx2.
__attribute__((target("avx512f"))) inline void micro_avx512_6x32(int64_t kc, const float* a,
                                                                 const float* b0, const float* b1,
                                                                 float* out, int64_t ld, bool add) {
  Avx512Tile t;
  for (int64_t k = 0; k < kc; ++k, a += MR, b0 += 16, b1 += 16)
    t.rank1(a, _mm512_loadu_ps(b0), _mm512_loadu_ps(b1));
  t.store(out, ld, add);
}

template <typename T>
inline void micro(int64_t kc, const T* a, const T* b, T* out, int64_t ld, bool add) {
  if (kHasAvx2 && g_kernel.load(std::memory_order_relaxed) != GemmKernel::portable) {
    micro_avx2(kc, a, b, out, ld, add);
  } else {
    micro_portable(kc, a, b, out, ld, add);
  }
}

}  // namespace attend::kernel::gemm_detail
