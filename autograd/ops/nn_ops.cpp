// Fused neural-network ops. Each is one node with its own backward (formulas in
// tensor/kernels/nn.cpp), so the graph holds one saved tensor or two instead of the
// chain of a composition; tests check each against its composition from primitives.
#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;

Tensor softmax(const Tensor& x) {
  Tensor out = kernel::softmax(x);
  // saves: the output y
  autograd::record("softmax", {x}, out, [y = out.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::softmax_backward(y, g)};
  });
  return out;
}

Tensor scaled_softmax(const Tensor& x, double scale, int64_t offset) {
  Tensor out = kernel::scaled_softmax(x, scale, offset);
  autograd::record(
      "scaled_softmax", {x}, out, [y = out.detach(), scale, offset](const Tensor& g, const Needs&) {
        return std::vector<Tensor>{kernel::scaled_softmax_backward(y, g, scale, offset)};
      });
  return out;
}

Tensor log_softmax(const Tensor& x) {
  Tensor out = kernel::log_softmax(x);
  // saves: the output y
  autograd::record("log_softmax", {x}, out, [y = out.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::log_softmax_backward(y, g)};
  });
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  auto r = kernel::layer_norm(x, weight, bias, eps);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  // saves: x, weight, and the per-row mean and 1/std
  autograd::record("layer_norm", inputs, r.y,
                   [x = x.detach(), w = weight.detach(), mean = r.mean, rstd = r.rstd,
                    has_bias = bias.defined()](const Tensor& g, const Needs&) {
                     auto d = kernel::layer_norm_backward(g, x, w, mean, rstd);
                     std::vector<Tensor> grads{d.dx, d.dweight};
                     if (has_bias) grads.push_back(d.dbias);
                     return grads;
                   });
  return r.y;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  ATTEND_CHECK(logits.dim() >= 1,
               "cross_entropy: expected logits of shape (..., V), got a 0-dim tensor");
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  ATTEND_CHECK(targets.shape() == lead, "cross_entropy: expected targets of shape ",
               shape_str(lead), " for logits ", shape_str(logits.shape()), ", got ",
               shape_str(targets.shape()));
  Tensor flat = reshape(logits, {-1, logits.size(-1)});  // (N, V), differentiable
  Tensor t = kernel::reshape(targets, {-1});
  auto r = kernel::cross_entropy(flat, t, ignore_index);
  // saves: the logits, the targets and each row's log-sum-exp
  autograd::record("cross_entropy", {flat}, r.loss,
                   [l = flat.detach(), t, lse = r.lse, count = r.count, ignore_index](
                       const Tensor& g, const Needs&) {
                     return std::vector<Tensor>{
                         kernel::cross_entropy_backward(g, l, t, lse, count, ignore_index)};
                   });
  return r.loss;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = kernel::embedding(weight, ids);
  // saves: the ids
  autograd::record("embedding", {weight}, out,
                   [ids, rows = weight.size(0)](const Tensor& g, const Needs&) {
                     return std::vector<Tensor>{kernel::embedding_backward(g, ids, rows)};
                   });
  return out;
}

}  // namespace attend
