// Fused neural-network ops. Each is one node with its own backward (formulas in
// tensor/kernels/nn.cpp), so the graph holds one saved tensor or two instead of the
// chain of a composition; tests check each against its composition from primitives.
#include "autograd/ops.h"

#include <algorithm>

#include "tensor/kernels/kept_operand.h"
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

Tensor scaled_softmax(const Tensor& x, double scale, int64_t offset, int64_t window) {
  Tensor out = kernel::scaled_softmax(x, scale, offset, window);
  autograd::record(
      "scaled_softmax", {x}, out,
      [y = out.detach(), scale, offset, window](const Tensor& g, const Needs&) {
        return std::vector<Tensor>{kernel::scaled_softmax_backward(y, g, scale, offset, window)};
      });
  return out;
}

namespace {

// x itself when its last stride is 1 (what the attention kernel reads), else a copy.
Tensor unit_last(const Tensor& x) {
  return x.dim() >= 1 && x.size(-1) > 1 && x.strides().back() != 1 ? kernel::contiguous(x) : x;
}

// Heads [start / HS, start / HS + H) of a contiguous (B, T, W) tensor as (B, H, T, HS).
Tensor heads_view(const Tensor& x, int64_t start, int64_t H, int64_t HS) {
  const int64_t B = x.size(0), T = x.size(1), W = x.size(2);
  return make_view(x, {B, H, T, HS}, {T * W, HS, W, 1}, x.offset() + start);
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t offset,
                 const DropoutStream& drop, int64_t window) {
  ATTEND_CHECK(q.dim() == 4, "attention: expected q of shape (B, NH, Tq, HS), got ",
               shape_str(q.shape()));
  Tensor qc = unit_last(q), kc = unit_last(k), vc = unit_last(v);
  // out is (B, NH, Tq, HS) over a (B, Tq, NH, HS) buffer: concatenating the heads is a view.
  Tensor out =
      kernel::transpose(empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.dtype()), 1, 2);
  kernel::attention_forward(qc, kc, vc, scale, offset, drop, out, window);
  // saves: q, k, v (the weights are recomputed in backward; as bf16 under bf16 products,
  // tensor/kernels/kept_operand.h)
  using kernel::KeptOperand;
  KeptOperand sq, sk, sv;
  if (autograd::needs_grad({q, k, v}))
    sq = KeptOperand(qc), sk = KeptOperand(kc), sv = KeptOperand(vc);
  autograd::record("attention", {q, k, v}, out,
                   [sq, sk, sv, scale, offset, drop, window](const Tensor& g, const Needs&) {
                     const Tensor qc = sq.get(), kc = sk.get(), vc = sv.get();
                     Tensor dq = empty(qc.shape(), qc.dtype()), dk = empty(kc.shape(), kc.dtype()),
                            dv = empty(vc.shape(), vc.dtype());
                     kernel::attention_backward(unit_last(g), qc, kc, vc, scale, offset, drop, dq,
                                                dk, dv, window);
                     return std::vector<Tensor>{dq, dk, dv};
                   });
  return out;
}

Tensor attention_qkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, double scale,
                     int64_t offset, const DropoutStream& drop, int64_t window) {
  ATTEND_CHECK(qkv.dim() == 3 && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 &&
                   qkv.size(2) % (n_head + 2 * n_kv_head) == 0,
               "attention_qkv: expected qkv of shape (B, T, (NH + 2 KVH) HS) with NH ", n_head,
               " a multiple of KVH ", n_kv_head, ", got ", shape_str(qkv.shape()));
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv_head);
  const int64_t C = n_head * HS, kv = n_kv_head * HS;
  Tensor x = kernel::contiguous(qkv);
  Tensor o = empty({B, T, C}, qkv.dtype());
  kernel::attention_forward(heads_view(x, 0, n_head, HS), heads_view(x, C, n_kv_head, HS),
                            heads_view(x, C + kv, n_kv_head, HS), scale, offset, drop,
                            heads_view(o, 0, n_head, HS), window);
  // saves: qkv (the weights are recomputed in backward; as bf16 under bf16 products,
  // tensor/kernels/kept_operand.h)
  kernel::KeptOperand saved;
  if (autograd::needs_grad({qkv})) saved = kernel::KeptOperand(x);
  autograd::record("attention_qkv", {qkv}, o,
                   [saved, n_head, n_kv_head, HS, C, kv, scale, offset, drop, window](
                       const Tensor& g, const Needs&) {
                     const Tensor x = saved.get();
                     Tensor gc = kernel::contiguous(g);
                     Tensor dx = empty(x.shape(), x.dtype());
                     kernel::attention_backward(
                         heads_view(gc, 0, n_head, HS), heads_view(x, 0, n_head, HS),
                         heads_view(x, C, n_kv_head, HS), heads_view(x, C + kv, n_kv_head, HS),
                         scale, offset, drop, heads_view(dx, 0, n_head, HS),
                         heads_view(dx, C, n_kv_head, HS), heads_view(dx, C + kv, n_kv_head, HS),
                         window);
                     return std::vector<Tensor>{dx};
                   });
  return o;
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

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                            int64_t ignore_index, int64_t chunk_rows, const Tensor& rows,
                            int64_t rows_from) {
  ATTEND_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1),
               "linear_cross_entropy: expected x (..., C) and w (V, C), got ", shape_str(x.shape()),
               " and ", shape_str(w.shape()));
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  ATTEND_CHECK(targets.shape() == lead, "linear_cross_entropy: expected targets of shape ",
               shape_str(lead), " for x ", shape_str(x.shape()), ", got ",
               shape_str(targets.shape()));
  Tensor flat = reshape(x, {-1, x.size(-1)});  // (N, C), differentiable
  const int64_t N = flat.size(0), V = w.size(0);
  if (chunk_rows <= 0) {
    const int64_t fit = (int64_t{1} << 24) / std::max<int64_t>(V, 1);
    chunk_rows = N <= fit ? std::max<int64_t>(N, 1) : std::max<int64_t>(256, fit / 256 * 256);
  }
  const bool gx = autograd::needs_grad({flat}), gw = autograd::needs_grad({w});
  const bool gr = rows.defined() && autograd::needs_grad({rows}), grads = gx || gw || gr;
  auto r = kernel::linear_cross_entropy(flat, w, kernel::reshape(targets, {-1}), ignore_index, gx,
                                        gw, chunk_rows, rows, rows_from, gr);
  if (!grads) return r.loss;
  // saves: the gradients (formed in the forward), handed out by the one backward
  auto state = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{r.dx, r.dw});
  if (rows.defined()) state->push_back(r.drows);
  std::vector<Tensor> inputs = {flat, w};
  if (rows.defined()) inputs.push_back(rows);
  autograd::record("linear_cross_entropy", inputs, r.loss,
                   [state](const Tensor& g, const Needs&) {
                     ATTEND_CHECK(std::any_of(state->begin(), state->end(),
                                              [](const Tensor& t) { return t.defined(); }),
                                  "linear_cross_entropy: backward ran twice (retain_graph is not "
                                  "supported: the gradients are handed out once)");
                     std::vector<Tensor> out = std::move(*state);
                     state->assign(out.size(), Tensor());
                     const double s = g.item();
                     if (s != 1.0) {  // e.g. 1/M under gradient accumulation
                       const Tensor k = scalar_tensor(s, g.dtype());
                       for (Tensor& d : out)
                         if (d.defined()) d = kernel::binary(kernel::Binary::Mul, d, k);
                     }
                     return out;
                   });
  return r.loss;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = kernel::embedding(weight, ids);
  // saves: the ids. A table that already has a gradient (tied to the LM head, whose
  // backward ran first) gets this one added in place, row by row: no second vocab x C table.
  autograd::record(
      "embedding", {weight}, out,
      [ids, rows = weight.size(0)](const Tensor& g, const Needs&) {
        return std::vector<Tensor>{kernel::embedding_backward(g, ids, rows)};
      },
      0, [ids](const Tensor& g, Tensor& dst) { kernel::embedding_backward_add(g, ids, dst); });
  return out;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  auto r = kernel::rms_norm(x, weight, eps);
  // saves: x, weight and the per-row 1/rms
  autograd::record(
      "rms_norm", {x, weight}, r.y,
      [x = x.detach(), w = weight.detach(), rstd = r.rstd](const Tensor& g, const Needs&) {
        auto d = kernel::rms_norm_backward(g, x, w, rstd);
        return std::vector<Tensor>{d.dx, d.dweight};
      });
  return r.y;
}

Tensor swiglu(const Tensor& x) {
  Tensor out = kernel::swiglu(x);
  // saves: x (gate and up)
  autograd::record("swiglu", {x}, out, [x = x.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{kernel::swiglu_backward(g, x)};
  });
  return out;
}

Tensor rotary(const Tensor& x, int64_t head_size, int64_t rotated, int64_t pos0, double theta) {
  Tensor out = kernel::rotary(x, head_size, rotated, pos0, theta);
  // saves: nothing (the backward turns the gradient back)
  autograd::record(
      "rotary", {x}, out, [head_size, rotated, pos0, theta](const Tensor& g, const Needs&) {
        return std::vector<Tensor>{kernel::rotary(g, head_size, rotated, pos0, theta, -1)};
      });
  return out;
}

}  // namespace attend
