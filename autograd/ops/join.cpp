// Joining and selecting: cat/stack (backward: each input takes its slice of the
// gradient), split (views), masked_fill and where (backward: the gradient where the
// element was taken from that operand, zero elsewhere).
#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = kernel::cat(xs, dim);
  const int64_t d = wrap_dim(dim, xs[0].dim(), "cat");
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) sizes.push_back(x.shape()[d]);
  autograd::record("cat", xs, out, [d, sizes](const Tensor& g, const Needs& n) {
    std::vector<Tensor> grads(sizes.size());
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (n[i]) grads[i] = kernel::narrow(g, d, at, sizes[i]);
      at += sizes[i];
    }
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  ATTEND_CHECK(!xs.empty(), "stack: expected at least one tensor");
  const int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < xs.size(); ++i) {
    ATTEND_CHECK(xs[i].shape() == xs[0].shape(), "stack: tensor ", i, " has shape ",
                 shape_str(xs[i].shape()), ", expected ", shape_str(xs[0].shape()));
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  ATTEND_CHECK(size > 0, "split: expected a positive size, got ", size);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  std::vector<Tensor> out;
  for (int64_t at = 0; at < x.shape()[d]; at += size) {
    out.push_back(narrow(x, d, at, std::min(size, x.shape()[d] - at)));
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  Tensor out = kernel::masked_fill(x, mask, value);
  autograd::record("masked_fill", {x}, out, [mask](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::masked_fill(g, mask, 0.0)};
  });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = kernel::where(cond, a, b);
  autograd::record("where", {a, b}, out,
                   [cond, sa = a.shape(), sb = b.shape()](const Tensor& g, const Needs& n) {
                     Tensor zero = scalar_tensor(0.0, g.dtype());
                     // see Note [Broadcast gradients]
                     return std::vector<Tensor>{
                         n[0] ? kernel::sum_to(kernel::where(cond, g, zero), sa) : Tensor(),
                         n[1] ? kernel::sum_to(kernel::where(cond, zero, g), sb) : Tensor()};
                   });
  return out;
}

}  // namespace attend
