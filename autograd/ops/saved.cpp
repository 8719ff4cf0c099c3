#include "autograd/ops/saved.h"

#include <atomic>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"

namespace attend::autograd::detail {

namespace {
std::atomic<bool> g_compact{true};
}  // namespace

bool compact_saves() { return g_compact.load(std::memory_order_relaxed); }
bool set_compact_saves(bool on) { return g_compact.exchange(on); }

SavedOperand::SavedOperand(const Tensor& t) {
  if (!compact_saves() || t.dtype() != DType::F32 ||
      kernel::gemm_precision() != kernel::GemmPrecision::bf16) {
    full_ = t.detach();
    return;
  }
  const Tensor c = kernel::contiguous(t);
  shape_ = t.shape();
  half_ = std::make_shared<Storage>(static_cast<size_t>(c.numel()) * 2);
  kernel::to_bf16_bits(c.data<float>(), static_cast<uint16_t*>(half_->data), c.numel());
}

Tensor SavedOperand::get() const {
  if (!half_) return full_;
  Tensor out = empty(shape_, DType::F32);
  kernel::from_bf16_bits(static_cast<const uint16_t*>(half_->data), out.data<float>(), out.numel());
  return out;
}

int64_t SavedOperand::num_rows() const {
  ATTEND_INTERNAL_CHECK(half_ && !shape_.empty(), "SavedOperand::num_rows: not kept as bf16");
  return shape_.back() == 0 ? 0 : numel(shape_) / shape_.back();
}

Tensor SavedOperand::rows(int64_t r0, int64_t r1) const {
  ATTEND_INTERNAL_CHECK(half_ && !shape_.empty() && 0 <= r0 && r0 <= r1 && r1 <= num_rows(),
                        "SavedOperand::rows: rows [", r0, ", ", r1, ") of ", num_rows());
  const int64_t width = shape_.back();
  Tensor out = empty({r1 - r0, width}, DType::F32);
  kernel::from_bf16_bits(static_cast<const uint16_t*>(half_->data) + r0 * width,
                         out.data<float>(), out.numel());
  return out;
}

}  // namespace attend::autograd::detail
