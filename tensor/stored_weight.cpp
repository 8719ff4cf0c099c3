#include "tensor/stored_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/error.h"
#include "tensor/util.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/quant.h"

namespace attend {

const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::bf16 ? "bf16" : f == WeightFormat::q8_0 ? "q8_0" : "f32";
}

WeightFormat parse_weight_format(const std::string& w, const std::string& what) {
  if (w == "f32") return WeightFormat::f32;
  if (w == "bf16") return WeightFormat::bf16;
  if (w == "q8_0") return WeightFormat::q8_0;
  throw Error(str(what, ": expected f32, bf16 or q8_0, got '", w, "'"));
}

namespace {

// W^T's panels (kernel::to_decode_panels): f32 values, or bf16 pair words, made a panel's
// rows of W at a time (a contiguous copy of those rows: 1 MB at most for K = 1024).
template <typename T>
std::shared_ptr<const Storage> decode_panels(const Tensor& w) {
  const int64_t outs = w.size(0), in = w.size(1);
  constexpr bool f32 = std::is_same_v<T, float>;
  const int64_t depth = f32 ? in : (in + 1) / 2;  // elements of a column
  auto out = std::make_shared<Storage>(static_cast<size_t>(outs * depth) * sizeof(T));
  auto* dst = static_cast<T*>(out->data);
  for (int64_t n0 = 0; n0 < outs; n0 += kernel::kDecodePanel) {
    const int64_t n = std::min(kernel::kDecodePanel, outs - n0);
    const Tensor rows = kernel::contiguous(kernel::narrow(w, 0, n0, n));
    if constexpr (f32)
      kernel::to_decode_panels(rows.data<float>(), n, in, dst + n0 * depth);
    else
      kernel::to_decode_panels_bf16(rows.data<float>(), n, in, dst + n0 * depth);
  }
  return out;
}

// W's rows as Q8_0 in the layout the product reads (Note [Q8_0 as read]), 64 rows at a
// time: whole groups of it, so each part's bytes are the whole's, in place.
std::shared_ptr<const Storage> q8_rows(const Tensor& w) {
  const int64_t outs = w.size(0), in = w.size(1), row_bytes = in / quant::kQ8Block * quant::kQ8BlockBytes;
  auto laid = std::make_shared<Storage>(static_cast<size_t>(quant::q8_0_as_read_bytes(outs, in)));
  auto* dst = static_cast<uint8_t*>(laid->data);
  std::vector<uint8_t> blocks(static_cast<size_t>(64 * row_bytes));
  static_assert(64 % quant::kQ8Group == 0, "a part is whole groups");
  for (int64_t r0 = 0; r0 < outs; r0 += 64) {
    const int64_t n = std::min<int64_t>(64, outs - r0);
    const Tensor rows = kernel::contiguous(kernel::narrow(w, 0, r0, n));
    const float* x = rows.data<float>();
    const int64_t count = rows.numel();
    if (!all_finite(x, count))  // then find the first, to name it
      for (int64_t i = 0; i < count; ++i)
        ATTEND_CHECK(std::isfinite(x[i]), "q8_0: the weight (", outs, ", ", in, ") holds ", x[i],
                     " at row ", r0 + i / in, "; only finite values quantize");
    quant::quantize_q8_0_fast(x, count, blocks.data());
    quant::q8_0_as_read(blocks.data(), n, in, dst + r0 * row_bytes);
  }
  return laid;
}

}  // namespace

StoredWeight::StoredWeight(const Tensor& w, WeightFormat format) : format_(format) {
  ATTEND_CHECK(w.dim() == 2, "StoredWeight: expected a weight (out, in), got ",
               shape_str(w.shape()));
  out_ = w.size(0), in_ = w.size(1);
  if (format == WeightFormat::q8_0) {
    ATTEND_CHECK(w.dtype() == DType::F32 && in_ % quant::kQ8Block == 0,
                 "StoredWeight: q8_0 needs an f32 weight with rows a multiple of 32 long, got ",
                 dtype_name(w.dtype()), " ", shape_str(w.shape()));
    q8_blocks_ = q8_rows(w);
  } else if (format == WeightFormat::bf16) {
    ATTEND_CHECK(w.dtype() == DType::F32, "StoredWeight: bf16 from an f32 weight only, got ",
                 dtype_name(w.dtype()));
    bf16_bits_ = decode_panels<uint32_t>(w);
  } else {
    ATTEND_CHECK(w.dtype() == DType::F32, "StoredWeight: f32 from an f32 weight only, got ",
                 dtype_name(w.dtype()));
    f32_panels_ = decode_panels<float>(w);
  }
}

WeightFormat StoredWeight::format_for_products() {
  return kernel::gemm_precision() == kernel::GemmPrecision::bf16 ? WeightFormat::bf16
                                                                 : WeightFormat::f32;
}

int64_t StoredWeight::bytes_for(const Tensor& w, WeightFormat format) {
  if (format == WeightFormat::q8_0) return w.numel() / quant::kQ8Block * quant::kQ8BlockBytes;
  if (format == WeightFormat::bf16)  // pair words: an odd row length ends in a zero half
    return w.size(0) * ((w.size(1) + 1) / 2) * 4;
  return w.numel() * static_cast<int64_t>(dtype_size(w.dtype()));
}

Tensor StoredWeight::multiply(const Tensor& x) const {
  ATTEND_CHECK(x.dim() >= 1 && x.size(-1) == in_, "StoredWeight: expected input (..., ", in_,
               "), got ", shape_str(x.shape()));
  if (format_ == WeightFormat::q8_0) return multiply_q8_0(x);
  const int64_t rows = x.numel() / in_;
  const bool bf16 = format_ == WeightFormat::bf16;
  if (x.dtype() != DType::F32 || !kernel::gemm_panels_apply(rows, out_, in_) ||
      (kernel::gemm_precision() == kernel::GemmPrecision::bf16) != bf16)
    return Tensor();  // the caller multiplies by W itself: the same bits
  const Tensor xc = kernel::contiguous(x);
  Shape shape = x.shape();
  shape.back() = out_;
  Tensor out = empty(shape, DType::F32);
  if (bf16)
    kernel::gemm_bf16_panels(rows, out_, in_, {xc.data<float>(), in_, 1},
                             static_cast<const uint32_t*>(bf16_bits_->data), out.data<float>(),
                             out_, true);
  else
    kernel::gemm_f32_panels(rows, out_, in_, {xc.data<float>(), in_, 1},
                            static_cast<const float*>(f32_panels_->data), out.data<float>(), out_,
                            true);
  return out;
}

bool StoredWeight::multiply_row(const float* x, float* y) const {
  if (format_ == WeightFormat::q8_0) {
    quant::gemm_q8_0(1, out_, in_, x, in_, static_cast<const uint8_t*>(q8_blocks_->data), y, out_,
                     true);
    return true;
  }
  const bool bf16 = format_ == WeightFormat::bf16;
  if (!kernel::gemm_panels_apply(1, out_, in_) ||
      (kernel::gemm_precision() == kernel::GemmPrecision::bf16) != bf16)
    return false;
  if (bf16)
    kernel::gemm_bf16_panels(1, out_, in_, {x, in_, 1}, static_cast<const uint32_t*>(bf16_bits_->data),
                             y, out_, true);
  else
    kernel::gemm_f32_panels(1, out_, in_, {x, in_, 1}, static_cast<const float*>(f32_panels_->data),
                            y, out_, true);
  return true;
}

// Every row count through the Q8_0 product on the rows as laid out where they lie (a prompt's rows
// pass over W a cache-sized chunk at a time): each row gets the bits it gets alone, so a
// prompt's last row is the token's.
Tensor StoredWeight::multiply_q8_0(const Tensor& x) const {
  ATTEND_CHECK(x.dtype() == DType::F32, "StoredWeight q8_0: expected an f32 input, got ",
               dtype_name(x.dtype()));
  const Tensor xc = kernel::contiguous(x);
  const int64_t rows = x.numel() / in_;
  const auto* laid = static_cast<const uint8_t*>(q8_blocks_->data);
  Shape shape = x.shape();
  shape.back() = out_;
  Tensor out = empty(shape, DType::F32);
  quant::gemm_q8_0(rows, out_, in_, xc.data<float>(), in_, laid, out.data<float>(), out_, true);
  return out;
}

}  // namespace attend
