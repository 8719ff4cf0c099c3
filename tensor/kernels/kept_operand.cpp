#include "tensor/kernels/kept_operand.h"

#include <atomic>

#include "tensor/kernels.h"

namespace attend::kernel {

namespace {
std::atomic<bool> g_compact{true};
}  // namespace

bool compact_saves() { return g_compact.load(std::memory_order_relaxed); }
bool set_compact_saves(bool on) { return g_compact.exchange(on); }

KeptOperand::KeptOperand(const Tensor& t) : precision_(gemm_precision()) {
  if (!compact_saves() || t.dtype() != DType::F32 || precision_ != GemmPrecision::bf16) {
    full_ = t.detach();
    return;
  }
  const Tensor c = contiguous(t);
  shape_ = t.shape();
  half_ = std::make_shared<Storage>(static_cast<size_t>(c.numel()) * 2);
  to_bf16_bits(c.data<float>(), static_cast<uint16_t*>(half_->data), c.numel());
}

void KeptOperand::check_precision() const {
  const GemmPrecision now = gemm_precision();
  ATTEND_INTERNAL_CHECK(now == precision_, "a tensor kept for backward under ",
                        gemm_precision_name(precision_), " products is read under ",
                        gemm_precision_name(now),
                        " products: a backward must run under its forward's precision");
}

Tensor KeptOperand::get() const {
  check_precision();
  if (!half_) return full_;
  Tensor out = empty(shape_, DType::F32);
  from_bf16_bits(static_cast<const uint16_t*>(half_->data), out.data<float>(), out.numel());
  return out;
}

int64_t KeptOperand::num_rows() const {
  ATTEND_INTERNAL_CHECK(half_ && !shape_.empty(), "KeptOperand::num_rows: not kept as bf16");
  return shape_.back() == 0 ? 0 : numel(shape_) / shape_.back();
}

const uint16_t* KeptOperand::bits() const {
  check_precision();
  ATTEND_INTERNAL_CHECK(half_ != nullptr, "KeptOperand::bits: not kept as bf16");
  return static_cast<const uint16_t*>(half_->data);
}

}  // namespace attend::kernel
