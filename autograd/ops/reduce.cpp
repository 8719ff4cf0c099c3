// Reductions. The backward of sum broadcasts the gradient back over the reduced dims
// (a stride-0 view, no copy); mean scales it by 1/count; max routes it to the arg-max.
#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;

namespace {

// g of the reduced shape -> a view of the input's shape.
Tensor unreduce(const Tensor& g, const Shape& in, const std::vector<int64_t>& rdims, bool keepdim) {
  Tensor t = g;
  if (!keepdim)
    for (int64_t d : rdims) t = kernel::unsqueeze(t, d);  // rdims ascending
  return kernel::expand(t, in);
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = kernel::sum(x, dims, keepdim);
  auto rdims = kernel::normalize_dims(dims, x.dim(), "sum");
  autograd::record("sum", {x}, out,
                   [in = x.shape(), rdims, keepdim](const Tensor& g, const Needs&) {
                     return std::vector<Tensor>{unreduce(g, in, rdims, keepdim)};
                   });
  return out;
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto rdims = kernel::normalize_dims(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t d : rdims) count *= x.shape()[d];
  ATTEND_CHECK(count > 0, "mean: cannot average over an empty dim in shape ", shape_str(x.shape()));
  Tensor out =
      kernel::unary(kernel::Unary::Affine, kernel::sum(x, dims, keepdim), 1.0 / count, 0.0);
  autograd::record("mean", {x}, out,
                   [in = x.shape(), rdims, keepdim, count](const Tensor& g, const Needs&) {
                     Tensor scaled = kernel::unary(kernel::Unary::Affine, g, 1.0 / count, 0.0);
                     return std::vector<Tensor>{unreduce(scaled, in, rdims, keepdim)};
                   });
  return out;
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto [values, indices] = kernel::max(x, dims, keepdim);
  autograd::record("max", {x}, values,
                   [in = x.shape(), idx = indices, dims, keepdim](const Tensor& g, const Needs&) {
                     return std::vector<Tensor>{kernel::max_backward(g, idx, in, dims, keepdim)};
                   });
  return values;
}

}  // namespace attend
