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
//
// The micro-kernels and the kernel choice are in gemm_micro.h and gemm_select.cpp, the
// packing in gemm_pack.h, up to four rows against a transposed weight (sampling's
// products) in gemm_rows.cpp; this file is the driver.
#include "tensor/kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/error.h"
#include "tensor/kernels/gemm_bf16.h"
#include "tensor/kernels/gemm_micro.h"
#include "tensor/kernels/gemm_pack.h"
#include "tensor/kernels/gemm_rows.h"
#include "tensor/parallel.h"

namespace attend::kernel {

using namespace gemm_detail;

namespace {

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

}  // namespace

namespace {

// One product: its sizes and operands, where B's panels come from, and the kernel path. With
// `pre` (serial only), B's panels come from pack_b_all(pre_K, pre_N, ...) instead of being
// packed here, and the product uses its first K rows and N columns.
template <typename T>
struct Product {
  static constexpr int64_t NR = nr<T>();
  int64_t M, N, K;
  MatrixRef<T> A, B;
  T* C;
  int64_t ldc;
  bool accumulate;
  const T* pre;
  int64_t pre_K, pre_N;
  // bf16 products (gemm_bf16.h): panels rounded to bf16 pairs after packing (a prepacked B
  // was rounded by pack_b_all under the same precision). Never for f64.
  bool bf16 = false;
  Bf16Path path = Bf16Path::scalar;
  // bf16 only: B given as bf16 bits (row-major, row stride b_ld) instead of through B.
  const uint16_t* b_bits = nullptr;
  int64_t b_ld = 0;
  // bf16 only: A's bf16 bits written here (row-major, row stride K) as A is packed.
  uint16_t* a_bits = nullptr;
  // A unit of work is `step` adjacent tiles of one row panel: two with the AVX-512 f32
  // kernel (one 6 x 32 tile), four with vdpbf16ps (6 x 64), else one.
  int64_t step = 1;

  int64_t m_panels() const { return (M + MR - 1) / MR; }
  // Elements from one packed B panel to the next in the K block at pc: the block's depth.
  int64_t b_stride(int64_t pc) const {
    return (pre ? std::min(KC, pre_K - pc) : std::min(KC, K - pc)) * NR;
  }

  // B's panels [jc, jc + nc) x [pc, pc + kc) packed, and under bf16 rounded to pairs (in one
  // pass where B's layout allows, gemm_bf16.h).
  void pack_b_block(int64_t nc, int64_t kc, int64_t pc, int64_t jc, T* out) const {
    if constexpr (std::is_same_v<T, float>) {
      if (b_bits) {
        pack_b_bits(nc, kc, pc, jc, b_bits, b_ld, out);
        return;
      }
      if (bf16) {
        pack_b_bf16(nc, kc, pc, jc, B, out, path);
        return;
      }
    }
    pack_b(nc, kc, pc, jc, B, out, false);
  }

  // A's rows [r0, r0 + rows) packed into `out`, and under bf16 each panel rounded: pairs for
  // the native kernel (in one pass) and the scalar one, swapped rounded rows for the AVX2
  // emulation.
  // With `keep` (the first column block) and a_bits, the rows' bf16 bits [pc, pc + kc) too.
  void pack_a_block(int64_t r0, int64_t rows, int64_t kc, int64_t pc, T* out,
                    bool keep = false) const {
    const MatrixRef<T> a{A.data + r0 * A.row_stride, A.row_stride, A.col_stride};
    if constexpr (std::is_same_v<T, float>) {
      uint16_t* bits = keep && a_bits ? a_bits + r0 * K + pc : nullptr;
      if (bf16 && path == Bf16Path::native) {
        pack_a_bf16(rows, kc, pc, a, out, bits, K);  // in one pass
        return;
      }
      // (a_bits: A.col_stride is 1; to_bf16_bits runs serially for a row this short)
      for (int64_t r = 0; bits && r < rows; ++r)
        to_bf16_bits(a.data + r * a.row_stride + pc, bits + r * K, kc);
    }
    pack_a(rows, kc, pc, a, out, false);
    if constexpr (std::is_same_v<T, float>) {
      if (!bf16) return;
      for (int64_t q = 0; q < (rows + MR - 1) / MR; ++q) {
        if (swapped_a(path)) {
          panel_to_bf16_swapped(out + q * kc * MR, kc, MR);
        } else {
          panel_to_bf16(out + q * kc * MR, kc, MR, path);
        }
      }
    }
  }

  // The tiles (ip, jp .. jp + step - 1) of C from packed panels: whole tiles straight from
  // registers, edge tiles through acc and clipped.
  void tile(int64_t ip, int64_t jp, int64_t jc, int64_t nc, int64_t kc, const T* a_panel,
            const T* b_pack, int64_t bs, bool first, T* acc) const {
    const int64_t i0 = ip * MR, j0 = jc + jp * NR;
    const int64_t rows = std::min(MR, M - i0);
    const int64_t width = std::min(step * NR, nc - jp * NR), panels = (width + NR - 1) / NR;
    const T* b_panel = b_pack + jp * bs;
    const bool whole = rows == MR && width == panels * NR;
    if constexpr (std::is_same_v<T, float>) {
      if (bf16) {
        float* o = whole ? C + i0 * ldc + j0 : acc;
        micro_bf16_tiles(path, kc, a_panel, b_panel, bs, panels, o, whole ? ldc : step * NR,
                         whole && !first);
        if (whole) return;
      } else if (panels == 2) {
        if (whole) {
          micro_avx512_6x32(kc, a_panel, b_panel, b_panel + bs, C + i0 * ldc + j0, ldc, !first);
          return;
        }
        micro_avx512_6x32(kc, a_panel, b_panel, b_panel + bs, acc, 2 * NR, false);
      }
    }
    if (panels == 1 && !bf16) {
      if (whole) {
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
  }

  // Whole row panels [ia, ib) in blocks of MCP panels: within a block, each B panel (pair)
  // meets every A panel of the block before the next B panel, so the B panel stays in L1
  // and the block of A (MCP x kc floats, 147 KiB) in L2. A row panel at a time would
  // stream the whole packed B block (up to kc x NC) once per row panel: past L2 for wide
  // products (N 1152 and up). The order of tiles changes no bits.
  template <typename F>
  void rows_blocked(int64_t ia, int64_t ib, int64_t n_panels, F&& f) const {
    for (int64_t ic = ia; ic < ib; ic += MCP)
      for (int64_t jp = 0; jp < n_panels; jp += step)
        for (int64_t ip = ic; ip < std::min(ib, ic + MCP); ++ip) f(ip, jp);
  }
};

// On this thread, block by block: B's panels packed (or taken from `pre`), then A's.
template <typename T>
void run_serial(const Product<T>& p) {
  constexpr int64_t NR = Product<T>::NR;
  T* b_pack = p.pre ? nullptr
                    : b_buffer.get<T>(std::min(NC, (p.N + NR - 1) / NR * NR) * std::min(KC, p.K));
  T* a_pack = a_buffer.get<T>(p.m_panels() * MR * std::min(KC, p.K));
  alignas(64) T acc[MR * 4 * NR];
  for (int64_t jc = 0; jc < p.N; jc += NC) {
    const int64_t nc = std::min(NC, p.N - jc);
    const int64_t n_panels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < p.K; pc += KC) {
      const int64_t kc = std::min(KC, p.K - pc);
      const T* bp = b_pack;
      if (p.pre) {
        bp = p.pre + pc * ((p.pre_N + NR - 1) / NR * NR);
      } else {
        p.pack_b_block(nc, kc, pc, jc, b_pack);
      }
      p.pack_a_block(0, p.M, kc, pc, a_pack, jc == 0);
      p.rows_blocked(0, p.m_panels(), n_panels, [&](int64_t ip, int64_t jp) {
        p.tile(ip, jp, jc, nc, kc, a_pack + ip * kc * MR, bp, p.b_stride(pc),
               pc == 0 && !p.accumulate, acc);
      });
    }
  }
}

// In parallel: one OpenMP region for the whole product. Per (jc, pc) block the threads
// pack B's panels together (a share of the panels each), meet at a barrier, then each
// takes a contiguous share of the tiles in row-panel-major order (whole row panels where
// the shares allow: disjoint rows of C), packs the A panels its share touches into its
// own buffer, computes its tiles, and the threads meet again before B's buffer is
// refilled. Which thread computes a tile changes nothing: every element sums its K
// products in the same order.
template <typename T>
void run_parallel(const Product<T>& p) {
  constexpr int64_t NR = Product<T>::NR;
  const int64_t M = p.M, N = p.N, K = p.K, m_panels = p.m_panels(), step = p.step;
  T* b_pack = b_buffer.get<T>(std::min(NC, (N + NR - 1) / NR * NR) * std::min(KC, K));
#pragma omp parallel num_threads(max_threads())
  {
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    alignas(64) T acc[MR * 4 * NR];
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
          p.pack_b_block(std::min(nc, q1 * NR) - q0 * NR, kc, pc, jc + q0 * NR,
                         b_pack + q0 * kc * NR);
#pragma omp barrier
        if (ib > ia) {
          // A's bits (a_bits) written as it is packed where each row panel is this
          // thread's alone (by_rows); else below
          p.pack_a_block(ia * MR, std::min(M, ib * MR) - ia * MR, kc, pc, my_a,
                         jc == 0 && by_rows);
          auto one = [&](int64_t ip, int64_t jp) {
            p.tile(ip, jp, jc, nc, kc, my_a + (ip - ia) * kc * MR, b_pack, kc * NR,
                   pc == 0 && !p.accumulate, acc);
          };
          if (by_rows) {
            p.rows_blocked(ia, ib, n_panels, one);
          } else {
            for (int64_t t = t0; t < t1; ++t) one(t / n_units, t % n_units * step);
          }
        }
#pragma omp barrier
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      // A share of tiles may begin or end inside a row panel, which two threads then pack:
      // each writes the bits of the row panels whose first tile (of the first column
      // block) is its, every row once.
      if (p.a_bits && m_panels < 4 * nt) {
        const int64_t n_units = ((std::min(NC, N) + NR - 1) / NR + step - 1) / step;
        const int64_t t0 = m_panels * n_units * tid / nt, t1 = m_panels * n_units * (tid + 1) / nt;
        for (int64_t ip = (t0 + n_units - 1) / n_units; ip * n_units < t1; ++ip)
          for (int64_t r = ip * MR; r < std::min(M, ip * MR + MR); ++r)
            to_bf16_bits(p.A.data + r * p.A.row_stride, p.a_bits + r * K, K);
      }
    }
  }
}

template <typename T>
void gemm_impl(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc,
               bool parallel, bool accumulate, const T* pre, int64_t pre_K, int64_t pre_N,
               const uint16_t* b_bits = nullptr, int64_t b_ld = 0, uint16_t* a_bits = nullptr) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (accumulate) return;
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  Product<T> p{.M = M, .N = N, .K = K, .A = A, .B = B, .C = C, .ldc = ldc,
               .accumulate = accumulate, .pre = pre, .pre_K = pre_K, .pre_N = pre_N};
  if constexpr (std::is_same_v<T, float>) {
    p.bf16 = g_precision.load(std::memory_order_relaxed) == GemmPrecision::bf16;
    p.path = p.bf16 ? bf16_path() : Bf16Path::scalar;
    p.step = g_kernel.load() == GemmKernel::avx512 ? (p.path == Bf16Path::native ? 4 : 2) : 1;
    p.b_bits = b_bits, p.b_ld = b_ld, p.a_bits = a_bits;
    // A few rows against a transposed weight (a token at a time): no packing, same bits, in
    // f32 and in bf16.
    if (!pre && !b_bits && !a_bits && few_rows_applies(M, N, K, A, B)) {
      gemm_few_rows(M, N, K, A, B, C, ldc, parallel, accumulate, p.bf16);
      return;
    }
  }
  // Small products are not worth threads.
  if (pre || M * N * K < (1 << 18) || max_threads() == 1) parallel = false;
  if (parallel) {
    run_parallel(p);
  } else {
    run_serial(p);
  }
}

}  // namespace

template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc,
          bool parallel, bool accumulate) {
  gemm_impl<T>(M, N, K, A, B, C, ldc, parallel, accumulate, nullptr, 0, 0);
}

void gemm_bf16_bits_b(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* B,
                      int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  ATTEND_INTERNAL_CHECK(g_precision.load(std::memory_order_relaxed) == GemmPrecision::bf16,
                        "gemm_bf16_bits_b: bf16 bits as B under f32 products");
  gemm_impl<float>(M, N, K, A, MatrixRef<float>{nullptr, 0, 0}, C, ldc, true, accumulate, nullptr,
                   0, 0, B, ldb);
}

void gemm_bf16_bits(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<uint16_t> B,
                    float* C, int64_t ldc) {
  ATTEND_INTERNAL_CHECK(g_precision.load(std::memory_order_relaxed) == GemmPrecision::bf16,
                        "gemm_bf16_bits: bf16 bits as B under f32 products");
  if (few_rows_applies(M, N, K, A, MatrixRef<float>{nullptr, B.row_stride, B.col_stride})) {
    gemm_few_rows_bf16_bits(M, N, K, A, B, C, ldc, false, false);
    return;
  }
  thread_local std::vector<float> wide;  // B's values (K, N), rows N apart
  if (static_cast<int64_t>(wide.size()) < K * N) wide.resize(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      wide[static_cast<size_t>(k * N + n)] =
          bf16_value(B.data[k * B.row_stride + n * B.col_stride]);
  gemm<float>(M, N, K, A, {wide.data(), N, 1}, C, ldc, false);
}

void gemm_bf16_keep_a(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B,
                      float* C, int64_t ldc, uint16_t* a_bits) {
  ATTEND_INTERNAL_CHECK(g_precision.load(std::memory_order_relaxed) == GemmPrecision::bf16 &&
                            A.col_stride == 1,
                        "gemm_bf16_keep_a: under f32 products, or A's columns not adjacent");
  gemm_impl<float>(M, N, K, A, B, C, ldc, true, false, nullptr, 0, 0, nullptr, 0, a_bits);
}

template <typename T>
int64_t packed_b_size(int64_t K, int64_t N) {
  return K * ((N + nr<T>() - 1) / nr<T>() * nr<T>());
}

template <typename T>
void pack_b_all(int64_t K, int64_t N, MatrixRef<T> B, T* out) {
  const int64_t n_pad = (N + nr<T>() - 1) / nr<T>() * nr<T>();
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t kc = std::min(KC, K - pc);
    // bf16: each panel packed as pairs. A product on a prefix of odd length k then reads row
    // k's value in the last pair's high half, against A's zero pad: the same sum unless that
    // value is infinite or NaN, or the sum is -0 (it may come out +0).
    if constexpr (std::is_same_v<T, float>) {
      if (g_precision.load(std::memory_order_relaxed) == GemmPrecision::bf16) {
        pack_b_bf16(N, kc, pc, 0, B, out + pc * n_pad, bf16_path());
        continue;
      }
    }
    pack_b(N, kc, pc, 0, B, out + pc * n_pad, false);
  }
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
