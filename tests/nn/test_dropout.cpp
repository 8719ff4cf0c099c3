// Dropout: inverted, identity in eval, masks a pure function of (seed, step, index).
#include "nn/layers.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;

TEST_CASE("dropout is the identity in eval mode and at p = 0") {
  Dropout d(0.5);
  d.eval();
  Tensor x = ones({100});
  CHECK(d.forward(x).is_same(x));
  Dropout none(0.0);
  CHECK(none.forward(x).is_same(x));
}

TEST_CASE("kept elements are scaled by 1/(1-p) - the kept fraction is 1-p within 4 sigma") {
  const double p = 0.3;
  Dropout d(p);
  const int64_t n = 1 << 20;
  std::vector<float> y = d.forward(ones({n})).to_vector<float>();
  int64_t kept = 0, wrong_scale = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      if (v != static_cast<float>(1.0 / (1.0 - p))) ++wrong_scale;
    }
  }
  CHECK(wrong_scale == 0);
  const double sigma = std::sqrt(n * p * (1 - p));
  CHECK(std::abs(kept - n * (1 - p)) < 4 * sigma);
}

TEST_CASE("masks are a pure function of (seed, step, micro-step, index)") {
  Dropout a(0.5), b(0.5);
  a.context->seed = b.context->seed = 42;
  a.context->step = b.context->step = 7;
  CHECK(test::bit_identical(a.mask({1000}, DType::F32), b.mask({1000}, DType::F32)));
  Tensor base = a.mask({1000}, DType::F32);
  b.context->step = 8;
  CHECK(!test::bit_identical(base, b.mask({1000}, DType::F32)));
  b.context->step = 7;
  b.index = 1;
  CHECK(!test::bit_identical(base, b.mask({1000}, DType::F32)));
  b.index = 0;
  b.context->micro_step = 1;
  CHECK(!test::bit_identical(base, b.mask({1000}, DType::F32)));
  b.context->micro_step = 0;
  b.context->seed = 43;
  CHECK(!test::bit_identical(base, b.mask({1000}, DType::F32)));
}

TEST_CASE("gradient flows through the kept elements only") {
  Dropout d(0.5);
  Tensor x = ones({64}, DType::F64).requires_grad_();
  Tensor y = d.forward(x);
  sum(y).backward();
  CHECK(test::bit_identical(x.grad(), d.mask({64}, DType::F64)));
}
