// matmul backward: for C = A @ B,  dA = dC @ B^T,  dB = A^T @ dC, then summed over any
// broadcast batch dims (see Note [Broadcast gradients]). Transposes are stride views, so
// the backward products read the saved operands in place.
#include <algorithm>

#include "autograd/ops.h"
#include "tensor/kernels/kept_operand.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"

namespace attend {

using autograd::Needs;

namespace {

// Linear's dW = g2^T x, (outs, in), for an x kept as bf16 (tensor/kernels/kept_operand.h):
// one product whose B panels are packed from x's bf16 bits (kernel::gemm_bf16_bits_b), the
// bits of the product on x's f32 values; x is never widened (it was, a run of ~1 MB of rows
// at a time, until 2026-12-07: 1.5% of the baby GPT's bf16 step, docs/numbers.md).
Tensor weight_grad_from_bf16(const Tensor& g2, const kernel::KeptOperand& x,
                             int64_t outs, int64_t in) {
  Tensor gw = empty({outs, in}, DType::F32);
  const int64_t rs = g2.strides()[0], cs = g2.strides()[1];
  // A = g2^T: element (i, r) is g2[r, i]
  kernel::gemm_bf16_bits_b(outs, in, x.num_rows(), {g2.data<float>(), cs, rs}, x.bits(), in,
                           gw.data<float>(), in);
  return gw;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = kernel::matmul(a, b);
  autograd::record(
      "matmul", {a, b}, out, [a = a.detach(), b = b.detach()](const Tensor& g, const Needs& n) {
        Tensor ga, gb;
        if (n[0]) ga = kernel::sum_to(kernel::matmul(g, kernel::transpose(b, -1, -2)), a.shape());
        if (n[1]) {
          if (b.dim() == 2 && a.dim() > 2) {
            // (..., M, K) @ (K, N): fold the batch into M, one (K, N) product, no batch sum.
            const int64_t K = a.size(-1), N = b.size(-1);
            Tensor a2 = kernel::reshape(a, {-1, K}), g2 = kernel::reshape(g, {-1, N});
            gb = kernel::matmul(kernel::transpose(a2, 0, 1), g2);
          } else {
            gb = kernel::sum_to(kernel::matmul(kernel::transpose(a, -1, -2), g), b.shape());
          }
        }
        return std::vector<Tensor>{ga, gb};
      });
  return out;
}

// linear: y = x W^T + b as one op (nn::Linear). The products are the ones matmul and add
// compute (the same sums in the same order, so the same bits; tested), but the weight's
// gradient is formed as (out, in) directly, g^T x, instead of a transposed view of
// x^T g: a fresh contiguous tensor the engine can make the weight's .grad without a copy.
// The bias is added in place into the product, and its gradient is g summed over rows.
namespace {

// linear with a frozen bf16 weight (tensor/dtype.h): y = x W^T + b and dx = dy W through
// the bf16 weight's products (kernel::gemm_bf16_weight*, the bits of W's f32 values); W has
// no gradient and x is not kept. A bias may train.
Tensor linear_bf16_weight(const Tensor& x, const Tensor& w, const Tensor& b) {
  ATTEND_CHECK(x.dtype() == DType::F32 && (!b.defined() || b.dtype() == DType::F32),
               "linear: a bf16 weight takes an f32 input and bias, got ", dtype_name(x.dtype()));
  const int64_t in = w.size(1), outs = w.size(0);
  const Tensor wc = kernel::contiguous(w), xc = kernel::contiguous(x);
  Shape shape = x.shape();
  shape.back() = outs;
  Tensor out = empty(shape, DType::F32);
  const int64_t M = x.numel() / in;
  kernel::gemm_bf16_weight_t(M, outs, in, {xc.data<float>(), in, 1}, wc.data<uint16_t>(),
                             out.data<float>(), outs);
  if (b.defined()) kernel::add_(out, b);
  std::vector<Tensor> inputs{x};
  if (b.defined()) inputs.push_back(b);
  autograd::record("linear", inputs, out,
                   [wc, has_b = b.defined(), in, outs](const Tensor& g, const Needs& n) {
                     const Tensor gc = kernel::contiguous(g);
                     std::vector<Tensor> grads(has_b ? 2 : 1);
                     if (n[0]) {
                       Shape s = g.shape();
                       s.back() = in;
                       grads[0] = empty(s, DType::F32);
                       kernel::gemm_bf16_weight(gc.numel() / outs, in, outs,
                                                {gc.data<float>(), outs, 1}, wc.data<uint16_t>(),
                                                grads[0].data<float>(), in);
                     }
                     if (has_b && n[1]) grads[1] = kernel::sum_to(kernel::reshape(gc, {-1, outs}), {outs});
                     return grads;
                   });
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  ATTEND_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
               "linear: expected input (..., ", w.dim() == 2 ? w.size(1) : -1,
               ") and weight (out, in), got ", shape_str(x.shape()), " and ", shape_str(w.shape()));
  if (w.dtype() == DType::BF16) return linear_bf16_weight(x, w, b);
  // saves: x (as bf16 under bf16 products: it is only dW's operand, kept_operand.h), w
  kernel::KeptOperand saved_x;  // dW's operand only: not kept for a frozen weight (LoRA's base)
  Tensor out;  // (..., out), fresh
  if (autograd::needs_grad({w}) && kernel::KeptOperand::compacts(x) && w.dtype() == DType::F32 &&
      w.is_contiguous()) {
    // x's bf16 bits made as the product packs x, not in a second pass (the same bits)
    out = kernel::KeptOperand::matmul_wt_keeping(x, w, saved_x);
  } else {
    out = kernel::matmul(x, kernel::transpose(w, 0, 1));
    if (autograd::needs_grad({w})) saved_x = kernel::KeptOperand(x);
  }
  if (b.defined()) kernel::add_(out, b);
  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  autograd::record("linear", inputs, out,
                   [saved_x, w = w.detach(), has_b = b.defined()](const Tensor& g, const Needs& n) {
                     const int64_t in = w.size(1), outs = w.size(0);
                     const Tensor g2 = kernel::reshape(g, {-1, outs});
                     std::vector<Tensor> grads(has_b ? 3 : 2);
                     if (n[0]) grads[0] = kernel::matmul(g, w);  // (..., in)
                     if (n[1])
                       grads[1] = saved_x.compact()
                                      ? weight_grad_from_bf16(g2, saved_x, outs, in)
                                      : kernel::matmul(kernel::transpose(g2, 0, 1),
                                                       kernel::reshape(saved_x.get(), {-1, in}));
                     if (has_b && n[2]) grads[2] = kernel::sum_to(g2, {outs});
                     return grads;
                   });
  return out;
}

}  // namespace attend
