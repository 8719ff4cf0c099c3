#include "tensor/kernels/kept_operand.h"

#include <atomic>

#include "tensor/kernels.h"

namespace attend::kernel {

namespace {
std::atomic<bool> g_compact{true};
}  // namespace

bool compact_saves() { return g_compact.load(std::memory_order_relaxed); }
bool set_compact_saves(bool on) { return g_compact.exchange(on); }

bool KeptOperand::compacts(const Tensor& t) {
  return compact_saves() && t.dtype() == DType::F32 && gemm_precision() == GemmPrecision::bf16;
}

Tensor KeptOperand::matmul_wt_keeping(const Tensor& x, const Tensor& w, KeptOperand& kept) {
  ATTEND_INTERNAL_CHECK(compacts(x) && w.dim() == 2 && w.dtype() == DType::F32 &&
                            w.is_contiguous() && x.dim() >= 1 && x.size(-1) == w.size(1),
                        "KeptOperand::matmul_wt_keeping: not an f32 input kept as bf16, or not "
                        "an (out, in) contiguous f32 weight");
  const Tensor xc = contiguous(x);
  const int64_t in = w.size(1), outs = w.size(0), M = xc.numel() / std::max<int64_t>(in, 1);
  Shape shape = x.shape();
  shape.back() = outs;
  Tensor out = empty(shape, DType::F32);
  kept = KeptOperand();
  kept.precision_ = GemmPrecision::bf16;
  kept.shape_ = x.shape();
  kept.half_ = std::make_shared<Storage>(static_cast<size_t>(xc.numel()) * 2);
  gemm_bf16_keep_a(M, outs, in, {xc.data<float>(), in, 1}, {w.data<float>(), 1, in},
                   out.data<float>(), outs, static_cast<uint16_t*>(kept.half_->data));
  return out;
}

KeptOperand::KeptOperand(const Tensor& t) : precision_(gemm_precision()) {
  if (!compacts(t)) {
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
