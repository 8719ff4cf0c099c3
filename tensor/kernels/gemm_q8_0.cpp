// The Q8_0 product (Note [The Q8_0 product], tensor/quant.h): a token's y = x W^T reading W
// in Q8_0 laid out in the order it is read (Note [Q8_0 as read]), 8.5 bits a weight,
// against x rounded to Q8_0 blocks, each block's 32 products summed as integers.
#include <immintrin.h>

#include <algorithm>
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
// blocks' values back to back, so two blocks are 64 contiguous bytes), each row padded
// with zeros to a whole pair of blocks (scales 0, values 0); and per 4 values c = -128
// times their sum, which the VNNI kernel starts its sums from (W's values come biased by
// 128: sum (q + 128) p + c = sum q p).
struct QuantizedRows {
  std::vector<float> scale;     // M * nbp
  std::vector<int8_t> value;    // M * nbp * 32
  std::vector<int32_t> corr;    // M * nbp * 8
  int64_t nb = 0, nbp = 0, K = 0;
  // fast: quantize_q8_0_fast (the same bytes); the twin keeps the plain one.
  QuantizedRows(int64_t M, int64_t K_, const float* X, int64_t ldx, bool fast)
      : nb(K_ / kQ8Block), nbp((K_ / kQ8Block + 1) / 2 * 2), K(K_) {
    scale.assign(static_cast<size_t>(M * nbp), 0.0f);
    value.assign(static_cast<size_t>(M * nbp * kQ8Block), 0);
    corr.assign(static_cast<size_t>(M * nbp * 8), 0);
    uint8_t block[kQ8BlockBytes];
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t b = 0; b < nb; ++b) {
        (fast ? quantize_q8_0_fast : quantize_q8_0)(X + m * ldx + b * kQ8Block, kQ8Block, block);
        scale[static_cast<size_t>(m * nbp + b)] = block_scale(block);
        std::memcpy(value.data() + (m * nbp + b) * kQ8Block, block + 2, kQ8Block);
      }
      const int8_t* v = row(m);
      int32_t* c = corr.data() + m * nbp * 8;
      for (int64_t i = 0; i < nb * 8; ++i)
        c[i] = -128 * (int32_t{v[4 * i]} + v[4 * i + 1] + v[4 * i + 2] + v[4 * i + 3]);
    }
  }
  const int8_t* row(int64_t m) const { return value.data() + m * nbp * kQ8Block; }
  const float* scales(int64_t m) const { return scale.data() + m * nbp; }
  const int32_t* corrections(int64_t m) const { return corr.data() + m * nbp * 8; }
};

// Rows m0.. of a QuantizedRows, as the kernels read them (row(m) is row m0 + m).
struct XRows {
  const QuantizedRows* q;
  int64_t m0, nb;
  XRows(const QuantizedRows& rows, int64_t first) : q(&rows), m0(first), nb(rows.nb) {}
  const int8_t* row(int64_t m) const { return q->row(m0 + m); }
  const float* scales(int64_t m) const { return q->scales(m0 + m); }
  const int32_t* corrections(int64_t m) const { return q->corrections(m0 + m); }
};

// Where the layout (Note [Q8_0 as read]) puts row n's blocks and scales, in bytes from W's
// start.
struct ReadLayout {
  int64_t N, K, nb, pairs;
  ReadLayout(int64_t N_, int64_t K_)
      : N(N_), K(K_), nb(K_ / kQ8Block), pairs(K_ / kQ8Block / 2) {}
  static int64_t first(int64_t n) { return n / kQ8Group * kQ8Group; }  // its group's first row
  int64_t group_rows(int64_t n) const { return std::min(kQ8Group, N - first(n)); }
  int64_t sixteen(int64_t c) const { return std::min<int64_t>(16, nb - 16 * c); }  // blocks
  // The start of sixteen c of row n's group: its scales, then its pairs, then lone blocks.
  int64_t sixteen_at(int64_t n, int64_t c) const {
    return first(n) * nb * kQ8BlockBytes + group_rows(n) * c * 16 * kQ8BlockBytes;
  }
  // Row n's scales of sixteen c.
  int64_t scales_at(int64_t n, int64_t c) const {
    return sixteen_at(n, c) + (n - first(n)) * sixteen(c) * 2;
  }
  // Row n's first pair of sixteen c; the next pair is group_rows(n) 64 bytes further.
  int64_t pairs_at(int64_t n, int64_t c) const {
    return sixteen_at(n, c) + group_rows(n) * sixteen(c) * 2 + (n - first(n)) * 64;
  }
  // Row n's lone block in sixteen c (an odd row's last block, in the last sixteen).
  int64_t lone_at(int64_t n, int64_t c) const {
    return sixteen_at(n, c) + group_rows(n) * (sixteen(c) * 2 + sixteen(c) / 2 * 64) +
           (n - first(n)) * kQ8Block;
  }
  int64_t block_at(int64_t n, int64_t b) const {  // block b's 32 values
    const int64_t c = b / 16;
    return b < 2 * pairs ? pairs_at(n, c) + (b % 16) / 2 * group_rows(n) * 64 + b % 2 * kQ8Block
                         : lone_at(n, c);
  }
  int64_t scale_at(int64_t n, int64_t b) const { return scales_at(n, b / 16) + b % 16 * 2; }
};

// W in that layout.
struct ReadRows : ReadLayout {
  const uint8_t* w;
  ReadRows(const uint8_t* w_, int64_t N_, int64_t K_) : ReadLayout(N_, K_), w(w_) {}
  const uint8_t* block(int64_t n, int64_t b) const { return w + block_at(n, b); }
  uint16_t scale(int64_t n, int64_t b) const {
    uint16_t h;
    std::memcpy(&h, w + scale_at(n, b), 2);
    return h;
  }
};

// Rows [n0, n1) of W against up to 4 rows of X, scalar: the Note's lanes spelled out.
void rows_scalar(int64_t M, int64_t n0, int64_t n1, const XRows& X, const uint8_t* W,
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
// core's Q8_0 product at a third of the f32 product's bytes per second from DRAM. With the
// values apart, 8 KB read 4-5% faster from DRAM than 4 KB and as fast as 16 KB (none 9.8,
// 2 KB 13.5, 4 KB 15.0, 8 KB 15.8, 16 KB 15.5 GB/s on one Xeon thread, medians of 15
// interleaved passes over 256 MB; docs/numbers.md). W is one stream in the order it is
// read (Note [Q8_0 as read]), so this is 8 KB of that stream ahead, scales as values.
constexpr int kPrefetch = 8192;

// A block's scale, f16 -> f32 in one instruction (exact, as half_to_float).
__attribute__((target("f16c"))) inline float scale_f16c(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return _cvtsh_ss(h);
}

// One pair of blocks (b, b + 1) of R rows of W against M rows of X, into the accumulators;
// Pair false: a lone last block (its 32 bytes only: never past the row, nor the last row).
// j: the pair's first block within its sixteen (the lanes of d16 and e16 it reads). Row r's
// values are at w + r 64 (a pair), or w + r 32 (lone blocks): the rows of a group, side by
// side (Note [Q8_0 as read]), so one address serves them all.
template <int R, int M, bool Pair>
[[gnu::always_inline]] inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void
vnni_pair(int64_t b, int j, const uint8_t* w, const __m512 (&d16)[R], const int8_t* const (&x)[M],
          const int32_t* const (&xc)[M], const __m512 (&e16)[M], __m512 (&a)[R][M]) {
  const __m512i idx = _mm512_add_epi32(
      _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), _mm512_set1_epi32(j));
  __m512i xv[M], c[M];
  __m512 ex[M];  // x's scales: lanes 0-7 block b, 8-15 block b + 1 (0 if missing)
  for (int m = 0; m < M; ++m) {
    xv[m] = _mm512_loadu_si512(x[m] + b * kQ8Block);  // padded: always a pair
    c[m] = _mm512_loadu_si512(xc[m] + b * 8);
    ex[m] = _mm512_permutexvar_ps(idx, e16[m]);
  }
  for (int r = 0; r < R; ++r) {
    const uint8_t* v = w + r * (Pair ? 64 : kQ8Block);
    _mm_prefetch(reinterpret_cast<const char*>(v) + kPrefetch, _MM_HINT_T0);
    const __m512i q = Pair ? _mm512_loadu_si512(v) : _mm512_maskz_loadu_epi8(0xffffffffull, v);
    const __m512 d = _mm512_permutexvar_ps(idx, d16[r]);
    for (int m = 0; m < M; ++m) {
      const __m512i s = _mm512_dpbusd_epi32(c[m], q, xv[m]);
      a[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, ex[m]), a[r][m]);
    }
  }
}

// AVX-512 VNNI: a pair of blocks per 64-byte register. vpdpbusd multiplies unsigned by
// signed bytes: W's values come biased (q + 128, unsigned) and x's as they are, and each
// sum starts from x's correction, so it is sum q p exactly. The scales of 16 blocks of a row
// are widened at once (one vcvtph2ps) and each pair's two spread over the lanes by a
// permute; d_c * e_c is then the same f32 product as the Note's. R rows of W at a time, each
// W block read once for all M rows of X. The rows' addresses are taken once and the lone
// last block of an odd row is its own step, so the loop over pairs has no branch and keeps
// the sums in registers (written with both inside it, GCC reloaded the rows' addresses and
// stored every sum to the stack each pair: 50 GB/s from L2 on one Zen 5 thread, 2026-12-07).
// Rows n .. n + R - 1 are in one group of the layout: their pairs are side by side, one
// address for all (with an address a row, the product from L2 ran at 43 against 79 GB/s).
template <int R, int M>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"))) void rows_vnni_r(
    int64_t n, const XRows& X, const ReadRows& W, float* Y, int64_t ldy) {
  const int64_t nb = X.nb, step = W.group_rows(n) * 64;
  const int8_t* x[M];
  const int32_t* xc[M];
  const float* xs[M];
  for (int m = 0; m < M; ++m) x[m] = X.row(m), xc[m] = X.corrections(m), xs[m] = X.scales(m);
  __m512 a[R][M];
  for (auto& r : a)
    for (auto& v : r) v = _mm512_setzero_ps();
  for (int64_t b16 = 0; b16 < nb; b16 += 16) {
    const int64_t c = b16 / 16, blocks = std::min<int64_t>(16, nb - b16);
    const __mmask16 live = static_cast<__mmask16>((1u << blocks) - 1);  // missing: 0
    __m512 d16[R], e16[M];
    const uint8_t* ws = W.w + W.scales_at(n, c);  // row n + r's at ws + r s 2
    for (int r = 0; r < R; ++r) {
      const uint8_t* wr = ws + r * blocks * 2;
      _mm_prefetch(reinterpret_cast<const char*>(wr) + kPrefetch, _MM_HINT_T0);
      d16[r] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, wr));
    }
    for (int m = 0; m < M; ++m) e16[m] = _mm512_maskz_loadu_ps(live, xs[m] + b16);
    const uint8_t* w = W.w + W.pairs_at(n, c);  // row n + r's pair at w + r 64
    int j = 0;
    for (; j + 1 < blocks; j += 2, w += step)
      vnni_pair<R, M, true>(b16 + j, j, w, d16, x, xc, e16, a);
    if (j < blocks) vnni_pair<R, M, false>(b16 + j, j, W.w + W.lone_at(n, c), d16, x, xc, e16, a);
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum16(a[r][m]);
}

// 8 rows of W at a time for one row of x (a token), 4 for two, 2 for more (the accumulators,
// scales and x's registers then fit the 32 zmm registers). A token's rows of W are where
// decoding spends its time: on a 2-core Zen 5 (2026-12-07, alternating runs of `attend
// sample --weights q8_0`) 8 rows gave GPT-2 124M 183 against 155 tokens/s at 1 thread and
// 319 against 281 at 2; stories15m's shape (V 4096) 3527 against 3669 at 1 and 3349
// against 2871 at 2.
// Rows [n0, n1) a group of the layout at a time: R rows while they fit in it, then one.
template <int R, typename One, typename Many>
void by_groups(int64_t n0, int64_t n1, const ReadLayout& W, One one, Many many) {
  for (int64_t n = n0; n < n1;) {
    const int64_t end = std::min(n1, ReadLayout::first(n) + W.group_rows(n));
    for (; n + R <= end; n += R) many(n);
    for (; n < end; ++n) one(n);
  }
}

template <int M>
void rows_vnni_m(int64_t n0, int64_t n1, const XRows& X, const ReadRows& W, float* Y,
                 int64_t ldy) {
  constexpr int R = M == 1 ? 8 : M == 2 ? 4 : 2;
  by_groups<R>(
      n0, n1, W, [&](int64_t n) { rows_vnni_r<1, M>(n, X, W, Y, ldy); },
      [&](int64_t n) { rows_vnni_r<R, M>(n, X, W, Y, ldy); });
}

void rows_vnni(int64_t M, int64_t n0, int64_t n1, const XRows& X, const ReadRows& W,
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

// Block b of R rows of W (row r's values at w + r wr, its scale at ws + r sr) against M rows
// of X, into the accumulators of its parity.
template <int R, int M>
[[gnu::always_inline]] inline __attribute__((target("avx2,fma,f16c"))) void avx2_block(
    int64_t b, const uint8_t* w, int64_t wr, const uint8_t* ws, int64_t sr,
    const int8_t* const (&x)[M], const float* const (&xs)[M], __m256 (&a)[R][M]) {
  const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i ax[M], px[M];
  for (int m = 0; m < M; ++m) {
    px[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[m] + b * kQ8Block));
    ax[m] = _mm256_sign_epi8(px[m], px[m]);
  }
  for (int r = 0; r < R; ++r) {
    const uint8_t* v = w + r * wr;
    _mm_prefetch(reinterpret_cast<const char*>(v) + kPrefetch, _MM_HINT_T0);
    const __m256i q =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)), bias);
    uint16_t h;
    std::memcpy(&h, ws + r * sr, 2);
    const float d = _cvtsh_ss(h);
    for (int m = 0; m < M; ++m) {
      const __m256i pairs = _mm256_maddubs_epi16(ax[m], _mm256_sign_epi8(q, px[m]));
      const __m256i s = _mm256_madd_epi16(pairs, ones);
      const __m256 scale = _mm256_set1_ps(d * xs[m][b]);
      a[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, a[r][m]);
    }
  }
}

// AVX2: one block per 32-byte register, W's values unbiased again (xor 0x80); vpmaddubsw
// sums byte products in pairs (|p q| <= 127 * 127, two of them fit an int16: the reason
// the bias is taken off here) and vpmaddwd by ones sums the pairs into the same int32 lanes
// of 4 products as vpdpbusd. Even blocks accumulate in a0 (the Note's lanes 0-7), odd ones
// in a1 (lanes 8-15): the loop takes a pair at a time, the rows' addresses taken once (as
// the VNNI kernel, and for the same reason: with the parity an index, the sums lived on the
// stack). R rows of W at a time.
template <int R, int M>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2_r(int64_t n, const XRows& X,
                                                          const ReadRows& W, float* Y,
                                                          int64_t ldy) {
  const int64_t nb = X.nb;
  const int8_t* x[M];
  const float* xs[M];
  for (int m = 0; m < M; ++m) x[m] = X.row(m), xs[m] = X.scales(m);
  __m256 a0[R][M], a1[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) a0[r][m] = a1[r][m] = _mm256_setzero_ps();
  const int64_t step = W.group_rows(n) * 64;
  for (int64_t b16 = 0; b16 < nb; b16 += 16) {  // as the VNNI kernel: a sixteen at a time
    const int64_t c = b16 / 16, blocks = std::min<int64_t>(16, nb - b16);
    const uint8_t* ws = W.w + W.scales_at(n, c);
    const uint8_t* w = W.w + W.pairs_at(n, c);
    int64_t j = 0;
    for (; j + 1 < blocks; j += 2, w += step) {
      avx2_block<R, M>(b16 + j, w, 64, ws + 2 * j, 2 * blocks, x, xs, a0);
      avx2_block<R, M>(b16 + j + 1, w + kQ8Block, 64, ws + 2 * j + 2, 2 * blocks, x, xs, a1);
    }
    if (j < blocks)
      avx2_block<R, M>(b16 + j, W.w + W.lone_at(n, c), kQ8Block, ws + 2 * j, 2 * blocks, x, xs, a0);
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum8x2(a0[r][m], a1[r][m]);
}

template <int M>
void rows_avx2_m(int64_t n0, int64_t n1, const XRows& X, const ReadRows& W, float* Y,
                 int64_t ldy) {
  by_groups<2>(
      n0, n1, W, [&](int64_t n) { rows_avx2_r<1, M>(n, X, W, Y, ldy); },
      [&](int64_t n) { rows_avx2_r<2, M>(n, X, W, Y, ldy); });
}

void rows_avx2(int64_t M, int64_t n0, int64_t n1, const XRows& X, const ReadRows& W,
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

// The layout's rows as blocks again, for the scalar twin on a CPU without the SIMD
// kernels (the layout is the weight's storage; the twin reads blocks).
void rows_as_read_scalar(int64_t M, int64_t n0, int64_t n1, const XRows& X,
                       const ReadRows& W, float* Y, int64_t ldy) {
  const int64_t nb = X.nb;
  std::vector<uint8_t> blocks(static_cast<size_t>(nb * kQ8BlockBytes));
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = blocks.data() + b * kQ8BlockBytes;
      const uint16_t d = W.scale(n, b);
      std::memcpy(blk, &d, 2);
      for (int64_t j = 0; j < kQ8Block; ++j) blk[2 + j] = W.block(n, b)[j] ^ 0x80u;
    }
    rows_scalar(M, 0, 1, X, blocks.data(), Y + n, ldy);
  }
}

const bool kHasF16c = __builtin_cpu_supports("f16c");
const bool kHasVnni = __builtin_cpu_supports("avx512vnni") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");

// M rows of X, each rounded to Q8_0 once; rows(mr, n0, n1, X, Y) fills rows [n0, n1) of
// Y's mr (<= 4) rows from X's. Each output is one call's, whatever M and the threads: the
// Note's arithmetic, so a row's bits do not depend on the rows beside it (a prompt's last
// row is the token's). With more than 4 rows of X, a thread's rows of W go in chunks of
// about kChunkBytes, and every 4 rows of X pass over a chunk while it is in cache (a
// prompt reads W once, not once per 4 tokens).
constexpr int64_t kChunkBytes = 16 << 10;

template <typename Rows>
void run(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, float* Y, int64_t ldy,
         bool parallel, bool fast, Rows rows) {
  if (M <= 0 || N <= 0) return;
  const QuantizedRows xq(M, K, X, ldx, fast);
  const int64_t chunk =
      M <= 4 ? N : std::max<int64_t>(kQ8Group, kChunkBytes / K / kQ8Group * kQ8Group);
  auto body = [&](int64_t n0, int64_t n1) {
    for (int64_t c0 = n0; c0 < n1; c0 += chunk) {
      const int64_t c1 = std::min(n1, c0 + chunk);
      for (int64_t m0 = 0; m0 < M; m0 += 4)
        rows(std::min<int64_t>(4, M - m0), c0, c1, XRows(xq, m0), Y + m0 * ldy);
    }
  };
  // Threads when a product reads enough of W to pay for them: ~64 K weights per thread,
  // whole groups of the layout each (so each thread's rows are one stream).
  if (parallel && N * K >= (1 << 17)) {
    const int64_t groups = (N + kQ8Group - 1) / kQ8Group;
    parallel_for(groups, std::max<int64_t>(2, (int64_t{1} << 16) / K / kQ8Group),
                 [&](int64_t g0, int64_t g1) {
                   body(g0 * kQ8Group, std::min(N, g1 * kQ8Group));
                 });
  } else {
    body(0, N);
  }
}

}  // namespace

int64_t q8_0_as_read_bytes(int64_t N, int64_t K) { return N * K / kQ8Block * kQ8BlockBytes; }

void q8_0_as_read(const uint8_t* blocks, int64_t N, int64_t K, uint8_t* out) {
  const ReadLayout at(N, K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < at.nb; ++b) {
      const uint8_t* blk = blocks + (n * at.nb + b) * kQ8BlockBytes;
      std::memcpy(out + at.scale_at(n, b), blk, 2);
      uint8_t* v = out + at.block_at(n, b);
      for (int64_t j = 0; j < kQ8Block; ++j) v[j] = blk[2 + j] ^ 0x80u;
    }
}

namespace {

// Rows [n0, n1) of the layout into f32: d * q, one product each (as dequantize_q8_0).
void dequantize_rows_scalar(const ReadRows& W, int64_t n0, int64_t n1, float* out) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t b = 0; b < W.nb; ++b) {
      const float d = half_to_float(W.scale(n, b));
      const uint8_t* v = W.block(n, b);
      for (int64_t j = 0; j < kQ8Block; ++j)
        out[n * W.K + b * kQ8Block + j] =
            d * static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(v[j] ^ 0x80u)));
    }
}

__attribute__((target("avx2,f16c"))) void dequantize_rows_avx2(const ReadRows& W, int64_t n0,
                                                               int64_t n1, float* out) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t b = 0; b < W.nb; ++b) {
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(W.scale(n, b)));
      const __m256i q = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(W.block(n, b))), bias);
      float* o = out + n * W.K + b * kQ8Block;
      for (int i = 0; i < 4; ++i) {
        const __m128i q8 = i < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
        const __m128i part = (i % 2) ? _mm_srli_si128(q8, 8) : q8;
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
        _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(d, f));
      }
    }
}

}  // namespace

void dequantize_q8_0_as_read(const uint8_t* laid, int64_t N, int64_t K, float* out) {
  const ReadRows W(laid, N, K);
  const bool avx2 = kHasF16c && kernel::gemm_kernel() != kernel::GemmKernel::portable;
  // threads split the rows (each output written once, so any count gives the same values)
  parallel_for(N, std::max<int64_t>(1, (int64_t{1} << 16) / K), [&](int64_t n0, int64_t n1) {
    (avx2 ? dequantize_rows_avx2 : dequantize_rows_scalar)(W, n0, n1, out);
  });
}

void gemm_q8_0_reference(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
                         const uint8_t* W, float* Y, int64_t ldy) {
  run(M, N, K, X, ldx, Y, ldy, false, false,
      [&](int64_t mr, int64_t n0, int64_t n1, const XRows& xq, float* y) {
        rows_scalar(mr, n0, n1, xq, W, y, ldy);
      });
}

void gemm_q8_0(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
               float* Y, int64_t ldy, bool parallel) {
  const kernel::GemmKernel k = kernel::gemm_kernel();
  const ReadRows w(W, N, K);
  // The SIMD kernels read scales with F16C (every AVX2 CPU made has it; else the twin runs);
  // an AVX-512 CPU without VNNI runs the AVX2 kernel (the same bits).
  using Fn = void (*)(int64_t, int64_t, int64_t, const XRows&, const ReadRows&, float*,
                      int64_t);
  const Fn rows = !kHasF16c                                    ? rows_as_read_scalar
                  : k == kernel::GemmKernel::avx512 && kHasVnni ? rows_vnni
                  : k != kernel::GemmKernel::portable           ? rows_avx2
                                                                : rows_as_read_scalar;
  run(M, N, K, X, ldx, Y, ldy, parallel, rows != rows_as_read_scalar,
      [&](int64_t mr, int64_t n0, int64_t n1, const XRows& xq, float* y) {
        rows(mr, n0, n1, xq, w, y, ldy);
      });
}

}  // namespace attend::quant
