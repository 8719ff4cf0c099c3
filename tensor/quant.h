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
// be a multiple of 32 (callers check, naming the tensor).
#pragma once

#include <cstddef>
#include <cstdint>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::quant {

inline constexpr int64_t kQ8Block = 32;        // weights per block
inline constexpr int64_t kQ8BlockBytes = 34;  // 2 (half scale) + 32 (int8)

// n weights (n % 32 == 0) into n / 32 blocks at out (n / 32 * 34 bytes).
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
// n / 32 blocks back into n floats: half(d) * q.
void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* out);

}  // namespace attend::quant
#pragma GCC visibility pop
