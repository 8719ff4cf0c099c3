// A weight in a storage format: a Linear's W (out, in) kept for products y = x W^T in the
// layout and number format that reading it for a few rows of x (decoding a token at a time,
// a memory-bound product) wants: W^T in column panels (kernel::kDecodePanel outputs each,
// every panel contiguous, so threads split the weight into contiguous bytes), as
//   f32   the weight's own values (the products give linear's bits: every sum runs in the
//         same order either way);
//   bf16  bf16 bits (to_bf16_bits of W^T) in pair words, k and k+1 of a column in one 32-bit
//         word (the blocked GEMM's packed layout): half the bytes, read by vdpbf16ps where
//         the CPU has it, else split into f32 by shifts (kernel::gemm_bf16_panels); the bits
//         bf16 products give on W.
//         Made and used under bf16 products only (Note [Precision is scoped] in
//         kernels/gemm.h).
// More rows of x than the few-rows kernels take (a prompt) multiply by W itself.
//   q8_0  W itself (not transposed) as Q8_0 blocks along each row (tensor/quant.h), laid
//         out in the order the product reads them (Note [Q8_0 as read]): 8.5 bits
//         a weight, a quarter of f32's bytes; a few rows of x through the Q8_0 product (Note
//         [The Q8_0 product]), more rows (a prompt, an evaluation's window) through the
//         blocked GEMM on W dequantized for that product. The weights' values change (each
//         rounded to its block's grid): it is a choice (sample and eval's --weights), never
//         a default. W's rows must be a multiple of 32 long.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

enum class WeightFormat { f32, bf16, q8_0 };
const char* weight_format_name(WeightFormat f);
// f32, bf16 or q8_0; throws naming `what` (a flag) and the word otherwise.
WeightFormat parse_weight_format(const std::string& word, const std::string& what);

class StoredWeight {
 public:
  // W (out, in) in `format`; bf16 and q8_0 need an f32 W (q8_0: finite, in % 32 == 0, else
  // an error naming the values). Made 64 rows of W^T at a time, so bf16 needs a few MB
  // between, not a whole f32 copy.
  StoredWeight(const Tensor& w, WeightFormat format);
  // The format products made now read fastest: bf16 under bf16 products, else f32.
  static WeightFormat format_for_products();
  // The bytes a W of this shape takes in `format`.
  static int64_t bytes_for(const Tensor& w, WeightFormat format);

  WeightFormat format() const { return format_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // x (..., in) -> x W^T (..., out); an undefined tensor when this format does not take this
  // x here (more than a few rows, x not f32, the products' precision not this format's; the
  // kernels' limits are kernel::gemm_panels_apply): then multiply by W itself, same bits.
  // q8_0 takes every f32 x.
  Tensor multiply(const Tensor& x) const;
  // One row x (in) -> y (out) = x W^T, written into y: what multiply gives a (1, in) x, the
  // same bits; false (y untouched) where multiply would return an undefined tensor.
  bool multiply_row(const float* x, float* y) const;

 private:
  Tensor multiply_q8_0(const Tensor& x) const;
  WeightFormat format_;
  int64_t in_ = 0, out_ = 0;
  std::shared_ptr<const Storage> f32_panels_;  // f32: W^T's panels
  std::shared_ptr<const Storage> bf16_bits_;   // bf16: W^T's panels as bf16 bits
  std::shared_ptr<const Storage> q8_blocks_;  // q8_0: W's blocks as read (Note [Q8_0 as read])
};

}  // namespace attend
#pragma GCC visibility pop
