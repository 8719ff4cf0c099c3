// Q8_0: weights in blocks of 32, each block one IEEE-half scale d and 32 signed bytes q,
// the value of weight j being d * q[j]. 34 bytes per 32 weights (8.5 bits a weight): the
// layout of llama.cpp's block_q8_0 and llama2.c's runq.c, so a GGUF Q8_0 tensor is these
// blocks, row after row, and the decoder can read them where they lie.
//
// Quantizing a block of x (the reference rounding, llama.cpp's quantize_row_q8_0_ref,
// step for step in f32 so the bytes agree exactly):
//   amax = max_j |x_j|;   d = amax / 127;   id = d != 0 ? 1 / d : 0
//   q_j  = round_half_away_from_zero(x_j * id)   (|q_j| <= 127)
//   the stored scale is half(d), rounded to nearest, ties to even.
// The scale used by the products and by dequantizing is the stored (rounded) one, so
// dequantize(quantize(x)) is what every reader of the block computes. A row's length must
// be a multiple of 32 (callers check, naming the tensor); x must be finite (callers refuse
// NaN and infinity, naming the tensor).
#pragma once

#include <cstddef>
#include <cstdint>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::quant {

inline constexpr int64_t kQ8Block = 32;       // weights per block
inline constexpr int64_t kQ8BlockBytes = 34;  // 2 (half scale) + 32 (int8)

// n weights (n % 32 == 0) into n / 32 blocks at out (n / 32 * 34 bytes).
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
// The same bytes, 8 lanes at a time where the CPU has AVX2 (tested against quantize_q8_0
// for every rounding case: ties, zero blocks, subnormal scales); a block holding a value
// that is not finite, or whose 1 / d overflows, goes through quantize_q8_0 itself. Decoding rounds each token's
// x with it before every Q8_0 product, on one thread while the others wait.
void quantize_q8_0_fast(const float* x, int64_t n, uint8_t* out);
// n / 32 blocks back into n floats: half(d) * q.
void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* out);
// x replaced by dequantize(quantize(x)): the values the Q8_0 product multiplies W by.
void round_to_q8_0(float* x, int64_t n);

// Note [Q8_0 as read]: the layout the Q8_0 product reads W (N, K) in (StoredWeight's q8_0),
// the same 34 bytes a block as the blocks: the values stored as q XOR 0x80 (q + 128 as an
// unsigned byte: the unsigned operand AVX-512 VNNI's vpdpbusd takes), a pair of blocks'
// values together (one 64-byte load; two 34-byte blocks hold their scales between their
// values), and 16 scales of a row together (widened in one instruction), all in the order
// a token's product reads them, so that it reads W as one sequential stream:
//   groups of kQ8Group rows, one after the other (the last holds the N % 8 left; g rows);
//   in a group, its rows' blocks by sixteens (the c-th: blocks 16 c .., s = min(16,
//   K / 32 - 16 c) of them), one after the other, each g s 34 bytes;
//   in a sixteen: the scales (halves), row after row (s each); then its pairs of blocks,
//   pair by pair, row after row (pair p of row r at (p g + r) 64); then, if s is odd (the
//   last sixteen of an odd row), the rows' lone last blocks (32 bytes each).
// The layout before (2026-12-06: all values row after row, then all scales) had the
// kernel's eight rows read K bytes apart and the scales as a second stream: one Zen 5
// thread read K 3072 at 13 GB/s from DRAM where a plain read reaches 29 (docs/numbers.md,
// 2026-12-07 12:38-14:54).
inline constexpr int64_t kQ8Group = 8;
int64_t q8_0_as_read_bytes(int64_t N, int64_t K);
// W's blocks (N rows of K / 32 blocks) -> that layout at out (q8_0_as_read_bytes).
void q8_0_as_read(const uint8_t* blocks, int64_t N, int64_t K, uint8_t* out);
// That layout back into N K floats: half(d) * q.
void dequantize_q8_0_as_read(const uint8_t* laid, int64_t N, int64_t K, float* out);

// Note [The Q8_0 product]: Y (M, N) = X (M, K) W^T for W (N, K) stored as Q8_0 (K / 32
// blocks a row; gemm_q8_0 reads them as laid out in Note [Q8_0 as read], the twin as blocks),
// X f32 (rows contiguous, row stride ldx), Y row stride ldy.
// X is rounded to Q8_0 blocks too (quantize_q8_0: a half scale e_b and 32 int8 values p per
// block of a row), as llama.cpp's Q8_0 product does, so each block's 32 products are exact
// integers: int8 dot products (AVX-512 VNNI's vpdpbusd, AVX2's vpmaddubsw + vpmaddwd) in
// place of widening every weight to f32. Per output, in this order and nothing else:
//   a_l = 0 for 16 lanes l;
//   for each pair of blocks (b, b + 1) (a last odd block pairs with nothing):
//     lane l reads block c = b + l / 8 at positions j = 4 (l % 8) .. 4 (l % 8) + 3:
//       s_l = sum_j q_c[j] p_c[j]           (an int32, exact)
//       a_l = fma(float(s_l), d_c * e_c, a_l)   (d_c * e_c rounded to f32 first)
//     (lanes of the missing block of an odd tail are left as they are)
//   y = a summed as a tree: a_l += a_{l+8}, then a_l += a_{l+4}, a_l += a_{l+2}, a_l += a_{l+1}
// The AVX-512 VNNI kernel (one 16-lane register per pair of blocks), the AVX2 kernel (two
// 8-lane registers, even and odd blocks) and the scalar twin give the same bits (tested),
// and so do any thread counts: each output is one thread's, rows of W split in contiguous
// ranges. `parallel` false keeps it on this thread. The result is the product of the
// dequantized W and the dequantized Q8_0 rounding of X, up to f32 rounding of the sum.
// An output's bits do not depend on M or on the other rows of X (a prompt's last row gets
// what the token alone gets): past 4 rows of X, W's rows go in cache-sized chunks, each
// passed over by every 4 rows of X, the arithmetic per output unchanged.
// W: Note [Q8_0 as read]'s layout (q8_0_as_read of the blocks).
void gemm_q8_0(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
               float* Y, int64_t ldy, bool parallel);
// The scalar twin: the same arithmetic, plainly, on W's blocks as they are (the oracle of
// the tests).
// (Both take X in f32 and round it themselves.)
void gemm_q8_0_reference(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
                         const uint8_t* W, float* Y, int64_t ldy);

}  // namespace attend::quant
#pragma GCC visibility pop
