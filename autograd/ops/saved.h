// A tensor an op keeps for its backward when backward reads it only as an operand of matrix
// products: Linear's input (dW = dY^T X), attention's q, k, v (every use in
// kernel::attention_backward is a GEMM operand). Under bf16 products
// (kernel::gemm_precision() == bf16 when the op runs), an f32 tensor is kept as its bf16
// values: half the bytes, and the same gradients bit for bit, since the GEMM rounds its
// operands to bf16 as it packs them and rounding a bf16 value gives it back (tests:
// tests/autograd/test_saved_bf16.cpp). Backward must run under the same precision as the
// forward did (the trainer sets it once). Internal to autograd's ops.
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/tensor.h"

namespace attend::autograd::detail {

// On by default; the tests turn it off to compare gradients both ways. Returns the previous
// setting. Process-wide.
bool compact_saves();
bool set_compact_saves(bool on);

class SavedOperand {
 public:
  SavedOperand() = default;
  // Keeps t as is, or (bf16 products, f32, compact saves on) its bf16 values.
  explicit SavedOperand(const Tensor& t);
  // The tensor (contiguous when it was kept as bf16: a fresh f32 copy of the rounded values).
  Tensor get() const;
  // Kept as bf16 only: rows [r0, r1) of the tensor seen as (rows, last dim), as a fresh
  // contiguous f32 tensor (r1 - r0, last dim): backward can widen it a block at a time.
  Tensor rows(int64_t r0, int64_t r1) const;
  int64_t num_rows() const;
  bool compact() const { return half_ != nullptr; }

 private:
  Tensor full_;
  std::shared_ptr<Storage> half_;
  Shape shape_;
};

}  // namespace attend::autograd::detail
