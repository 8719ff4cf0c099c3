#include "tensor/stored_weight.h"

#include <algorithm>

#include "tensor/error.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"

namespace attend {

const char* weight_format_name(WeightFormat f) { return f == WeightFormat::bf16 ? "bf16" : "f32"; }

namespace {

// W^T's bf16 bits, (in, out) row-major, made 64 rows of W^T at a time.
std::shared_ptr<const Storage> transposed_bf16(const Tensor& w) {
  const int64_t outs = w.size(0), in = w.size(1);
  auto bits = std::make_shared<Storage>(static_cast<size_t>(outs * in) * 2);
  auto* dst = static_cast<uint16_t*>(bits->data);
  for (int64_t i0 = 0; i0 < in; i0 += 64) {
    const int64_t n = std::min<int64_t>(64, in - i0);
    const Tensor rows = kernel::contiguous(kernel::transpose(kernel::narrow(w, 1, i0, n), 0, 1));
    kernel::to_bf16_bits(rows.data<float>(), dst + i0 * outs, rows.numel());
  }
  return bits;
}

}  // namespace

StoredWeight::StoredWeight(const Tensor& w, WeightFormat format) : format_(format) {
  ATTEND_CHECK(w.dim() == 2, "StoredWeight: expected a weight (out, in), got ",
               shape_str(w.shape()));
  out_ = w.size(0), in_ = w.size(1);
  if (format == WeightFormat::bf16) {
    ATTEND_CHECK(w.dtype() == DType::F32, "StoredWeight: bf16 from an f32 weight only, got ",
                 dtype_name(w.dtype()));
    bf16_bits_ = transposed_bf16(w);
  } else {
    f32_t_ = kernel::contiguous(kernel::transpose(w, 0, 1));
  }
}

WeightFormat StoredWeight::format_for_products() {
  return kernel::gemm_precision() == kernel::GemmPrecision::bf16 ? WeightFormat::bf16
                                                                 : WeightFormat::f32;
}

int64_t StoredWeight::bytes_for(const Tensor& w, WeightFormat format) {
  return w.numel() * (format == WeightFormat::bf16 ? 2 : static_cast<int64_t>(dtype_size(w.dtype())));
}

Tensor StoredWeight::multiply(const Tensor& x) const {
  ATTEND_CHECK(x.dim() >= 1 && x.size(-1) == in_, "StoredWeight: expected input (..., ", in_,
               "), got ", shape_str(x.shape()));
  if (format_ == WeightFormat::f32) return kernel::matmul(x, f32_t_);
  const int64_t rows = x.numel() / in_;
  if (x.dtype() != DType::F32 || kernel::gemm_precision() != kernel::GemmPrecision::bf16 ||
      !kernel::gemm_bf16_weight_applies(rows, out_, in_))
    return Tensor();
  const Tensor xc = kernel::contiguous(x);
  Shape shape = x.shape();
  shape.back() = out_;
  Tensor out = empty(shape, DType::F32);
  kernel::gemm_bf16_weight(rows, out_, in_, {xc.data<float>(), in_, 1},
                           static_cast<const uint16_t*>(bf16_bits_->data), out_,
                           out.data<float>(), out_, true);
  return out;
}

}  // namespace attend
