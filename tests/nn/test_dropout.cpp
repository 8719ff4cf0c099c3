// Dropout: inverted, identity in eval, masks a pure function of (seed, step, index).
#include "nn/layers.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
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

TEST_CASE("the vectorised mask equals the rule computed one element at a time") {
  // Element e: word e % 4 of Philox block dropout_counter(e / 4, ...) as a unit float,
  // dropped below p. 1003 elements: whole groups of 32 (the AVX2 path), a partial group and
  // a partial last block (the scalar path).
  for (DType dt : {DType::F32, DType::F64}) {
    Dropout d(0.37);
    d.context->seed = 77;
    d.context->step = 12;
    d.context->micro_step = 3;
    d.index = 5;
    const std::vector<double> m = kernel::cast(d.mask({1003}, dt), DType::F64).to_vector<double>();
    int wrong = 0;
    for (int64_t e = 0; e < 1003; ++e) {
      const PhiloxCounter r =
          philox4x32(dropout_counter(static_cast<uint64_t>(e / 4), 12, 5, 3), philox_key(77));
      const bool drop = u32_to_unit_float(r[static_cast<size_t>(e % 4)]) < 0.37f;
      const double want =
          drop ? 0.0
               : (dt == DType::F32 ? static_cast<double>(static_cast<float>(1 / 0.63)) : 1 / 0.63);
      wrong += m[static_cast<size_t>(e)] != want;
    }
    CHECK(wrong == 0);
  }
}
