// A tensor kept for a later matrix product: what an autograd op saves for its backward when
// backward reads it only as a GEMM operand (Linear's input for dW = dY^T X; attention's q, k,
// v, every use of which in kernel::attention_backward is a GEMM operand). Under bf16 products
// (when the op runs), an f32 tensor is kept as its bf16 values: half the bytes, and the same
// gradients bit for bit, since the GEMM rounds its operands to bf16 as it packs them and
// rounding a bf16 value gives it back (tests: tests/nn/test_bf16_saves.cpp).
//
// It records the precision it was kept under, and reading it under another precision is an
// internal error (exit 2) naming both: a backward must run under its forward's precision
// (see Note [Precision is scoped] in gemm.h), or its bits would be neither run's.
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/kernels/gemm.h"
#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // autograd's ops use it (a shared build exports it)
namespace attend::kernel {

// On by default; the tests turn it off to compare gradients both ways. Returns the previous
// setting. Process-wide.
bool compact_saves();
bool set_compact_saves(bool on);

class KeptOperand {
 public:
  KeptOperand() = default;
  // Keeps t as is, or (bf16 products, f32, compact saves on) its bf16 values.
  explicit KeptOperand(const Tensor& t);
  // Whether KeptOperand(t) would keep t as bf16 now.
  static bool compacts(const Tensor& t);
  // y = x w^T (kernel::matmul(x, w^T)'s bits), w (out, in) contiguous f32, where
  // compacts(x): x's bf16 bits are written into `kept` as the product packs x (one pass over
  // x, kernel::gemm_bf16_keep_a), the same bits KeptOperand(x) keeps.
  static Tensor matmul_wt_keeping(const Tensor& x, const Tensor& w, KeptOperand& kept);
  // The tensor (contiguous when it was kept as bf16: a fresh f32 copy of the rounded values).
  Tensor get() const;
  // Kept as bf16 only: the bf16 bits, row-major (num_rows(), last dim), for products that
  // read them as they are (kernel::gemm_bf16_bits_b): backward never widens them.
  const uint16_t* bits() const;
  int64_t num_rows() const;
  bool compact() const { return half_ != nullptr; }
  GemmPrecision precision() const { return precision_; }

 private:
  void check_precision() const;
  Tensor full_;
  std::shared_ptr<Storage> half_;
  Shape shape_;
  GemmPrecision precision_ = GemmPrecision::f32;
};

}  // namespace attend::kernel
#pragma GCC visibility pop
