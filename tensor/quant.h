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

// Note [Q8_0 rows apart]: the layout the Q8_0 product reads W (N, K) in (StoredWeight's
// q8_0): first the N K values, each stored as q XOR 0x80 (q + 128 as an unsigned byte: the
// unsigned operand AVX-512 VNNI's vpdpbusd takes), then the N K / 32 scales, half bits.
// The same numbers as the blocks in the same bytes (34 a block): a pair of blocks' values
// is one 64-byte load (two 34-byte blocks hold their scales between their values), and 16
// scales widen in one instruction. Both parts go by groups of kQ8Group rows (the last
// group holds the N % 8 left, g rows), in the order the kernel reads them, so that a token's
// product reads W as two sequential streams:
//   values: group after group (g K bytes each); in a group, pair p of row r (64 bytes) at
//     (p g + r) 64, and an odd row's lone last block (32 bytes) after every pair, at
//     (K / 64) g 64 + r 32;
//   scales: group after group (g K / 32 halves each); in a group, by sixteens of blocks:
//     the c-th sixteen of row r (s = min(16, K / 32 - 16 c) halves) at c 16 g + r s.
// Eight rows of W read rows apart (K bytes between the kernel's eight streams) reached
// 13-19 GB/s from DRAM on one Zen 5 thread where a plain read reaches 29-34: the
// hardware prefetcher follows one stream, not eight (docs/numbers.md, 2026-12-07 13:00).
inline constexpr int64_t kQ8Group = 8;
int64_t q8_0_split_bytes(int64_t N, int64_t K);
// W's blocks (N rows of K / 32 blocks) -> the split layout at out (q8_0_split_bytes).
void q8_0_split(const uint8_t* blocks, int64_t N, int64_t K, uint8_t* out);
// The split layout back into N K floats: half(d) * q.
void dequantize_q8_0_split(const uint8_t* split, int64_t N, int64_t K, float* out);

// Note [The Q8_0 product]: Y (M, N) = X (M, K) W^T for W (N, K) stored as Q8_0 (K / 32
// blocks a row; gemm_q8_0 reads them split, Note [Q8_0 rows apart], the twin as blocks),
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
// W: the split layout (q8_0_split of the blocks).
void gemm_q8_0(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx, const uint8_t* W,
               float* Y, int64_t ldy, bool parallel);
// The scalar twin: the same arithmetic, plainly, on W's blocks as they are (the oracle of
// the tests).
// (Both take X in f32 and round it themselves.)
void gemm_q8_0_reference(int64_t M, int64_t N, int64_t K, const float* X, int64_t ldx,
                         const uint8_t* W, float* Y, int64_t ldy);

}  // namespace attend::quant
#pragma GCC visibility pop
