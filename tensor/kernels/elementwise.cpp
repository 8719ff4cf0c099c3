// Elementwise kernels: unary maps and broadcasting binary maps, f32 and f64.
//
// GELU is GPT-2's tanh approximation:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)),
// which needs one exp and no cancellation for large negative x:
//   gelu(x)  = x s,  s = sigmoid(2u)
//   gelu'(x) = s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// In f32 the exp is exp_f32 below, written so the compiler vectorises it (libm's expf
// is a call per element; GELU took 30% of a training step with it). f64 uses std::exp.
// GCC vectorises these loops only under -fno-trapping-math (tensor/CMakeLists.txt sets it
// for this file): without it GELU ran one element at a time, 2.9 ns each. Vector lanes and
// the scalar remainder compute the same bits (tested), so results do not depend on where
// a thread's range starts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/kernels.h"
#include "tensor/kernels/iter.h"
#include "tensor/kernels/rowmath.h"

namespace attend::kernel {

namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

template <typename T>
[[gnu::always_inline]] inline T gelu(T x) {
  const T u = T(kGeluC) * (x + T(kGeluA) * x * x * x);
  return x / (T(1) + exp_fast(T(-2) * u));
}

template <typename T>
[[gnu::always_inline]] inline T gelu_grad(T x) {
  const T u = T(kGeluC) * (x + T(kGeluA) * x * x * x);
  const T s = T(1) / (T(1) + exp_fast(T(-2) * u));
  return s + x * s * (T(1) - s) * T(2 * kGeluC) * (T(1) + T(3 * kGeluA) * x * x);
}

const char* unary_name(Unary op) {
  switch (op) {
    case Unary::Neg:
      return "neg";
    case Unary::Exp:
      return "exp";
    case Unary::Log:
      return "log";
    case Unary::Sqrt:
      return "sqrt";
    case Unary::Tanh:
      return "tanh";
    case Unary::Relu:
      return "relu";
    case Unary::Gelu:
      return "gelu";
    case Unary::Pow:
      return "pow";
    case Unary::Affine:
      return "affine";
    case Unary::Rdiv:
      return "rdiv";
    case Unary::Abs:
      return "abs";
  }
  return "?";
}

template <typename T, typename F>
void unary_loop(const Tensor& out, const Tensor& x, F f) {
  StridedLoop<2> loop(out.shape(), {out.strides(), x.strides()});
  T* o = out.data<T>();
  const T* in = x.data<T>();
  loop.parallel_run([&](const auto& off, int64_t n, const auto& st) {
    T* op = o + off[0];
    const T* ip = in + off[1];
    if (st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) op[i] = f(ip[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) op[i] = f(ip[i * st[1]]);
    }
  });
}

template <typename T, typename F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  StridedLoop<3> loop(out.shape(),
                      {out.strides(), broadcast_strides(a.shape(), a.strides(), out.shape()),
                       broadcast_strides(b.shape(), b.strides(), out.shape())});
  T* o = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  loop.parallel_run([&](const auto& off, int64_t n, const auto& st) {
    T* op = o + off[0];
    const T* ap = pa + off[1];
    const T* bp = pb + off[2];
    if (st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) op[i] = f(ap[i], bp[i]);
    } else if (st[1] == 1 && st[2] == 0) {
      const T bv = bp[0];
      for (int64_t i = 0; i < n; ++i) op[i] = f(ap[i], bv);
    } else {
      for (int64_t i = 0; i < n; ++i) op[i] = f(ap[i * st[1]], bp[i * st[2]]);
    }
  });
}

}  // namespace

void gelu_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

Tensor unary(Unary op, const Tensor& x, double p, double q) {
  const char* name = unary_name(op);
  return dispatch_float(x.dtype(), name, [&]<typename T>() {
    Tensor out = empty(x.shape(), x.dtype());
    const T tp = static_cast<T>(p), tq = static_cast<T>(q);
    switch (op) {
      case Unary::Neg:
        unary_loop<T>(out, x, [](T v) { return -v; });
        break;
      case Unary::Exp:
        unary_loop<T>(out, x, [](T v) { return std::exp(v); });
        break;
      case Unary::Log:
        unary_loop<T>(out, x, [](T v) { return std::log(v); });
        break;
      case Unary::Sqrt:
        unary_loop<T>(out, x, [](T v) { return std::sqrt(v); });
        break;
      case Unary::Tanh:
        unary_loop<T>(out, x, [](T v) { return std::tanh(v); });
        break;
      case Unary::Relu:
        unary_loop<T>(out, x, [](T v) { return v > T(0) ? v : T(0); });
        break;
      case Unary::Gelu:
        unary_loop<T>(out, x, [](T v) { return gelu(v); });
        break;
      case Unary::Abs:
        unary_loop<T>(out, x, [](T v) { return std::abs(v); });
        break;
      case Unary::Pow:
        if (p == 2.0) {
          unary_loop<T>(out, x, [](T v) { return v * v; });
        } else {
          unary_loop<T>(out, x, [tp](T v) { return std::pow(v, tp); });
        }
        break;
      case Unary::Affine:
        unary_loop<T>(out, x, [tp, tq](T v) { return v * tp + tq; });
        break;
      case Unary::Rdiv:
        unary_loop<T>(out, x, [tp](T v) { return tp / v; });
        break;
    }
    return out;
  });
}

const char* binary_name(Binary op) {
  switch (op) {
    case Binary::Add:
      return "add";
    case Binary::Sub:
      return "sub";
    case Binary::Mul:
      return "mul";
    case Binary::Div:
      return "div";
    case Binary::ReluGrad:
      return "relu_backward";
    case Binary::GeluGrad:
      return "gelu_backward";
    case Binary::TanhGrad:
      return "tanh_backward";
  }
  return "?";
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  ATTEND_CHECK(a.dtype() == b.dtype(), name, ": expected operands of one dtype, got ",
               dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  return dispatch_float(a.dtype(), name, [&]<typename T>() {
    Tensor out = empty(shape, a.dtype());
    switch (op) {
      case Binary::Add:
        binary_loop<T>(out, a, b, [](T x, T y) { return x + y; });
        break;
      case Binary::Sub:
        binary_loop<T>(out, a, b, [](T x, T y) { return x - y; });
        break;
      case Binary::Mul:
        binary_loop<T>(out, a, b, [](T x, T y) { return x * y; });
        break;
      case Binary::Div:
        binary_loop<T>(out, a, b, [](T x, T y) { return x / y; });
        break;
      case Binary::ReluGrad:
        binary_loop<T>(out, a, b, [](T g, T x) { return x > T(0) ? g : T(0); });
        break;
      case Binary::GeluGrad:
        binary_loop<T>(out, a, b, [](T g, T x) { return g * gelu_grad(x); });
        break;
      case Binary::TanhGrad:
        binary_loop<T>(out, a, b, [](T g, T y) { return g * (T(1) - y * y); });
        break;
    }
    return out;
  });
}

}  // namespace attend::kernel
