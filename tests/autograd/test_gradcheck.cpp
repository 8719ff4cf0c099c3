// gradcheck over the table of every differentiable op, and gradcheck itself: it must
// catch a wrong backward and refuse what it cannot check.
#include "autograd/gradcheck_cases.h"
#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "test_util.h"

using namespace attend;

TEST_CASE("every differentiable op passes gradcheck in f64") {
  const auto& cases = op_gradcheck_cases();
  CHECK(cases.size() >= 50);
  for (const GradcheckCase& c : cases) {
    GradcheckResult r = c.run(0);
    INFO(c.name, " ", c.shapes, ": ", r.message());
    CHECK(r.passed);
    CHECK(r.checked > 0);
  }
}

namespace {
// exp whose backward is off by 1% on every element.
Tensor bad_exp(const Tensor& x) {
  Tensor out = kernel::unary(kernel::Unary::Exp, x);
  autograd::record(
      "bad_exp", {x}, out, [y = out.detach()](const Tensor& g, const autograd::Needs&) {
        return std::vector<Tensor>{kernel::unary(
            kernel::Unary::Affine, kernel::binary(kernel::Binary::Mul, g, y), 1.01, 0)};
      });
  return out;
}
}  // namespace

TEST_CASE("gradcheck catches a wrong backward and names the worst element") {
  Generator gen(1);
  Tensor x = randn({3, 4}, gen, DType::F64).requires_grad_();
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return bad_exp(in[0]); }, {x});
  CHECK(!r.passed);
  CHECK(r.full_jacobian);  // 12 outputs: every entry of the Jacobian compared
  CHECK(r.checked == 12 * 12);
  CHECK(r.input == 0);
  CHECK(r.index.size() == 2);
  CHECK(r.output_index == r.index);  // exp's Jacobian is diagonal
  CHECK(r.analytic == doctest::Approx(1.01 * r.numeric).epsilon(1e-6));
  CHECK(r.message().find("FAILED") != std::string::npos);
  // The same function with the right backward passes.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}).passed);
  // The caller's tensor is untouched.
  CHECK(!x.grad().defined());
}

TEST_CASE("gradcheck samples large inputs and refuses f32") {
  Generator gen(2);
  Tensor big = randn({40, 50}, gen, DType::F64).requires_grad_();
  GradcheckOptions opt;
  opt.max_elements = 100;
  GradcheckResult r =
      gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {big}, opt);
  CHECK(r.passed);
  CHECK(!r.full_jacobian);  // 2000 outputs: one random projection
  CHECK(r.checked == 100);
  Tensor f = randn({3}, gen).requires_grad_();
  test::check_error(
      [&] { gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {f}); },
      "gradcheck: input 0 has dtype f32; gradcheck needs f64 inputs");
}
