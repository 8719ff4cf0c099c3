#include "autograd/gradcheck_cases.h"

#include <cmath>

#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

namespace {

constexpr DType F64 = DType::F64;

Tensor param(Tensor t) {
  t.requires_grad_(true);
  return t;
}
// N(0,1) leaves.
Tensor rn(Generator& g, const Shape& s) { return param(randn(s, g, F64)); }
// Leaves in [lo, hi): for log, sqrt, division and other ops with a restricted domain.
Tensor ru(Generator& g, const Shape& s, double lo, double hi) {
  return param(uniform(s, lo, hi, g, F64));
}
// Values well away from 0, either sign: relu's kink stays out of the finite differences.
Tensor away_from_zero(Generator& g, const Shape& s) {
  Tensor u = uniform(s, 0.1, 1.0, g, F64);
  Tensor sign = randn(s, g, F64);
  double* p = u.data<double>();
  const double* q = sign.data<double>();
  for (int64_t i = 0; i < u.numel(); ++i) p[i] = q[i] < 0 ? -p[i] : p[i];
  return param(u);
}

using In = std::vector<Tensor>;
#define ROW(name, shapes, make, body)                                       \
  GradcheckCase {                                                           \
    name, shapes, [](uint64_t seed) {                                       \
      Generator g(seed);                                                    \
      In inputs = make;                                                     \
      return gradcheck([](const In& x) -> Tensor { return body; }, inputs); \
    }                                                                       \
  }

std::vector<GradcheckCase> make_cases() {
  return {
      // elementwise, with broadcasting
      ROW("add", "(3,4) + (4,)", (In{rn(g, {3, 4}), rn(g, {4})}), add(x[0], x[1])),
      ROW("add.broadcast_both", "(2,1,4) + (3,1)", (In{rn(g, {2, 1, 4}), rn(g, {3, 1})}),
          add(x[0], x[1])),
      ROW("sub", "(3,4) - (3,1)", (In{rn(g, {3, 4}), rn(g, {3, 1})}), sub(x[0], x[1])),
      ROW("mul", "(2,3,4) * (3,4)", (In{rn(g, {2, 3, 4}), rn(g, {3, 4})}), mul(x[0], x[1])),
      ROW("div", "(3,4) / (1,4)", (In{rn(g, {3, 4}), ru(g, {1, 4}, 0.5, 2.0)}), div(x[0], x[1])),
      ROW("add.scalar", "(3,4) + 2.5", (In{rn(g, {3, 4})}), add(x[0], 2.5)),
      ROW("sub.rscalar", "1.5 - (3,4)", (In{rn(g, {3, 4})}), sub(1.5, x[0])),
      ROW("mul.scalar", "(3,4) * -3", (In{rn(g, {3, 4})}), mul(x[0], -3.0)),
      ROW("div.scalar", "(3,4) / 4", (In{rn(g, {3, 4})}), div(x[0], 4.0)),
      ROW("div.rscalar", "2 / (3,4)", (In{ru(g, {3, 4}, 0.5, 2.0)}), div(2.0, x[0])),
      ROW("neg", "(3,4)", (In{rn(g, {3, 4})}), neg(x[0])),
      ROW("exp", "(3,4)", (In{rn(g, {3, 4})}), exp(x[0])),
      ROW("log", "(3,4) in [0.5,2)", (In{ru(g, {3, 4}, 0.5, 2.0)}), log(x[0])),
      ROW("sqrt", "(3,4) in [0.5,2)", (In{ru(g, {3, 4}, 0.5, 2.0)}), sqrt(x[0])),
      ROW("pow.3", "(3,4)", (In{rn(g, {3, 4})}), pow(x[0], 3.0)),
      ROW("pow.-1.5", "(3,4) in [0.5,2)", (In{ru(g, {3, 4}, 0.5, 2.0)}), pow(x[0], -1.5)),
      ROW("tanh", "(3,4)", (In{rn(g, {3, 4})}), tanh(x[0])),
      ROW("relu", "(3,4), |x| >= 0.1", (In{away_from_zero(g, {3, 4})}), relu(x[0])),
      ROW("gelu", "(3,4)", (In{mul(rn(g, {3, 4}), 2.0).detach().requires_grad_()}), gelu(x[0])),
      // non-contiguous inputs and a tensor used twice
      ROW("exp.transposed", "(4,3)^T", (In{rn(g, {4, 3})}), exp(transpose(x[0], 0, 1))),
      ROW("mul.sliced", "(5,6)[1:4, ::] * (3,6)", (In{rn(g, {5, 6}), rn(g, {3, 6})}),
          mul(narrow(x[0], 0, 1, 3), x[1])),
      ROW("used_twice", "x*x + x", (In{rn(g, {3, 4})}), add(mul(x[0], x[0]), x[0])),
      // reductions
      ROW("sum.all", "(3,4)", (In{rn(g, {3, 4})}), sum(x[0])),
      ROW("sum.dims", "(2,3,4) over (0,2)", (In{rn(g, {2, 3, 4})}), sum(x[0], {0, 2})),
      ROW("sum.keepdim", "(2,3,4) over -1", (In{rn(g, {2, 3, 4})}), sum(x[0], {-1}, true)),
      ROW("mean.dims", "(2,3,4) over 1", (In{rn(g, {2, 3, 4})}), mean(x[0], {1})),
      ROW("mean.all", "(2,3,4) of a transpose", (In{rn(g, {2, 3, 4})}),
          mean(transpose(x[0], 0, 2))),
      ROW("max.dim", "(3,5) over 1", (In{rn(g, {3, 5})}), max(x[0], {1})),
      ROW("max.dims.keepdim", "(2,3,4) over (0,2)", (In{rn(g, {2, 3, 4})}),
          max(x[0], {0, 2}, true)),
      // matmul
      ROW("matmul", "(3,4) @ (4,5)", (In{rn(g, {3, 4}), rn(g, {4, 5})}), matmul(x[0], x[1])),
      ROW("matmul.transposed", "(3,4) @ (5,4)^T", (In{rn(g, {3, 4}), rn(g, {5, 4})}),
          matmul(x[0], transpose(x[1], 0, 1))),
      ROW("matmul.batched", "(2,3,4) @ (4,5)", (In{rn(g, {2, 3, 4}), rn(g, {4, 5})}),
          matmul(x[0], x[1])),
      ROW("matmul.broadcast", "(2,1,3,4) @ (5,4,2)", (In{rn(g, {2, 1, 3, 4}), rn(g, {5, 4, 2})}),
          matmul(x[0], x[1])),
      ROW("linear", "(2,3,4) w (5,4) b (5)", (In{rn(g, {2, 3, 4}), rn(g, {5, 4}), rn(g, {5})}),
          linear(x[0], x[1], x[2])),
      ROW("linear.no_bias", "(3,4) w (5,4)", (In{rn(g, {3, 4}), rn(g, {5, 4})}),
          linear(x[0], x[1], Tensor())),
      ROW("matmul.self", "x @ x^T", (In{rn(g, {3, 4})}), matmul(x[0], transpose(x[0], 0, 1))),
      // fused neural-network ops
      ROW("softmax", "(3,5)", (In{rn(g, {3, 5})}), softmax(x[0])),
      ROW("softmax.transposed", "(5,3)^T", (In{rn(g, {5, 3})}), softmax(transpose(x[0], 0, 1))),
      ROW("log_softmax", "(2,3,5)", (In{rn(g, {2, 3, 5})}), log_softmax(x[0])),
      ROW("scaled_softmax.causal", "(2,3,5), scale 0.7, offset 2", (In{rn(g, {2, 3, 5})}),
          scaled_softmax(x[0], 0.7, 2)),
      ROW("scaled_softmax.unmasked", "(2,4,3), scale 1.3", (In{rn(g, {2, 4, 3})}),
          scaled_softmax(x[0], 1.3, -1)),
      // fused attention: q (B, NH, Tq, HS), k and v (B, KVH, Tk, HS); the weights recomputed
      // in backward, the dropout masks drawn inside the kernel (the same at every call)
      ROW("attention.causal_gqa_dropout", "q (2,4,5,3), k v (2,2,5,3), p 0.3",
          (In{rn(g, {2, 4, 5, 3}), rn(g, {2, 2, 5, 3}), rn(g, {2, 2, 5, 3})}),
          attention(x[0], x[1], x[2], 0.6, 0, DropoutStream{0.3, {7, 9}, 5, 2, 1})),
      ROW("attention.cache", "q (1,2,3,4), k v (1,1,7,4), offset 4",
          (In{rn(g, {1, 2, 3, 4}), rn(g, {1, 1, 7, 4}), rn(g, {1, 1, 7, 4})}),
          attention(x[0], x[1], x[2], 0.5, 4, DropoutStream{})),
      ROW("attention.cross", "q (2,2,3,4), k v (2,2,6,4), no mask",
          (In{rn(g, {2, 2, 3, 4}), rn(g, {2, 2, 6, 4}), rn(g, {2, 2, 6, 4})}),
          attention(x[0], x[1], x[2], 0.5, -1, DropoutStream{})),
      ROW("attention.transposed", "q k v (2,5,3,4)^(1,2) views", (In{rn(g, {2, 5, 3, 4})}),
          attention(transpose(x[0], 1, 2), transpose(x[0], 1, 2), transpose(x[0], 1, 2), 0.5, 0,
                    DropoutStream{})),
      ROW("attention_qkv", "(2,34,12): 2 heads on 1, HS 3, 34 rows, p 0.2",
          (In{rn(g, {2, 34, 12})}),
          attention_qkv(x[0], 2, 1, 0.6, 0, DropoutStream{0.2, {1, 2}, 3, 0, 0})),
      ROW("layer_norm", "(2,3,6), w (6), b (6)", (In{rn(g, {2, 3, 6}), rn(g, {6}), rn(g, {6})}),
          layer_norm(x[0], x[1], x[2])),
      ROW("layer_norm.no_bias", "(4,6), w (6)", (In{rn(g, {4, 6}), rn(g, {6})}),
          layer_norm(x[0], x[1], Tensor())),
      ROW("cross_entropy", "(2,3,5), targets (2,3)", (In{rn(g, {2, 3, 5})}),
          cross_entropy(x[0], tensor({0, 4, 2, 1, 3, 3}, {2, 3}, DType::I64))),
      ROW("cross_entropy.ignore", "(4,5), one target ignored", (In{rn(g, {4, 5})}),
          cross_entropy(x[0], tensor({1, -100, 4, 0}, {4}, DType::I64))),
      ROW("linear_cross_entropy", "x (2,3,4), w (5,4), chunks of 2 rows, one ignored",
          (In{rn(g, {2, 3, 4}), rn(g, {5, 4})}),
          linear_cross_entropy(x[0], x[1], tensor({0, 4, -100, 1, 3, 3}, {2, 3}, DType::I64), -100,
                               2)),
      ROW("linear_cross_entropy.rows",
          "x (2,3,4), w (5,4), rows 3:5 plus r (2,4) (trainable token rows), chunks of 2",
          (In{rn(g, {2, 3, 4}), rn(g, {5, 4}), rn(g, {2, 4})}),
          linear_cross_entropy(x[0], x[1], tensor({0, 4, -100, 3, 3, 4}, {2, 3}, DType::I64), -100,
                               2, x[2], 3)),
      ROW("embedding", "w (6,3), ids (2,3) with repeats", (In{rn(g, {6, 3})}),
          embedding(x[0], tensor({1, 5, 1, 0, 5, 5}, {2, 3}, DType::I64))),
      ROW("embedding.tied", "w (6,3) also the matmul's: e(ids) w^T, the gradient added in place",
          (In{rn(g, {6, 3})}),
          matmul(embedding(x[0], tensor({1, 5, 1, 0, 5, 5}, {2, 3}, DType::I64)),
                 transpose(x[0], 0, 1))),
      // Llama's layers and Mistral's sliding window
      ROW("rms_norm", "(2,3,6), w (6), eps 1e-5", (In{rn(g, {2, 3, 6}), rn(g, {6})}),
          rms_norm(x[0], x[1], 1e-5)),
      ROW("rms_norm.transposed", "(6,4)^T, w (6), eps 0.1", (In{rn(g, {6, 4}), rn(g, {6})}),
          rms_norm(transpose(x[0], 0, 1), x[1], 0.1)),
      ROW("swiglu", "(2,3,10) -> (2,3,5)", (In{mul(rn(g, {2, 3, 10}), 3.0).detach().requires_grad_()}),
          swiglu(x[0])),
      ROW("rotary", "(2,5,12): HS 4, 8 columns turned, from position 3", (In{rn(g, {2, 5, 12})}),
          rotary(x[0], 4, 8, 3, 10000.0)),
      ROW("rotary.theta", "(1,4,6)^ from a transpose, HS 6, theta 7", (In{rn(g, {1, 6, 4})}),
          rotary(transpose(x[0], 1, 2), 6, 6, 0, 7.0)),
      ROW("scaled_softmax.window", "(2,6,6), offset 0, window 3", (In{rn(g, {2, 6, 6})}),
          scaled_softmax(x[0], 0.8, 0, 3)),
      ROW("scaled_softmax.window_cache", "(2,3,7), offset 4, window 2", (In{rn(g, {2, 3, 7})}),
          scaled_softmax(x[0], 0.8, 4, 2)),
      ROW("attention.window_gqa_dropout", "q (1,4,37,3), k v (1,2,37,3), window 5, p 0.3",
          (In{rn(g, {1, 4, 37, 3}), rn(g, {1, 2, 37, 3}), rn(g, {1, 2, 37, 3})}),
          attention(x[0], x[1], x[2], 0.6, 0, DropoutStream{0.3, {7, 9}, 5, 2, 1}, 5)),
      ROW("attention.window_cache", "q (1,2,3,4), k v (1,1,7,4), offset 4, window 3",
          (In{rn(g, {1, 2, 3, 4}), rn(g, {1, 1, 7, 4}), rn(g, {1, 1, 7, 4})}),
          attention(x[0], x[1], x[2], 0.5, 4, DropoutStream{}, 3)),
      ROW("attention_qkv.window", "(1,34,12): 2 heads on 1, HS 3, window 4",
          (In{rn(g, {1, 34, 12})}), attention_qkv(x[0], 2, 1, 0.6, 0, DropoutStream{}, 4)),
      // views
      ROW("reshape", "(2,3,4) -> (4,6)", (In{rn(g, {2, 3, 4})}),
          mul(reshape(x[0], {4, 6}), reshape(x[0], {4, 6}))),
      ROW("reshape.copy", "(3,4)^T -> (12,)", (In{rn(g, {3, 4})}),
          exp(reshape(transpose(x[0], 0, 1), {12}))),
      ROW("permute", "(2,3,4) -> (2,0,1)", (In{rn(g, {2, 3, 4})}), exp(permute(x[0], {2, 0, 1}))),
      ROW("narrow", "(5,4)[1:3]", (In{rn(g, {5, 4})}), exp(narrow(x[0], 0, 1, 2))),
      ROW("select", "(3,4)[:, 2]", (In{rn(g, {3, 4})}), exp(select(x[0], 1, 2))),
      ROW("expand", "(3,1) -> (2,3,4)", (In{rn(g, {3, 1})}), exp(expand(x[0], {2, 3, 4}))),
      ROW("unsqueeze.squeeze", "(3,4)", (In{rn(g, {3, 4})}), exp(squeeze(unsqueeze(x[0], 1), 1))),
      ROW("contiguous", "(3,4)^T", (In{rn(g, {3, 4})}), exp(contiguous(transpose(x[0], 0, 1)))),
      ROW("clone", "(3,4)", (In{rn(g, {3, 4})}), mul(clone(x[0]), x[0])),
      // joining and selecting
      ROW("cat", "(2,3) ++ (4,3) on 0", (In{rn(g, {2, 3}), rn(g, {4, 3})}),
          exp(cat({x[0], x[1]}, 0))),
      ROW("stack", "(2,3), (2,3) on 1", (In{rn(g, {2, 3}), rn(g, {2, 3})}),
          exp(stack({x[0], x[1]}, 1))),
      ROW("split", "(5,3) in 2s", (In{rn(g, {5, 3})}),
          add(mul(split(x[0], 2, 0)[0], split(x[0], 2, 0)[1]), sum(split(x[0], 2, 0)[2]))),
      ROW("masked_fill", "(3,3), future masked to -inf, then softmax", (In{rn(g, {3, 3})}),
          softmax(masked_fill(x[0], kernel::triu_mask(3, 3, 1), -INFINITY))),
      ROW("where", "cond (3,1), (3,4), (4,)", (In{rn(g, {3, 4}), rn(g, {4})}),
          where(tensor({1, 0, 1}, {3, 1}, DType::Bool), x[0], x[1])),
  };
}

#undef ROW

}  // namespace

const std::vector<GradcheckCase>& op_gradcheck_cases() {
  static const std::vector<GradcheckCase> cases = make_cases();
  return cases;
}

}  // namespace attend
