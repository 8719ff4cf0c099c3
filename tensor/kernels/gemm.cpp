// Blocked GEMM in the style of BLIS/GotoBLAS:
//   for jc (NC columns of B and C)
//     for pc (KC of the shared dim): pack B[pc:, jc:] into NR-wide panels (k-major)
//       pack A[:, pc:] into MR-tall panels (k-major)
//       for each (MR x NR) tile of C, in parallel over tiles:
//         micro-kernel: acc = sum_k a_panel[k] (outer) b_panel[k], kc rank-1 updates
//         C_tile = acc (first pc block) or C_tile += acc, from registers for whole tiles
// Panels are zero-padded to MR/NR, so edge tiles run the same micro-kernel and only the
// write-back is clipped. On CPUs with AVX-512 the f32 micro-kernel takes two adjacent B
// panels at once (a 6 x 32 tile, one 512-bit register per row and panel); the panels are
// packed as for AVX2 and every element sums its products in the same order with the same
// fused multiply-adds, so the two kernels give the same bits.
#include "tensor/kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>

#include "tensor/error.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace {

constexpr int64_t MR = 6;     // rows of a micro-tile
constexpr int64_t KC = 256;   // shared-dim block: an A and a B panel stay in L1/L2
constexpr int64_t NC = 3072;  // columns per packed B block
constexpr int64_t MCP = 24;   // row panels per block of A reused against one B panel pair

template <typename T>
constexpr int64_t nr() {
  return 64 / sizeof(T);  // two AVX2 registers per row: 16 floats or 8 doubles
}

// A per-thread packing buffer that only grows: a training step runs the same shapes
// again and again, and a fresh allocation per call costs page faults.
struct PackBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~PackBuffer() { std::free(data); }
  template <typename T>
  T* get(int64_t n) {
    size_t want = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
    if (want > bytes) {
      std::free(data);
      data = std::aligned_alloc(64, want);
      if (!data) throw std::bad_alloc();
      bytes = want;
    }
    return static_cast<T*>(data);
  }
};
thread_local PackBuffer a_buffer, b_buffer;

// ---- micro-kernels: the MR x NR tile at out (leading dimension ld) = sum_k a[k*MR + i] *
// b[k*NR + j], or out += that sum when add (the sum finished first, then added once) ----

template <typename T>
void micro_portable(int64_t kc, const T* a, const T* b, T* out, int64_t ld, bool add) {
  constexpr int64_t NR = nr<T>();
  T c[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k, a += MR, b += NR)
    for (int64_t i = 0; i < MR; ++i)
      for (int64_t j = 0; j < NR; ++j) c[i][j] += a[i] * b[j];
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < NR; ++j) out[i * ld + j] = add ? out[i * ld + j] + c[i][j] : c[i][j];
}

__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const float* a, const float* b,
                                                    float* out, int64_t ld, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, a += MR, b += 16) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00), c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10), c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20), c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30), c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40), c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50), c51 = _mm256_fmadd_ps(ai, b1, c51);
  }
  const __m256 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
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

__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const double* a, const double* b,
                                                    double* out, int64_t ld, bool add) {
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

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
const bool kHasAvx512 = kHasAvx2 && __builtin_cpu_supports("avx512f");

// Why ATTEND_GEMM could not be honoured ("" when it is unset or honoured).
std::string& env_problem() {
  static std::string problem;
  return problem;
}

// The f32 kernel in use: the widest the CPU has, unless ATTEND_GEMM (avx512, avx2,
// portable) or set_gemm_kernel picked another. A value the CPU cannot run or that is not a
// kernel's name leaves the widest and is reported by gemm_env_problem.
GemmKernel initial_kernel() {
  const GemmKernel best = kHasAvx512 ? GemmKernel::avx512
                          : kHasAvx2 ? GemmKernel::avx2
                                     : GemmKernel::portable;
  const char* e = std::getenv("ATTEND_GEMM");
  if (!e) return best;
  const std::string v = e;
  if (v == "portable") return GemmKernel::portable;
  if (v == "avx2" && kHasAvx2) return GemmKernel::avx2;
  if (v == "avx512" && kHasAvx512) return GemmKernel::avx512;
  if (v == "avx2" || v == "avx512")
    env_problem() =
        "ATTEND_GEMM=" + v + ": this CPU has no " + (v == "avx2" ? "AVX2/FMA" : "AVX-512");
  else
    env_problem() = "ATTEND_GEMM='" + v + "': expected avx512, avx2 or portable";
  return best;
}
std::atomic<GemmKernel> g_kernel{initial_kernel()};

// Two adjacent B panels at once: out[i, 0:16] from b0's panel, out[i, 16:32] from b1's, each
// element sum_k a[k*MR + i] * b[k*16 + j] by one FMA per k in k order, as micro_avx2.
__attribute__((target("avx512f"))) void micro_avx512_6x32(int64_t kc, const float* a,
                                                          const float* b0, const float* b1,
                                                          float* out, int64_t ld, bool add) {
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
  __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
  __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
  __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, a += MR, b0 += 16, b1 += 16) {
    const __m512 x0 = _mm512_loadu_ps(b0), x1 = _mm512_loadu_ps(b1);
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
  const __m512 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
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

template <typename T>
void micro(int64_t kc, const T* a, const T* b, T* out, int64_t ld, bool add) {
  if (kHasAvx2 && g_kernel.load(std::memory_order_relaxed) != GemmKernel::portable) {
    micro_avx2(kc, a, b, out, ld, add);
  } else {
    micro_portable(kc, a, b, out, ld, add);
  }
}

// ---- packing ---------------------------------------------------------------------------

// Eight k of a full MR = 6 row panel of a row-major f32 A: rows[i] points at A[row i, k0].
// The six rows and two zero rows go through an 8x8 register transpose; each k's six values
// are stored as 4 + 2 floats, so nothing is written past dst[8 * MR) (a neighbouring panel
// may belong to another thread). The same values as the scalar copy.
__attribute__((target("avx2"))) void pack_a_rows_6x8(const float* const* rows, float* dst) {
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
void pack_a(int64_t M, int64_t kc, int64_t pc, MatrixRef<T> A, T* out, bool parallel) {
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
__attribute__((target("avx2"))) void pack_b_transposed_8x16(const float* src, int64_t cs,
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
void pack_b(int64_t nc, int64_t kc, int64_t pc, int64_t jc, MatrixRef<T> B, T* out, bool parallel) {
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

}  // namespace

GemmKernel gemm_kernel() { return g_kernel.load(); }

std::string gemm_env_problem() {
  (void)g_kernel.load();  // initialised, so env_problem is set
  return env_problem();
}

GemmKernel set_gemm_kernel(GemmKernel k) {
  if (k == GemmKernel::avx512 && !kHasAvx512) k = GemmKernel::avx2;
  if (k == GemmKernel::avx2 && !kHasAvx2) k = GemmKernel::portable;
  return g_kernel.exchange(k);
}

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::avx512:
      return "AVX-512 (6x32 f32 tiles; f64 AVX2/FMA)";
    case GemmKernel::avx2:
      return "AVX2/FMA";
    case GemmKernel::portable:
      break;
  }
  return "portable";
}

namespace {

// The product; with `pre` (serial only), B's panels come from pack_b_all(pre_K, pre_N, ...)
// instead of being packed here, and this product uses its first K rows and N columns.
template <typename T>
void gemm_impl(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc,
               bool parallel, bool accumulate, const T* pre, int64_t pre_K, int64_t pre_N) {
  constexpr int64_t NR = nr<T>();
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (accumulate) return;
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  // Small products are not worth threads.
  if (parallel && (M * N * K < (1 << 18) || max_threads() == 1)) parallel = false;
  if (pre) parallel = false;

  const int64_t m_panels = (M + MR - 1) / MR;
  T* b_pack =
      pre ? nullptr : b_buffer.get<T>(std::min(NC, (N + NR - 1) / NR * NR) * std::min(KC, K));
  // Elements from one packed B panel to the next in the K block at pc: the block's depth.
  auto b_stride = [&](int64_t pc) {
    return (pre ? std::min(KC, pre_K - pc) : std::min(KC, K - pc)) * NR;
  };

  // A unit of work is `step` adjacent tiles of one row panel: two with the AVX-512 f32
  // kernel (one 6 x 32 tile), else one.
  bool wide = false;
  if constexpr (std::is_same_v<T, float>) wide = g_kernel.load() == GemmKernel::avx512;
  const int64_t step = wide ? 2 : 1;

  // The tiles (ip, jp .. jp + step - 1) of C from packed panels: whole tiles straight from
  // registers, edge tiles through acc and clipped.
  auto tile = [&](int64_t ip, int64_t jp, int64_t jc, int64_t nc, int64_t kc, const T* a_panel,
                  const T* b_pack, int64_t bs, bool first, T* acc) {
    const int64_t i0 = ip * MR, j0 = jc + jp * NR;
    const int64_t rows = std::min(MR, M - i0);
    const int64_t width = std::min(step * NR, nc - jp * NR), panels = (width + NR - 1) / NR;
    const T* b_panel = b_pack + jp * bs;
    if constexpr (std::is_same_v<T, float>) {
      if (panels == 2) {
        if (rows == MR && width == 2 * NR) {
          micro_avx512_6x32(kc, a_panel, b_panel, b_panel + bs, C + i0 * ldc + j0, ldc, !first);
          return;
        }
        micro_avx512_6x32(kc, a_panel, b_panel, b_panel + bs, acc, 2 * NR, false);
      }
    }
    if (panels == 1) {
      if (rows == MR && width == NR) {
        micro(kc, a_panel, b_panel, C + i0 * ldc + j0, ldc, !first);
        return;
      }
      micro(kc, a_panel, b_panel, acc, step * NR, false);
    }
    for (int64_t i = 0; i < rows; ++i) {
      T* c = C + (i0 + i) * ldc + j0;
      const T* s = acc + i * step * NR;
      if (first) {
        for (int64_t j = 0; j < width; ++j) c[j] = s[j];
      } else {
        for (int64_t j = 0; j < width; ++j) c[j] += s[j];
      }
    }
  };

  // Whole row panels [ia, ib) in blocks of MCP panels: within a block, each B panel (pair)
  // meets every A panel of the block before the next B panel, so the B panel stays in L1
  // and the block of A (MCP x kc floats, 147 KiB) in L2. A row panel at a time would
  // stream the whole packed B block (up to kc x NC) once per row panel: past L2 for wide
  // products (N 1152 and up). The order of tiles changes no bits.
  auto rows_blocked = [&](int64_t ia, int64_t ib, int64_t n_panels, auto&& f) {
    for (int64_t ic = ia; ic < ib; ic += MCP)
      for (int64_t jp = 0; jp < n_panels; jp += step)
        for (int64_t ip = ic; ip < std::min(ib, ic + MCP); ++ip) f(ip, jp);
  };

  if (!parallel) {
    T* a_pack = a_buffer.get<T>(m_panels * MR * std::min(KC, K));
    alignas(64) T acc[MR * 2 * NR];
    for (int64_t jc = 0; jc < N; jc += NC) {
      const int64_t nc = std::min(NC, N - jc);
      const int64_t n_panels = (nc + NR - 1) / NR;
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        const T* bp = b_pack;
        if (pre) {
          bp = pre + pc * ((pre_N + NR - 1) / NR * NR);
        } else {
          pack_b(nc, kc, pc, jc, B, b_pack, false);
        }
        pack_a(M, kc, pc, A, a_pack, false);
        rows_blocked(0, m_panels, n_panels, [&](int64_t ip, int64_t jp) {
          tile(ip, jp, jc, nc, kc, a_pack + ip * kc * MR, bp, b_stride(pc), pc == 0 && !accumulate,
               acc);
        });
      }
    }
    return;
  }

  // In parallel: one OpenMP region for the whole product. Per (jc, pc) block the threads
  // pack B's panels together (a share of the panels each), meet at a barrier, then each
  // takes a contiguous share of the tiles in row-panel-major order (whole row panels where
  // the shares allow: disjoint rows of C), packs the A panels its share touches into its
  // own buffer, computes its tiles, and the threads meet again before B's buffer is
  // refilled. Which thread computes a tile changes nothing: every element sums its K
  // products in the same order.
#pragma omp parallel num_threads(max_threads())
  {
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    alignas(64) T acc[MR * 2 * NR];
    for (int64_t jc = 0; jc < N; jc += NC) {
      const int64_t nc = std::min(NC, N - jc);
      const int64_t n_panels = (nc + NR - 1) / NR, n_units = (n_panels + step - 1) / step;
      const int64_t tiles = m_panels * n_units;  // units of `step` tiles
      const int64_t q0 = n_panels * tid / nt, q1 = n_panels * (tid + 1) / nt;
      // Whole row panels per thread where there are enough of them, else an even share of
      // the tiles (units).
      const bool by_rows = m_panels >= 4 * nt;
      const int64_t t0 = by_rows ? m_panels * tid / nt * n_units : tiles * tid / nt;
      const int64_t t1 = by_rows ? m_panels * (tid + 1) / nt * n_units : tiles * (tid + 1) / nt;
      const int64_t ia = t0 / n_units, ib = t1 > t0 ? (t1 - 1) / n_units + 1 : ia;
      T* my_a = ib > ia ? a_buffer.get<T>((ib - ia) * MR * std::min(KC, K)) : nullptr;
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        if (q1 > q0)
          pack_b(std::min(nc, q1 * NR) - q0 * NR, kc, pc, jc + q0 * NR, B, b_pack + q0 * kc * NR,
                 false);
#pragma omp barrier
        if (ib > ia) {
          const int64_t r0 = ia * MR;
          pack_a(std::min(M, ib * MR) - r0, kc, pc,
                 MatrixRef<T>{A.data + r0 * A.row_stride, A.row_stride, A.col_stride}, my_a, false);
          auto one = [&](int64_t ip, int64_t jp) {
            tile(ip, jp, jc, nc, kc, my_a + (ip - ia) * kc * MR, b_pack, kc * NR,
                 pc == 0 && !accumulate, acc);
          };
          if (by_rows) {
            rows_blocked(ia, ib, n_panels, one);
          } else {
            for (int64_t t = t0; t < t1; ++t) one(t / n_units, t % n_units * step);
          }
        }
#pragma omp barrier
      }
    }
  }
}

}  // namespace

template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc,
          bool parallel, bool accumulate) {
  gemm_impl<T>(M, N, K, A, B, C, ldc, parallel, accumulate, nullptr, 0, 0);
}

template <typename T>
int64_t packed_b_size(int64_t K, int64_t N) {
  return K * ((N + nr<T>() - 1) / nr<T>() * nr<T>());
}

template <typename T>
void pack_b_all(int64_t K, int64_t N, MatrixRef<T> B, T* out) {
  const int64_t n_pad = (N + nr<T>() - 1) / nr<T>() * nr<T>();
  for (int64_t pc = 0; pc < K; pc += KC)
    pack_b(N, std::min(KC, K - pc), pc, 0, B, out + pc * n_pad, false);
}

template <typename T>
void gemm_prepacked(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, const T* packed, int64_t pK,
                    int64_t pN, T* C, int64_t ldc, bool accumulate) {
  ATTEND_CHECK(N <= pN && K <= pK && pN <= NC, "gemm_prepacked: a (", K, ", ", N,
               ") product from a B packed as (", pK, ", ", pN, "); B must hold it and pN <= ", NC);
  gemm_impl<T>(M, N, K, A, MatrixRef<T>{nullptr, 0, 0}, C, ldc, false, accumulate, packed, pK, pN);
}

template <typename T>
void gemm_naive(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C,
                int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(A.data[i * A.row_stride + k * A.col_stride]) *
             static_cast<double>(B.data[k * B.row_stride + j * B.col_stride]);
      C[i * ldc + j] = static_cast<T>(s);
    }
}

template void gemm<float>(int64_t, int64_t, int64_t, MatrixRef<float>, MatrixRef<float>, float*,
                          int64_t, bool, bool);
template void gemm<double>(int64_t, int64_t, int64_t, MatrixRef<double>, MatrixRef<double>, double*,
                           int64_t, bool, bool);
template int64_t packed_b_size<float>(int64_t, int64_t);
template int64_t packed_b_size<double>(int64_t, int64_t);
template void pack_b_all<float>(int64_t, int64_t, MatrixRef<float>, float*);
template void pack_b_all<double>(int64_t, int64_t, MatrixRef<double>, double*);
template void gemm_prepacked<float>(int64_t, int64_t, int64_t, MatrixRef<float>, const float*,
                                    int64_t, int64_t, float*, int64_t, bool);
template void gemm_prepacked<double>(int64_t, int64_t, int64_t, MatrixRef<double>, const double*,
                                     int64_t, int64_t, double*, int64_t, bool);
template void gemm_naive<float>(int64_t, int64_t, int64_t, MatrixRef<float>, MatrixRef<float>,
                                float*, int64_t);
template void gemm_naive<double>(int64_t, int64_t, int64_t, MatrixRef<double>, MatrixRef<double>,
                                 double*, int64_t);

}  // namespace attend::kernel
