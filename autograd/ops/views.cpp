// Views and copies. A view's backward maps the gradient back through the inverse view,
// so gradients taken through any chain of views reach the base tensor.
#include <numeric>

#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;

Tensor view(const Tensor& x, const Shape& shape) {
  Tensor out = kernel::view(x, shape);
  autograd::record("view", {x}, out, [in = x.shape()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::reshape(g, in)};
  });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = kernel::reshape(x, shape);
  autograd::record("reshape", {x}, out, [in = x.shape()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::reshape(g, in)};
  });
  return out;
}

Tensor flatten(const Tensor& x) { return reshape(x, {x.numel()}); }

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  Tensor out = kernel::transpose(x, d0, d1);
  autograd::record("transpose", {x}, out, [d0, d1](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::transpose(g, d0, d1)};
  });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor out = kernel::permute(x, dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], x.dim(), "permute")] = i;
  autograd::record("permute", {x}, out, [inverse](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::permute(g, inverse)};
  });
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = kernel::narrow(x, dim, start, length);
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t s = start < 0 ? start + x.shape()[d] : start;
  autograd::record("narrow", {x}, out,
                   [in = x.shape(), d, s, length](const Tensor& g, const Needs&) {
                     Tensor gx = zeros(in, g.dtype());
                     kernel::copy_(kernel::narrow(gx, d, s, length), g);
                     return std::vector<Tensor>{gx};
                   });
  return out;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.shape()[d];
  const int64_t s = std::clamp<int64_t>(start < 0 ? start + n : start, 0, n);
  const int64_t e = std::clamp<int64_t>(end < 0 ? end + n : end, s, n);
  return narrow(x, d, s, e - s);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t i = index < 0 ? index + x.shape()[d] : index;
  ATTEND_CHECK(i >= 0 && i < x.shape()[d], "select: index ", index, " is out of range for dim ", d,
               " of size ", x.shape()[d]);
  return squeeze(narrow(x, d, i, 1), d);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Tensor out = kernel::expand(x, shape);
  autograd::record("expand", {x}, out, [in = x.shape()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::sum_to(g, in)};
  });
  return out;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  Tensor out = kernel::unsqueeze(x, dim);
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  autograd::record("unsqueeze", {x}, out, [d](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::squeeze(g, d)};
  });
  return out;
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  Tensor out = kernel::squeeze(x, dim);
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  autograd::record("squeeze", {x}, out, [d](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::unsqueeze(g, d)};
  });
  return out;
}

Tensor contiguous(const Tensor& x) {
  Tensor out = kernel::contiguous(x);
  autograd::record("contiguous", {x}, out,
                   [](const Tensor& g, const Needs&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor clone(const Tensor& x) {
  Tensor out = kernel::clone(x);
  autograd::record("clone", {x}, out,
                   [](const Tensor& g, const Needs&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor to(const Tensor& x, DType dtype) {
  if (dtype == x.dtype()) return x;
  Tensor out = kernel::cast(x, dtype);
  if (is_floating(dtype)) {
    autograd::record("to", {x}, out, [from = x.dtype()](const Tensor& g, const Needs&) {
      return std::vector<Tensor>{kernel::cast(g, from)};
    });
  }
  return out;
}

}  // namespace attend
