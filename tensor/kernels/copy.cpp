// Copies, casts, in-place accumulation, concatenation and selection.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/half.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/kernels/iter.h"

namespace attend::kernel {

namespace {

// dst[i] = f(src[i]) elementwise, src broadcast to dst's shape, any dtypes.
template <typename D, typename S, typename F>
void map_into(const Tensor& dst, const Tensor& src, F f) {
  StridedLoop<2> loop(dst.shape(),
                      {dst.strides(), broadcast_strides(src.shape(), src.strides(), dst.shape())});
  D* d = static_cast<D*>(dst.raw_data());
  const S* s = static_cast<const S*>(src.raw_data());
  loop.parallel_run([&](const auto& off, int64_t n, const auto& inner) {
    D* dp = d + off[0];
    const S* sp = s + off[1];
    if (inner[0] == 1 && inner[1] == 1) {
      for (int64_t i = 0; i < n; ++i) dp[i] = f(dp[i], sp[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * inner[0]] = f(dp[i * inner[0]], sp[i * inner[1]]);
    }
  });
}

void check_broadcastable_to(const Tensor& src, const Shape& dst, const char* op) {
  ATTEND_CHECK(broadcast_shapes(src.shape(), dst, op) == dst, op, ": cannot broadcast shape ",
               shape_str(src.shape()), " to ", shape_str(dst));
}

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  check_broadcastable_to(src, dst.shape(), "copy_");
  if (dst.dtype() == DType::BF16 || src.dtype() == DType::BF16) {
    // bf16 (frozen weights, tensor/dtype.h): bits to bits, f32 rounded as the GEMM rounds
    // its operands (round_to_bf16: nearest even, a subnormal to a zero of its sign), bf16
    // widened to f32 exactly. Nothing else converts to or from bf16.
    const DType d = dst.dtype(), s = src.dtype();
    auto bits = [](float f) {
      const float r = round_to_bf16(f);
      uint32_t u;
      std::memcpy(&u, &r, 4);
      return static_cast<uint16_t>(u >> 16);
    };
    if (d == DType::BF16 && s == DType::BF16) {
      map_into<uint16_t, uint16_t>(dst, src, [](uint16_t, uint16_t v) { return v; });
    } else if (d == DType::BF16 && s == DType::F32) {
      map_into<uint16_t, float>(dst, src, [&](uint16_t, float v) { return bits(v); });
    } else if (d == DType::F32 && s == DType::BF16) {
      map_into<float, uint16_t>(dst, src, [](float, uint16_t v) { return bf16_to_float(v); });
    } else {
      throw Error(str("copy_: bf16 converts only to and from f32, got ", dtype_name(s), " to ",
                      dtype_name(d)));
    }
    return;
  }
  dispatch_all(dst.dtype(), [&]<typename D>() {
    dispatch_all(src.dtype(), [&]<typename S>() {
      map_into<D, S>(dst, src, [](D, S v) { return static_cast<D>(v); });
    });
  });
}

void add_(const Tensor& dst, const Tensor& src) {
  check_broadcastable_to(src, dst.shape(), "add_");
  ATTEND_CHECK(dst.dtype() == src.dtype(), "add_: expected operands of one dtype, got ",
               dtype_name(dst.dtype()), " += ", dtype_name(src.dtype()));
  dispatch_float(dst.dtype(), "add_",
                 [&]<typename T>() { map_into<T, T>(dst, src, [](T a, T b) { return a + b; }); });
}

void fill_(const Tensor& dst, double value) { copy_(dst, scalar_tensor(value, DType::F64)); }

Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

Tensor clone(const Tensor& x) {
  Tensor out = empty(x.shape(), x.dtype());
  copy_(out, x);
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = empty(x.shape(), dtype);
  copy_(out, x);
  return out;
}

void for_each_f32_block(const Tensor& x, int64_t block,
                        const std::function<void(const float*, int64_t, int64_t)>& f) {
  ATTEND_CHECK(block > 0, "for_each_f32_block: block must be positive, got ", block);
  const int64_t n = x.numel();
  if (x.dtype() == DType::BF16) {
    ATTEND_CHECK(x.is_contiguous(), "for_each_f32_block: a bf16 tensor must be contiguous");
    const uint16_t* bits = x.data<uint16_t>();
    std::vector<float> buffer(static_cast<size_t>(std::min(block, std::max<int64_t>(n, 1))));
    for (int64_t i = 0; i < n; i += block) {
      const int64_t m = std::min(block, n - i);
      for (int64_t j = 0; j < m; ++j) buffer[static_cast<size_t>(j)] = bf16_to_float(bits[i + j]);
      f(buffer.data(), i, m);
    }
    return;
  }
  const Tensor c = x.dtype() == DType::F32 ? contiguous(x) : cast(x, DType::F32);
  for (int64_t i = 0; i < n; i += block) f(c.data<float>() + i, i, std::min(block, n - i));
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  ATTEND_CHECK(!xs.empty(), "cat: expected at least one tensor");
  const Tensor& first = xs[0];
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    ATTEND_CHECK(x.dtype() == first.dtype(), "cat: tensor ", i, " has dtype ",
                 dtype_name(x.dtype()), ", expected ", dtype_name(first.dtype()));
    ATTEND_CHECK(x.dim() == first.dim(), "cat: tensor ", i, " has shape ", shape_str(x.shape()),
                 ", expected ", first.dim(), " dims like ", shape_str(first.shape()));
    for (int64_t d = 0; d < x.dim(); ++d) {
      ATTEND_CHECK(d == dim || x.shape()[d] == first.shape()[d], "cat: tensor ", i, " has shape ",
                   shape_str(x.shape()), ", expected ", shape_str(first.shape()),
                   " in every dim but ", dim);
    }
    out_shape[dim] += x.shape()[dim];
  }
  Tensor out = empty(out_shape, first.dtype());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    copy_(narrow(out, dim, at, x.shape()[dim]), x);
    at += x.shape()[dim];
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ATTEND_CHECK(cond.dtype() == DType::Bool, "where: expected a bool condition, got ",
               dtype_name(cond.dtype()));
  ATTEND_CHECK(a.dtype() == b.dtype(), "where: expected a and b of one dtype, got ",
               dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype());
  StridedLoop<4> loop(shape, {out.strides(), broadcast_strides(cond.shape(), cond.strides(), shape),
                              broadcast_strides(a.shape(), a.strides(), shape),
                              broadcast_strides(b.shape(), b.strides(), shape)});
  dispatch_all(a.dtype(), [&]<typename T>() {
    T* o = out.data<T>();
    const bool* c = cond.data<bool>();
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    loop.parallel_run([&](const auto& off, int64_t n, const auto& in) {
      for (int64_t i = 0; i < n; ++i) {
        o[off[0] + i * in[0]] =
            c[off[1] + i * in[1]] ? pa[off[2] + i * in[2]] : pb[off[3] + i * in[3]];
      }
    });
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ATTEND_CHECK(mask.dtype() == DType::Bool, "masked_fill: expected a bool mask, got ",
               dtype_name(mask.dtype()));
  ATTEND_CHECK(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(),
               "masked_fill: mask of shape ", shape_str(mask.shape()),
               " does not broadcast to the input's shape ", shape_str(x.shape()));
  return where(mask, scalar_tensor(value, x.dtype()), x);
}

Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal) {
  Tensor m = empty({rows, cols}, DType::Bool);
  bool* p = m.data<bool>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = j <= i + diagonal;
  return m;
}

Tensor triu_mask(int64_t rows, int64_t cols, int64_t diagonal) {
  Tensor m = empty({rows, cols}, DType::Bool);
  bool* p = m.data<bool>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = j >= i + diagonal;
  return m;
}

}  // namespace attend::kernel
