// A differentiable op of our own, softplus(x) = log(1 + exp(x)), with its forward and
// backward, checked by gradcheck against central differences in f64 from user code; then
// a deliberately wrong backward, which gradcheck must catch.
#include <attend/attend.h>

#include <cstdio>

using namespace attend;

// The forward runs without recording (it is one op to autograd); the backward maps the
// output's gradient g to the input's: g * sigmoid(x) = g / (1 + exp(-x)).
Tensor softplus(const Tensor& x, bool wrong_backward = false) {
  Tensor out;
  {
    NoGradGuard off;
    out = log(add(exp(x), 1.0));
  }
  autograd::record("softplus", {x}, out,
                   [x = x.detach(), wrong_backward](const Tensor& g, const autograd::Needs&) {
                     NoGradGuard off;
                     const Tensor s = div(1.0, add(exp(neg(x)), 1.0));
                     return std::vector<Tensor>{mul(g, wrong_backward ? mul(s, 1.01) : s)};
                   });
  return out;
}

int main() {
  Generator gen(3);
  Tensor x = randn({4, 5}, gen, DType::F64);
  x.requires_grad_();
  const GradcheckResult good =
      gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0]); }, {x});
  const GradcheckResult bad =
      gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0], true); }, {x});
  std::printf("softplus: %s (%lld entries, max abs err %.2e)\n", good.passed ? "passed" : "FAILED",
              static_cast<long long>(good.checked), good.max_abs_err);
  std::printf("softplus with a 1%% error in backward: %s\n",
              bad.passed ? "passed (gradcheck missed it)" : "caught");
  return good.passed && !bad.passed ? 0 : 1;
}
