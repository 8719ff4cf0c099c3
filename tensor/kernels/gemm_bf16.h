// The GEMM's bf16 arithmetic (tensor/kernels/gemm.cpp is the driver): with the precision
// set to bf16, f32 operands are rounded to bf16 when their panels are packed, and the
// micro-kernels multiply bf16 pairs and accumulate in f32. Internal to the GEMM.
//
// Packed layout: a panel's k values are taken in pairs (k, k+1), a zero after an odd last
// one; a pair of bf16 values shares one 32-bit word, k in the low half, k+1 in the high
// half: the operand order of AVX512_BF16's vdpbf16ps. A panel of kc f32 rows becomes
// ceil(kc/2) word rows in place, at the start of the same memory.
//
// The AVX2 emulation reads A differently (B as above): A's panel stays kc f32 rows, each
// value rounded to bf16 (low 16 bits zero), the two rows of each pair swapped (k+1 first,
// the order of the arithmetic below), a lone last row of an odd kc left in place; so the
// kernel broadcasts A's values as plain floats, and splits only B's words.
//
// Arithmetic, native and emulated alike: per pair, acc = acc + a[k+1] b[k+1], then
// acc = acc + a[k] b[k], each rounded to f32 (nearest even), a result below f32's smallest
// normal flushed to zero, as vdpbf16ps is specified. A product of two bf16 values is exact
// in f32, so a fused multiply-add of the rounded values is that step exactly. An f32
// subnormal operand is read as zero when packed, so no denormal ever reaches the native
// instruction (which would read it as zero) or the emulation.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/kernels/gemm_micro.h"
#include "tensor/kernels/gemm_pack.h"

namespace attend::kernel::gemm_detail {

extern const bool kHasAvx512Bf16;
extern std::atomic<GemmPrecision> g_precision;

// f32 -> bf16 bits: a subnormal f32 is read as a zero of its sign (so no bf16 subnormal is
// ever made: rounding a normal value only grows it), then round to nearest even; a NaN
// stays a (quiet) NaN; a value that rounds past bf16's largest becomes infinity.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The same rounding, 16 lanes at once: f32 bits -> the rounded value's bits in the high
// half (the low half is left over). Shifts are the zero-masked forms: GCC 12's plain
// _mm512_srli_epi32 reads an undefined register and warns wherever it is inlined.
__attribute__((target("avx512f"))) inline __m512i bf16_round_x16(__m512i u) {
  const __m512i exp = _mm512_set1_epi32(0x7f800000), abs = _mm512_set1_epi32(0x7fffffff);
  const __mmask16 tiny = _mm512_testn_epi32_mask(u, exp);
  u = _mm512_mask_and_epi32(u, tiny, u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_epi32(u, abs), exp);
  const __m512i odd =
      _mm512_and_epi32(_mm512_maskz_srli_epi32(0xffff, u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}

// Pair rows lo and hi (hi null: zeros) of `width` <= 16 floats -> width words at out.
__attribute__((target("avx512f"))) inline void bf16_pairs_x16(const float* lo, const float* hi,
                                                              int64_t width, uint32_t* out) {
  const __mmask16 m = static_cast<__mmask16>((1u << width) - 1);
  const __m512i l = bf16_round_x16(_mm512_maskz_loadu_epi32(m, lo));
  const __m512i h = hi ? bf16_round_x16(_mm512_maskz_loadu_epi32(m, hi)) : _mm512_setzero_si512();
  const __m512i w =
      _mm512_or_epi32(_mm512_maskz_srli_epi32(0xffff, l, 16),
                      _mm512_and_epi32(h, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  _mm512_mask_storeu_epi32(out, m, w);
}

// bf16_round_x16 in AVX2 registers, 8 lanes.
__attribute__((target("avx2"))) inline __m256i bf16_round_x8(__m256i u) {
  const __m256i exp = _mm256_set1_epi32(0x7f800000), abs = _mm256_set1_epi32(0x7fffffff);
  const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), _mm256_setzero_si256());
  u = _mm256_andnot_si256(_mm256_and_si256(tiny, abs), u);  // a subnormal: its sign only
  // (u & abs) and exp are below 2^31, so the signed compare is the unsigned one
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), exp);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
  return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
}

// Pair rows lo and hi (hi null: zeros) of 16 floats -> 16 words at out; all four halves are
// read before either store.
__attribute__((target("avx2"))) inline void bf16_pairs_x8x2(const float* lo, const float* hi,
                                                            uint32_t* out) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256i w[2];
  for (int h = 0; h < 2; ++h) {
    const __m256i l =
        bf16_round_x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + 8 * h)));
    const __m256i u =
        hi ? bf16_round_x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + 8 * h)))
           : _mm256_setzero_si256();
    w[h] = _mm256_or_si256(_mm256_srli_epi32(l, 16), _mm256_and_si256(u, high));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), w[0]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), w[1]);
}

inline float bf16_value(uint32_t h) {
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// x rounded to bf16 and kept as f32 (kernel::round_to_bf16).
inline float bf16_round(float x) { return bf16_value(bf16_bits(x)); }

// The same, 8 lanes: the rounded values as f32 (low halves zero).
__attribute__((target("avx2"))) inline __m256 bf16_round_ps_x8(__m256 v) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  return _mm256_castsi256_ps(_mm256_and_si256(bf16_round_x8(_mm256_castps_si256(v)), high));
}

// One pair word: lo's bf16 in the low half, hi's in the high half (hi null: zero).
inline uint32_t bf16_word(const float* lo, const float* hi) {
  return bf16_bits(*lo) | (hi ? static_cast<uint32_t>(bf16_bits(*hi)) << 16 : 0u);
}

// MXCSR's flush-to-zero for a scope (On false: nothing), around an emulated block's
// accumulation: results below f32's smallest normal become zeros of their sign, exactly
// those flush_tiny flushes (x86 detects tininess after rounding), as vdpbf16ps's are.
// Stores and adds into C go after the scope, under the caller's MXCSR, as the native
// kernel's do.
template <bool On = true>
struct FlushToZero {
  unsigned csr = 0;
  FlushToZero() {
    if constexpr (On) {
      csr = _mm_getcsr();
      _mm_setcsr(csr | 0x8000u);
    }
  }
  ~FlushToZero() {
    if constexpr (On) _mm_setcsr(csr);
  }
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;
};

// Which bf16 kernel a product runs (read once per product, or per pack_b_all): vdpbf16ps
// when the CPU has it and the f32 kernel in use is the AVX-512 one; else the emulation, in
// AVX2 registers unless ATTEND_GEMM=portable (the scalar one, the twin the tests hold the
// others to).
// With the AVX-512 f32 kernel in use: vdpbf16ps where the CPU has it and g_bf16_kernel says
// native, else the emulation in AVX-512 registers (avx512: the AVX2 emulation's arithmetic
// and A layout, 6 x 32 tiles). Intel's vdpbf16ps (Sapphire and Emerald Rapids) runs at half
// the f32 FMA rate, so there the emulation, two FMAs a pair, is the faster (gemm.h).
enum class Bf16Path { native, avx512, avx2, scalar };
extern std::atomic<Bf16Kernel> g_bf16_kernel;
inline Bf16Path bf16_path() {
  const GemmKernel k = g_kernel.load(std::memory_order_relaxed);
  if (k == GemmKernel::avx512)
    return kHasAvx512Bf16 && g_bf16_kernel.load(std::memory_order_relaxed) == Bf16Kernel::native
               ? Bf16Path::native
               : Bf16Path::avx512;
  return kHasAvx2 && k != GemmKernel::portable ? Bf16Path::avx2 : Bf16Path::scalar;
}
// The paths that read A's panel as swapped rounded f32 rows (panel_to_bf16_swapped).
inline bool swapped_a(Bf16Path p) { return p == Bf16Path::avx2 || p == Bf16Path::avx512; }

// A packed panel of kc rows of `width` f32 values (k-major) -> ceil(kc/2) rows of `width`
// bf16 pairs, in place. Output row p is written after input rows 2p and 2p+1 are read, and
// p <= 2p, so nothing unread is overwritten. The rounding in AVX-512 or AVX2 registers, or
// scalar, as the path (the same bits; the tests compare them).
inline void panel_to_bf16(float* panel, int64_t kc, int64_t width, Bf16Path path) {
  uint32_t* out = reinterpret_cast<uint32_t*>(panel);
  uint32_t row[32];
  const bool x16 = width <= 16 && (path == Bf16Path::native || path == Bf16Path::avx512);
  const bool x8 = width == 16 && path == Bf16Path::avx2;
  for (int64_t p = 0; p < (kc + 1) / 2; ++p) {
    const float* lo = panel + 2 * p * width;
    const float* hi = 2 * p + 1 < kc ? lo + width : nullptr;
    if (x16) {
      // both rows are read into registers before the store
      bf16_pairs_x16(lo, hi, width, out + p * width);
      continue;
    }
    if (x8) {
      bf16_pairs_x8x2(lo, hi, out + p * width);
      continue;
    }
    for (int64_t j = 0; j < width; ++j) row[j] = bf16_word(lo + j, hi ? hi + j : nullptr);
    std::memcpy(out + p * width, row, static_cast<size_t>(width) * 4);
  }
}

// pack_b then panel_to_bf16 on each panel, in one pass where B is row-major or W^T (with
// AVX2, whole 16-wide panels): each pair of k rows read, rounded and stored as words, so
// the panel is written once at half the bytes instead of written in f32, read and written
// again. The same words as the two passes (the rounding is bf16_round_x8's, which gives
// bf16_bits' bits; the tests compare).
inline void pack_b_bf16(int64_t nc, int64_t kc, int64_t pc, int64_t jc, MatrixRef<float> B,
                        float* out, Bf16Path path) {
  constexpr int64_t NR = 16;
  const int64_t panels = (nc + NR - 1) / NR;
  const int64_t pairs = (kc + 1) / 2;
  if (!kHasAvx2 || path == Bf16Path::scalar || (B.col_stride != 1 && B.row_stride != 1)) {
    pack_b(nc, kc, pc, jc, B, out, false);
    for (int64_t q = 0; q < panels; ++q) panel_to_bf16(out + q * kc * NR, kc, NR, path);
    return;
  }
  if (B.col_stride == 1) {
    // Row-major: rows k and k+1 read in order, each 16-wide piece into its panel.
    for (int64_t p2 = 0; p2 < pairs; ++p2) {
      const float* lo = B.data + (pc + 2 * p2) * B.row_stride + jc;
      const float* hi = 2 * p2 + 1 < kc ? lo + B.row_stride : nullptr;
      for (int64_t q = 0; q < panels; ++q) {
        auto* d = reinterpret_cast<uint32_t*>(out + q * kc * NR) + p2 * NR;
        const int64_t j0 = q * NR, cols = std::min(NR, nc - j0);
        if (cols == NR) {
          bf16_pairs_x8x2(lo + j0, hi ? hi + j0 : nullptr, d);
        } else {
          for (int64_t j = 0; j < NR; ++j)
            d[j] = j < cols ? bf16_word(lo + j0 + j, hi ? hi + j0 + j : nullptr) : 0u;
        }
      }
    }
    return;
  }
  // W^T (row stride 1): eight k of a panel through pack_b's 8x8 transposes into a 128-float
  // scratch, then four pairs of rows out, the last kc % 8 rows packed into the scratch
  // plainly, then paired; a partial panel packed and rounded in place.
  alignas(32) float tmp[8 * NR];
  for (int64_t q = 0; q < panels; ++q) {
    float* dst = out + q * kc * NR;
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const int64_t cols = std::min(NR, nc - q * NR);
    if (cols != NR) {
      pack_b(cols, kc, pc, jc + q * NR, B, dst, false);
      panel_to_bf16(dst, kc, NR, path);
      continue;
    }
    const float* src = B.data + pc + (jc + q * NR) * B.col_stride;
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      pack_b_transposed_8x16(src + k, B.col_stride, tmp);
      for (int64_t r = 0; r < 4; ++r)
        bf16_pairs_x8x2(tmp + 2 * r * NR, tmp + (2 * r + 1) * NR, d + (k / 2 + r) * NR);
    }
    const int64_t rest = kc - k;
    if (rest > 0) {
      pack_b(NR, rest, pc + k, jc + q * NR, B, tmp, false);
      for (int64_t r = 0; r < (rest + 1) / 2; ++r)
        bf16_pairs_x8x2(tmp + 2 * r * NR, 2 * r + 1 < rest ? tmp + (2 * r + 1) * NR : nullptr,
                        d + (k / 2 + r) * NR);
    }
  }
}

// A's rows [0, rows) x [pc, pc + kc) straight into pair panels (the layout above: the native
// and scalar kernels'), for AVX-512 CPUs: each value read once and each word written once,
// where packing in f32 and then pairing the panel in place (panel_to_bf16) writes and reads
// every value again. A row-major A (column stride 1: a forward's x, dX's dY): sixteen k of
// each of a panel's six rows rounded in registers and narrowed to eight pair words, the
// six rows of words through pack_a_rows_6x8's register transpose (it moves 32-bit lanes, so
// words as well as floats), the last kc % 16 by the same rounding into a scratch and out one
// by one. A transposed A (row stride 1: dW's dY^T): a panel's six values at one k are
// adjacent; eight panels and sixteen k at a time go through an L1 scratch (below). A
// partial last panel, or other strides, through pack_a and panel_to_bf16. The same words as
// those two passes (bf16_round_x16 gives bf16_bits' bits; the twin tests compare every
// kernel's products).
// With `bits` (A's columns adjacent), the rows' bf16 bits are written there too, row r's k
// at bits[r * ld + k]: a Linear's input kept for backward, made as it is packed.
__attribute__((target("avx512f,avx512bw"))) inline void pack_a_bf16(int64_t rows, int64_t kc,
                                                                    int64_t pc, MatrixRef<float> A,
                                                                    float* out,
                                                                    uint16_t* bits = nullptr,
                                                                    int64_t ld = 0) {
  const int64_t panels = (rows + MR - 1) / MR;
  int64_t q = 0;
  if (A.row_stride == 1 && !bits) {
    // Eight whole panels (48 values of a k row, three cache lines) and sixteen k at a time:
    // the 16 x 48 block copied whole into a scratch (each line read once, in order), then
    // each panel's eight pair rows made from the scratch and stored together. A panel at a
    // time read each line in three visits a panel's sweep of k apart, and with row strides
    // of a few KB the k rows share a few L1 sets, so the line was often gone: this packing
    // was about 3.6% of the baby GPT's bf16 step, now about 2% (perf; docs/numbers.md,
    // 2026-12-07). (Eight panels a pair at a time, without the scratch, was slower: its
    // stores went to eight panels 6 KB apart, a few at a time.)
    constexpr int64_t G = 8, KB = 16;
    alignas(64) float block[KB][G * MR];
    for (int64_t g = 0; q < rows / MR; q += g) {
      g = std::min(G, rows / MR - q);
      // the masks of the 48 values' three sixteens: the first g * MR values
      const __mmask16 m2 =
          static_cast<__mmask16>((1u << (g * MR - 32 > 0 ? g * MR - 32 : 0)) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(
          g * MR >= 32 ? 0xffffu : (1u << (g * MR > 16 ? g * MR - 16 : 0)) - 1);
      const __mmask16 m0 = static_cast<__mmask16>(g * MR >= 16 ? 0xffffu : (1u << (g * MR)) - 1);
      const float* src = A.data + q * MR + pc * A.col_stride;
      for (int64_t k0 = 0; k0 < kc; k0 += KB) {
        const int64_t n = std::min(KB, kc - k0);
        for (int64_t r = 0; r < n; ++r) {
          const float* s = src + (k0 + r) * A.col_stride;
          _mm512_store_ps(block[r], _mm512_maskz_loadu_ps(m0, s));
          _mm512_store_ps(block[r] + 16, _mm512_maskz_loadu_ps(m1, s + 16));
          _mm512_store_ps(block[r] + 32, _mm512_maskz_loadu_ps(m2, s + 32));
        }
        for (int64_t j = 0; j < g; ++j) {
          auto* d = reinterpret_cast<uint32_t*>(out + (q + j) * kc * MR) + k0 / 2 * MR;
          for (int64_t p = 0; p < (n + 1) / 2; ++p)
            bf16_pairs_x16(block[2 * p] + j * MR,
                           2 * p + 1 < n ? block[2 * p + 1] + j * MR : nullptr, MR, d + p * MR);
        }
      }
    }
  }
  for (; q < panels; ++q) {
    float* dst = out + q * kc * MR;
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const bool whole = q * MR + MR <= rows;
    if (!whole || A.col_stride != 1) {
      const int64_t n = std::min(MR, rows - q * MR);
      pack_a(n, kc, pc,
             MatrixRef<float>{A.data + q * MR * A.row_stride, A.row_stride, A.col_stride}, dst,
             false);
      panel_to_bf16(dst, kc, MR, Bf16Path::native);
      for (int64_t i = 0; bits && i < n; ++i)
        to_bf16_bits(A.data + (q * MR + i) * A.row_stride + pc, bits + (q * MR + i) * ld, kc);
      continue;
    }
    alignas(64) uint32_t tmp[MR][8];
    const float* row[MR];
    for (int64_t i = 0; i < MR; ++i) row[i] = A.data + (q * MR + i) * A.row_stride + pc;
    // the next panel's rows fetched a panel ahead: each row's piece is only kc floats (1 KB),
    // too short a stream for the hardware's prefetchers to catch before it ends
    const bool ahead = (q + 2) * MR <= rows;
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int64_t n = std::min<int64_t>(16, kc - k0);
      const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
      if (ahead)
        for (int64_t i = 0; i < MR; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(row[i] + MR * A.row_stride + k0), _MM_HINT_T0);
      for (int64_t i = 0; i < MR; ++i) {
        const __m512i r = bf16_round_x16(_mm512_maskz_loadu_epi32(m, row[i] + k0));
        // the high halves (the bf16 bits), sixteen of them side by side: eight pair words
        const __m256i h =
            _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, r, 16));
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[i]), h);
        if (bits)  // the n values (a masked load of tmp's 32 bytes: no lane past them read)
          _mm512_mask_storeu_epi16(bits + (q * MR + i) * ld + k0, m,
                                   _mm512_maskz_loadu_epi16(m, tmp[i]));
      }
      if (n == 16) {
        const float* t[MR];
        for (int64_t i = 0; i < MR; ++i) t[i] = reinterpret_cast<const float*>(tmp[i]);
        pack_a_rows_6x8(t, dst + k0 / 2 * MR);
        continue;
      }
      for (int64_t p = 0; p < (n + 1) / 2; ++p)
        for (int64_t i = 0; i < MR; ++i) d[(k0 / 2 + p) * MR + i] = tmp[i][p];
    }
  }
}

// B's panels [jc, jc + nc) x [pc, pc + kc) as pair words from bf16 bits (row-major, row
// stride ld), for every path (they all read B's pairs): the word of rows k, k + 1 is row k's
// bits in the low half and row k + 1's in the high half (zero past kc), zeros past nc. No
// rounding: the bits are bf16 already, and bf16_bits of their f32 values gives them back
// (to_bf16_bits makes no subnormal, and a NaN it made is already quiet), so the words
// pack_b_bf16 makes from the widened values.
__attribute__((target("avx2"))) inline void bits_pairs_x16(const uint16_t* lo, const uint16_t* hi,
                                                           uint32_t* out) {
  for (int h = 0; h < 2; ++h) {
    const __m256i l =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + 8 * h)));
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + 8 * h)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * h),
                        _mm256_or_si256(l, _mm256_slli_epi32(u, 16)));
  }
}
inline void pack_b_bits(int64_t nc, int64_t kc, int64_t pc, int64_t jc, const uint16_t* B,
                        int64_t ld, float* out) {
  constexpr int64_t NR = 16;
  const int64_t panels = (nc + NR - 1) / NR;
  for (int64_t p2 = 0; p2 < (kc + 1) / 2; ++p2) {
    const uint16_t* lo = B + (pc + 2 * p2) * ld + jc;
    const uint16_t* hi = 2 * p2 + 1 < kc ? lo + ld : nullptr;
    for (int64_t q = 0; q < panels; ++q) {
      auto* d = reinterpret_cast<uint32_t*>(out + q * kc * NR) + p2 * NR;
      const int64_t j0 = q * NR, cols = std::min(NR, nc - j0);
      if (kHasAvx2 && cols == NR && hi) {
        bits_pairs_x16(lo + j0, hi + j0, d);
        continue;
      }
      for (int64_t j = 0; j < NR; ++j)
        d[j] = j < cols ? lo[j0 + j] | (hi ? static_cast<uint32_t>(hi[j0 + j]) << 16 : 0u) : 0u;
    }
  }
}

// A's panel for the AVX2 emulation (the layout in the header comment), in place: every value
// rounded to bf16 and kept as f32, then rows 2p and 2p+1 swapped for each whole pair.
__attribute__((target("avx2"))) inline void panel_to_bf16_swapped(float* panel, int64_t kc,
                                                                  int64_t width) {
  const int64_t n = kc * width;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(panel + i, bf16_round_ps_x8(_mm256_loadu_ps(panel + i)));
  for (; i < n; ++i) panel[i] = bf16_round(panel[i]);
  float tmp[16];
  const size_t bytes = static_cast<size_t>(width) * 4;
  for (int64_t p = 0; p + 1 < kc; p += 2) {
    float* r = panel + p * width;
    std::memcpy(tmp, r, bytes);
    std::memcpy(r, r + width, bytes);
    std::memcpy(r + width, tmp, bytes);
  }
}

inline float flush_tiny(float x) {
  return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x;
}

// The emulation, scalar (ATTEND_GEMM=portable): the MR x 16 tile from kc2 pair rows of A (MR
// words each) and B (16 words).
inline void micro_bf16_emulated(int64_t kc2, const uint32_t* a, const uint32_t* b, float* out,
                                int64_t ld, bool add) {
  float c[MR][16] = {};
  for (int64_t p = 0; p < kc2; ++p, a += MR, b += 16)
    for (int64_t i = 0; i < MR; ++i) {
      const float a0 = bf16_value(a[i] & 0xffffu), a1 = bf16_value(a[i] >> 16);
      for (int64_t j = 0; j < 16; ++j) {
        const float b0 = bf16_value(b[j] & 0xffffu), b1 = bf16_value(b[j] >> 16);
        c[i][j] = flush_tiny(std::fma(a1, b1, c[i][j]));
        c[i][j] = flush_tiny(std::fma(a0, b0, c[i][j]));
      }
    }
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < 16; ++j) out[i * ld + j] = add ? out[i * ld + j] + c[i][j] : c[i][j];
}

// The emulation in AVX2/FMA registers, for CPUs without AVX512_BF16: A from its swapped f32
// panel (kc rows, panel_to_bf16_swapped), B's words split into their two bf16 values (high
// half masked, low half shifted up), two FMAs per pair in the order above, with MXCSR's
// flush-to-zero on for the loop, which flushes exactly the results flush_tiny does (x86
// detects tininess after rounding, and keeps the sign). An odd kc's last pair multiplies B's
// high half by A's zero, as the native kernel does (a prefix of a prepacked B may have a
// value there). The store, and the add into C, run under the caller's MXCSR, as the native
// kernel's do. About as fast as the f32 kernel: the same broadcasts and FMAs per k, B read
// at half the bytes, four integer operations per pair.
__attribute__((target("avx2,fma"), noinline)) inline void micro_bf16_avx2(
    int64_t kc, const float* a, const uint32_t* b, float* out, int64_t ld, bool add) {
  Avx2Tile t;
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  auto hi = [&](const uint32_t* w) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), high));
  };
  auto lo = [&](const uint32_t* w) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), 16));
  };
  {
    const FlushToZero ftz;
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2, a += 2 * MR, b += 16) {
      t.rank1(a, hi(b), hi(b + 8));
      t.rank1(a + MR, lo(b), lo(b + 8));
    }
    if (k < kc) {
      static const float zeros[MR] = {};
      t.rank1(zeros, hi(b), hi(b + 8));
      t.rank1(a, lo(b), lo(b + 8));
    }
  }
  t.store(out, ld, add);
}

// The emulation in AVX-512 registers: MR x 32 from two adjacent B panels (b0, b1), A's
// swapped rounded panel as micro_bf16_avx2 reads it, the same two FMAs per pair in the same
// order under flush-to-zero, so the same bits (one panel: micro_bf16_avx2 itself).
__attribute__((target("avx512f"), noinline)) inline void micro_bf16_avx512_6x32(
    int64_t kc, const float* a, const uint32_t* b0, const uint32_t* b1, float* out, int64_t ld,
    bool add) {
  Avx512Tile t;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  {
    const FlushToZero ftz;
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2, a += 2 * MR, b0 += 16, b1 += 16) {
      const __m512i w0 = _mm512_loadu_si512(b0), w1 = _mm512_loadu_si512(b1);
      t.rank1(a, _mm512_castsi512_ps(_mm512_and_si512(w0, high)),
              _mm512_castsi512_ps(_mm512_and_si512(w1, high)));
      t.rank1(a + MR, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w0, 16)),
              _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w1, 16)));
    }
    if (k < kc) {
      static const float zeros[MR] = {};
      const __m512i w0 = _mm512_loadu_si512(b0), w1 = _mm512_loadu_si512(b1);
      t.rank1(zeros, _mm512_castsi512_ps(_mm512_and_si512(w0, high)),
              _mm512_castsi512_ps(_mm512_and_si512(w1, high)));
      t.rank1(a, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w0, 16)),
              _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w1, 16)));
    }
  }
  t.store(out, ld, add);
}

// vdpbf16ps: MR x 16 (one B panel) or MR x 32 (two adjacent panels, b0 and b1).
__attribute__((target("avx512f,avx512bf16"))) inline void micro_bf16_6x16(
    int64_t kc2, const uint32_t* a, const uint32_t* b, float* out, int64_t ld, bool add) {
  __m512 c[MR];
  for (auto& x : c) x = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc2; ++p, a += MR, b += 16) {
    const __m512bh x = (__m512bh)_mm512_loadu_si512(b);
    for (int64_t i = 0; i < MR; ++i)
      c[i] = _mm512_dpbf16_ps(c[i], (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i])), x);
  }
  for (int64_t i = 0; i < MR; ++i) {
    float* o = out + i * ld;
    _mm512_storeu_ps(o, add ? _mm512_add_ps(_mm512_loadu_ps(o), c[i]) : c[i]);
  }
}

__attribute__((target("avx512f,avx512bf16"))) inline void micro_bf16_6x32(
    int64_t kc2, const uint32_t* a, const uint32_t* b0, const uint32_t* b1, float* out, int64_t ld,
    bool add) {
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
  __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
  __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
  __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc2; ++p, a += MR, b0 += 16, b1 += 16) {
    const __m512bh x0 = (__m512bh)_mm512_loadu_si512(b0), x1 = (__m512bh)_mm512_loadu_si512(b1);
    __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[0]));
    c00 = _mm512_dpbf16_ps(c00, ai, x0), c01 = _mm512_dpbf16_ps(c01, ai, x1);
    ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[1]));
    c10 = _mm512_dpbf16_ps(c10, ai, x0), c11 = _mm512_dpbf16_ps(c11, ai, x1);
    ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[2]));
    c20 = _mm512_dpbf16_ps(c20, ai, x0), c21 = _mm512_dpbf16_ps(c21, ai, x1);
    ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[3]));
    c30 = _mm512_dpbf16_ps(c30, ai, x0), c31 = _mm512_dpbf16_ps(c31, ai, x1);
    ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[4]));
    c40 = _mm512_dpbf16_ps(c40, ai, x0), c41 = _mm512_dpbf16_ps(c41, ai, x1);
    ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[5]));
    c50 = _mm512_dpbf16_ps(c50, ai, x0), c51 = _mm512_dpbf16_ps(c51, ai, x1);
  }
  const __m512 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile(c, out, ld, add);
}

// vdpbf16ps on MR x 64 (four adjacent panels, b0 .. b0 + 3 bs): 24 accumulators. On Zen 5
// vdpbf16ps needs about 16 independent sums in flight to issue two a cycle (its latency is
// longer than the f32 FMA's): 12 reach 92% of that rate, 16 and more all of it (measured,
// docs/numbers.md 2026-12-07). Each element's sum is the same chain as in the narrower
// tiles, so the same bits.
#define ATTEND_BF16_ROW(i)                                                   \
  ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));                 \
  c##i##0 = _mm512_dpbf16_ps(c##i##0, ai, x0);                              \
  c##i##1 = _mm512_dpbf16_ps(c##i##1, ai, x1);                              \
  c##i##2 = _mm512_dpbf16_ps(c##i##2, ai, x2);                              \
  c##i##3 = _mm512_dpbf16_ps(c##i##3, ai, x3)
__attribute__((target("avx512f,avx512bf16"))) inline void micro_bf16_6x64(
    int64_t kc2, const uint32_t* a, const uint32_t* b0, int64_t bs, float* out, int64_t ld,
    bool add) {
  const uint32_t *b1 = b0 + bs, *b2 = b1 + bs, *b3 = b2 + bs;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
  __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00, c40 = c00, c41 = c00, c42 = c00, c43 = c00;
  __m512 c50 = c00, c51 = c00, c52 = c00, c53 = c00;
  for (int64_t p = 0; p < kc2; ++p, a += MR) {
    const __m512bh x0 = (__m512bh)_mm512_loadu_si512(b0 + 16 * p),
                   x1 = (__m512bh)_mm512_loadu_si512(b1 + 16 * p),
                   x2 = (__m512bh)_mm512_loadu_si512(b2 + 16 * p),
                   x3 = (__m512bh)_mm512_loadu_si512(b3 + 16 * p);
    __m512bh ai;
    ATTEND_BF16_ROW(0);
    ATTEND_BF16_ROW(1);
    ATTEND_BF16_ROW(2);
    ATTEND_BF16_ROW(3);
    ATTEND_BF16_ROW(4);
    ATTEND_BF16_ROW(5);
  }
  const __m512 c[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile(c, out, ld, add);
  const __m512 d[MR][2] = {{c02, c03}, {c12, c13}, {c22, c23}, {c32, c33}, {c42, c43}, {c52, c53}};
  store_tile(d, out + 32, ld, add);
}
#undef ATTEND_BF16_ROW

// `panels` (1 to 4; more than 2 only on the native path) adjacent 6 x 16 tiles of bf16
// products from packed pair panels (B's panels `bs` elements apart), by the kernel the path
// names: AVX512_BF16's (one 6 x 64 tile for four panels, 6 x 32 for two), the AVX2
// emulation (it reads A's panel as swapped rounded rows) or the scalar one. Written to
// `out` (row stride ld), or added to it with `add`.
inline void micro_bf16_tiles(Bf16Path path, int64_t kc, const float* a_panel,
                             const float* b_panel, int64_t bs, int64_t panels, float* out,
                             int64_t ld, bool add) {
  constexpr int64_t NR = 16;
  const int64_t kc2 = (kc + 1) / 2;
  const auto* a2 = reinterpret_cast<const uint32_t*>(a_panel);
  const auto* b2 = reinterpret_cast<const uint32_t*>(b_panel);
  if (path == Bf16Path::native && panels >= 2) {
    if (panels == 4) {
      micro_bf16_6x64(kc2, a2, b2, bs, out, ld, add);
      return;
    }
    micro_bf16_6x32(kc2, a2, b2, b2 + bs, out, ld, add);
    if (panels == 3) micro_bf16_6x16(kc2, a2, b2 + 2 * bs, out + 2 * NR, ld, add);
    return;
  }
  if (path == Bf16Path::avx512 && panels == 2) {
    micro_bf16_avx512_6x32(kc, a_panel, b2, b2 + bs, out, ld, add);
    return;
  }
  for (int64_t q = 0; q < panels; ++q) {
    const auto* bq = reinterpret_cast<const uint32_t*>(b_panel + q * bs);
    if (path == Bf16Path::native) {
      micro_bf16_6x16(kc2, a2, bq, out + q * NR, ld, add);
    } else if (swapped_a(path)) {
      micro_bf16_avx2(kc, a_panel, bq, out + q * NR, ld, add);
    } else {
      micro_bf16_emulated(kc2, a2, bq, out + q * NR, ld, add);
    }
  }
}

}  // namespace attend::kernel::gemm_detail
