// Views: new shape/strides/offset over the same storage. No data moves.
#include <algorithm>

#include "tensor/kernels.h"

namespace attend::kernel {

Shape infer_shape(const Shape& shape, int64_t n, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      ATTEND_CHECK(infer < 0, op, ": only one dim can be -1, got ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      ATTEND_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    ATTEND_CHECK(known != 0 && n % known == 0, op, ": shape ", shape_str(shape),
                 " is invalid for a tensor of ", n, " elements");
    out[infer] = n / known;
  }
  ATTEND_CHECK(numel(out) == n, op, ": shape ", shape_str(shape), " is invalid for a tensor of ", n,
               " elements");
  return out;
}

namespace {

// Strides for viewing (shape, strides) as `target` without a copy, or empty if impossible.
// Old dims split into chunks that are each contiguous in memory (stride[i-1] ==
// stride[i] * size[i]); each chunk must be covered exactly by consecutive target dims.
std::vector<int64_t> view_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  if (numel(shape) == 0 || shape.empty()) return contiguous_strides(target);
  Strides out(target.size());
  int64_t vd = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_stride = strides.back();
  int64_t chunk_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    chunk_numel *= shape[d];
    bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (vd >= 0 && (view_numel < chunk_numel || target[vd] == 1)) {
      out[vd] = view_numel * chunk_stride;
      view_numel *= target[vd];
      --vd;
    }
    if (view_numel != chunk_numel) return {};
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_numel = 1;
      view_numel = 1;
    }
  }
  if (vd != -1) return {};
  return out;
}

}  // namespace

Tensor view(const Tensor& x, Shape shape) {
  shape = infer_shape(shape, x.numel(), "view");
  if (x.is_contiguous()) return make_view(x, shape, contiguous_strides(shape), x.offset());
  Strides st = view_strides(x.shape(), x.strides(), shape);
  ATTEND_CHECK(!st.empty() || shape.empty(), "view: cannot view a tensor of shape ",
               shape_str(x.shape()), " with strides ", shape_str(x.strides()), " as ",
               shape_str(shape), " without a copy; use reshape");
  return make_view(x, shape, st, x.offset());
}

Tensor reshape(const Tensor& x, Shape shape) {
  shape = infer_shape(shape, x.numel(), "reshape");
  if (x.is_contiguous()) return make_view(x, shape, contiguous_strides(shape), x.offset());
  Strides st = view_strides(x.shape(), x.strides(), shape);
  if (!st.empty() || shape.empty()) return make_view(x, shape, st, x.offset());
  Tensor c = contiguous(x);
  return make_view(c, shape, contiguous_strides(shape), c.offset());
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  Shape sh = x.shape();
  Strides st = x.strides();
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(x, sh, st, x.offset());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  ATTEND_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: expected ", x.dim(),
               " dims for a tensor of shape ", shape_str(x.shape()), ", got ", dims.size());
  Shape sh(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    ATTEND_CHECK(!seen[d], "permute: dim ", dims[i], " appears twice");
    seen[d] = true;
    sh[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return make_view(x, sh, st, x.offset());
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  dim = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[dim];
  if (start < 0) start += size;
  ATTEND_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: range [", start, ", ",
               start + length, ") is out of bounds for dim ", dim, " of size ", size);
  Shape sh = x.shape();
  sh[dim] = length;
  return make_view(x, sh, x.strides(), x.offset() + start * x.strides()[dim]);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  ATTEND_CHECK(shape.size() >= x.shape().size(), "expand: cannot expand shape ",
               shape_str(x.shape()), " to fewer dims ", shape_str(shape));
  const size_t lead = shape.size() - x.shape().size();
  Shape sh = shape;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    int64_t want = shape[lead + i] == -1 ? x.shape()[i] : shape[lead + i];
    ATTEND_CHECK(x.shape()[i] == want || x.shape()[i] == 1, "expand: cannot expand shape ",
                 shape_str(x.shape()), " to ", shape_str(shape), " (dim ", lead + i, ")");
    sh[lead + i] = want;
  }
  return make_view(x, sh, broadcast_strides(x.shape(), x.strides(), sh), x.offset());
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sh = x.shape();
  Strides st = x.strides();
  int64_t s = dim < x.dim() ? st[dim] * sh[dim] : 1;
  sh.insert(sh.begin() + dim, 1);
  st.insert(st.begin() + dim, s);
  return make_view(x, sh, st, x.offset());
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "squeeze");
  ATTEND_CHECK(x.shape()[dim] == 1, "squeeze: dim ", dim, " has size ", x.shape()[dim],
               ", expected 1 in shape ", shape_str(x.shape()));
  Shape sh = x.shape();
  Strides st = x.strides();
  sh.erase(sh.begin() + dim);
  st.erase(st.begin() + dim);
  return make_view(x, sh, st, x.offset());
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  dim = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[dim];
  int64_t i = index < 0 ? index + size : index;
  ATTEND_CHECK(i >= 0 && i < size, "select: index ", index, " is out of range for dim ", dim,
               " of size ", size);
  return squeeze(narrow(x, dim, i, 1), dim);
}

}  // namespace attend::kernel
