// Elementwise ops and their backwards.
//
// Note [Broadcast gradients]
// When an operand was broadcast to the output's shape (leading dims added, size-1 dims
// stretched), every output element it fed adds to its gradient: the output gradient is
// summed over the broadcast dims back to the operand's shape (kernel::sum_to).
#include "autograd/ops.h"
#include "tensor/kernels.h"

namespace attend {

using autograd::Needs;
using kernel::Binary;
using kernel::Unary;

namespace {

Tensor bin(Binary op, const Tensor& a, const Tensor& b) { return kernel::binary(op, a, b); }
Tensor un(Unary op, const Tensor& x, double p = 0, double q = 0) {
  return kernel::unary(op, x, p, q);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = bin(Binary::Add, a, b);
  autograd::record("add", {a, b}, out,
                   [sa = a.shape(), sb = b.shape()](const Tensor& g, const Needs& n) {
                     // see Note [Broadcast gradients]
                     return std::vector<Tensor>{n[0] ? kernel::sum_to(g, sa) : Tensor(),
                                                n[1] ? kernel::sum_to(g, sb) : Tensor()};
                   });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = bin(Binary::Sub, a, b);
  autograd::record(
      "sub", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g, const Needs& n) {
        return std::vector<Tensor>{n[0] ? kernel::sum_to(g, sa) : Tensor(),
                                   n[1] ? kernel::sum_to(un(Unary::Neg, g), sb) : Tensor()};
      });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = bin(Binary::Mul, a, b);
  autograd::record("mul", {a, b}, out,
                   [a = a.detach(), b = b.detach()](const Tensor& g, const Needs& n) {
                     return std::vector<Tensor>{
                         n[0] ? kernel::sum_to(bin(Binary::Mul, g, b), a.shape()) : Tensor(),
                         n[1] ? kernel::sum_to(bin(Binary::Mul, g, a), b.shape()) : Tensor()};
                   });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = bin(Binary::Div, a, b);
  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -out/b
  autograd::record(
      "div", {a, b}, out,
      [a = a.detach(), b = b.detach(), y = out.detach()](const Tensor& g, const Needs& n) {
        Tensor ga, gb;
        Tensor g_over_b = bin(Binary::Div, g, b);
        if (n[0]) ga = kernel::sum_to(g_over_b, a.shape());
        if (n[1]) gb = kernel::sum_to(un(Unary::Neg, bin(Binary::Mul, g_over_b, y)), b.shape());
        return std::vector<Tensor>{ga, gb};
      });
  return out;
}

Tensor add(const Tensor& a, double s) {
  Tensor out = un(Unary::Affine, a, 1.0, s);
  autograd::record("add", {a}, out,
                   [](const Tensor& g, const Needs&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor sub(const Tensor& a, double s) { return add(a, -s); }

Tensor sub(double s, const Tensor& a) {
  Tensor out = un(Unary::Affine, a, -1.0, s);
  autograd::record("rsub", {a}, out, [](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{un(Unary::Neg, g)};
  });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = un(Unary::Affine, a, s, 0.0);
  autograd::record("mul", {a}, out, [s](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{un(Unary::Affine, g, s, 0.0)};
  });
  return out;
}

Tensor div(const Tensor& a, double s) {
  ATTEND_CHECK(s != 0, "div: division of a tensor by the scalar 0");
  return mul(a, 1.0 / s);
}

Tensor div(double s, const Tensor& a) {
  Tensor out = un(Unary::Rdiv, a, s);
  // d(s/a)/da = -s/a^2 = -out/a
  autograd::record(
      "rdiv", {a}, out, [a = a.detach(), y = out.detach()](const Tensor& g, const Needs&) {
        return std::vector<Tensor>{un(Unary::Neg, bin(Binary::Div, bin(Binary::Mul, g, y), a))};
      });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = un(Unary::Neg, x);
  autograd::record("neg", {x}, out, [](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{un(Unary::Neg, g)};
  });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = un(Unary::Exp, x);
  autograd::record("exp", {x}, out, [y = out.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{bin(Binary::Mul, g, y)};
  });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = un(Unary::Log, x);
  autograd::record("log", {x}, out, [x = x.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{bin(Binary::Div, g, x)};
  });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = un(Unary::Sqrt, x);
  // d sqrt(x) = 1 / (2 sqrt(x))
  autograd::record("sqrt", {x}, out, [y = out.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{un(Unary::Affine, bin(Binary::Div, g, y), 0.5, 0.0)};
  });
  return out;
}

Tensor pow(const Tensor& x, double p) {
  Tensor out = un(Unary::Pow, x, p);
  // d x^p = p x^(p-1)
  autograd::record("pow", {x}, out, [x = x.detach(), p](const Tensor& g, const Needs&) {
    Tensor d = un(Unary::Affine, un(Unary::Pow, x, p - 1.0), p, 0.0);
    return std::vector<Tensor>{bin(Binary::Mul, g, d)};
  });
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = un(Unary::Tanh, x);
  autograd::record("tanh", {x}, out, [y = out.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{bin(Binary::TanhGrad, g, y)};
  });
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor out = un(Unary::Relu, x);
  autograd::record("relu", {x}, out, [x = x.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{bin(Binary::ReluGrad, g, x)};
  });
  return out;
}

Tensor gelu(const Tensor& x) {
  Tensor out = un(Unary::Gelu, x);
  autograd::record("gelu", {x}, out, [x = x.detach()](const Tensor& g, const Needs&) {
    return std::vector<Tensor>{bin(Binary::GeluGrad, g, x)};
  });
  return out;
}

}  // namespace attend
