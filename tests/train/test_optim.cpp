// AdamW and SGD against hand-computed steps, the schedule, clipping, accumulation.
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "train/optim.h"

using namespace attend;
using namespace attend::train;

TEST_CASE("AdamW: two steps against hand-computed values") {
  // One decayed matrix and one undecayed bias. lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.5.
  Tensor w = tensor({1.0, -2.0}, {1, 2}, DType::F64).requires_grad_();
  Tensor b = tensor({0.5}, {1}, DType::F64).requires_grad_();
  AdamW opt({{"w", w}, {"b", b}}, {0.9, 0.999, 1e-8, 0.5});
  w.set_grad(tensor({0.2, -0.4}, {1, 2}, DType::F64));
  b.set_grad(tensor({1.0}, {1}, DType::F64));
  opt.step(0.1);
  // Step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2: update = lr * g / (|g| + eps).
  // w: decay first: w * (1 - 0.1 * 0.5) = w * 0.95, then minus 0.1 * sign(g).
  CHECK(w.at({0, 0}) == doctest::Approx(0.95 * 1.0 - 0.1 * 0.2 / (0.2 + 1e-8)).epsilon(1e-14));
  CHECK(w.at({0, 1}) == doctest::Approx(0.95 * -2.0 + 0.1 * 0.4 / (0.4 + 1e-8)).epsilon(1e-14));
  CHECK(b.at({0}) == doctest::Approx(0.5 - 0.1 * 1.0 / (1.0 + 1e-8)).epsilon(1e-14));  // no decay
  // Step 2 with g = 0.5 on the bias: m = 0.9*0.1 + 0.1*0.5 = 0.14, v = 0.999*0.001 + 0.001*0.25
  b.set_grad(tensor({0.5}, {1}, DType::F64));
  w.set_grad(Tensor());
  const double b1 = b.at({0});
  opt.step(0.1);
  const double m = 0.14, v = 0.999 * 0.001 + 0.001 * 0.25;
  const double m_hat = m / (1 - 0.81), v_hat = v / (1 - 0.999 * 0.999);
  CHECK(b.at({0}) == doctest::Approx(b1 - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8)).epsilon(1e-12));
  CHECK(opt.steps() == 2);
}

TEST_CASE("SGD with momentum: hand-computed steps") {
  Tensor w = tensor({1.0}, {1, 1}, DType::F64).requires_grad_();
  SGD opt({{"w", w}}, 0.9, 0.0);
  w.set_grad(tensor({1.0}, {1, 1}, DType::F64));
  opt.step(0.1);  // buf = 1, w = 1 - 0.1
  CHECK(w.item() == doctest::Approx(0.9).epsilon(1e-15));
  opt.step(0.1);  // buf = 0.9 + 1 = 1.9, w = 0.9 - 0.19
  CHECK(w.item() == doctest::Approx(0.71).epsilon(1e-15));
}

TEST_CASE("the tied wte/lm_head tensor is one parameter, decayed and updated once") {
  nn::GPT m(nn::GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true});
  auto named = m.named_parameters();
  int count = 0;
  for (auto& [n, p] : named)
    if (p.is_same(m.lm_head->weight)) ++count;
  CHECK(count == 1);
  AdamW opt(named, {});
  CHECK(opt.state().size() == 2 * named.size());
}

TEST_CASE("nanoGPT's schedule: warmup, cosine, floor - constant when off") {
  LrSchedule s{1e-3, 1e-4, 100, 2000, true};
  CHECK(s.at(0) == doctest::Approx(1e-3 * 1 / 101.0).epsilon(1e-15));
  CHECK(s.at(99) == doctest::Approx(1e-3 * 100 / 101.0).epsilon(1e-15));
  CHECK(s.at(100) == doctest::Approx(1e-3).epsilon(1e-15));
  CHECK(s.at(1050) == doctest::Approx(1e-4 + 0.5 * 0.9e-3).epsilon(1e-12));  // halfway: cos = 0
  CHECK(s.at(2000) == doctest::Approx(1e-4).epsilon(1e-12));
  CHECK(s.at(5000) == 1e-4);
  LrSchedule c{3e-4, 0, 10, 20, false};
  CHECK(c.at(0) == 3e-4);
  CHECK(c.at(15) == 3e-4);
}

TEST_CASE("clip_grad_norm returns the norm before clipping and scales to max_norm") {
  Tensor a = zeros({2}, DType::F64).requires_grad_(), b = zeros({1}, DType::F64).requires_grad_();
  a.set_grad(tensor({3, 0}, {2}, DType::F64));
  b.set_grad(tensor({4}, {1}, DType::F64));
  CHECK(clip_grad_norm({a, b}, 10.0) == doctest::Approx(5.0));
  CHECK(a.grad().at({0}) == 3.0);  // under the limit: untouched
  CHECK(clip_grad_norm({a, b}, 1.0) == doctest::Approx(5.0));
  CHECK(std::sqrt(a.grad().at({0}) * a.grad().at({0}) + b.grad().at({0}) * b.grad().at({0})) ==
        doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("an update with grad_scale equals clipping the gradients first, bit for bit") {
  // train_step passes the clipping factor into the update instead of a separate pass.
  for (const std::string name : {"adamw", "sgd"}) {
    CAPTURE(name);
    Generator g(5);
    const Tensor w0 = randn({300, 70}, g), grad = randn({300, 70}, g);
    Tensor a = kernel::clone(w0).requires_grad_(), b = kernel::clone(w0).requires_grad_();
    a.set_grad(kernel::clone(grad));
    b.set_grad(kernel::clone(grad));
    auto make = [&](const Tensor& p) -> std::unique_ptr<Optimizer> {
      const nn::NamedTensors named{{"w", p}};
      if (name == "sgd") return std::make_unique<SGD>(named, 0.9, 0.1);
      return std::make_unique<AdamW>(named, AdamWOptions{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    };
    auto oa = make(a), ob = make(b);
    for (int step = 0; step < 3; ++step) {  // a fresh gradient each step, as in training
      a.set_grad(kernel::clone(grad));
      b.set_grad(kernel::clone(grad));
      const double norm = grad_norm({a});
      const double scale = clip_scale(norm, 1.0);
      REQUIRE(scale < 1.0);
      CHECK(clip_grad_norm({b}, 1.0) == norm);
      oa->step(1e-2, scale);
      ob->step(1e-2);
    }
    CHECK(a.to_vector<float>() == b.to_vector<float>());
  }
}

TEST_CASE("optimizers name the first parameter their step left non-finite") {
  for (int which = 0; which < 2; ++which) {
    Tensor a = ones({3}).requires_grad_(), b = ones({2, 2}).requires_grad_();
    nn::NamedTensors named = {{"a", a}, {"b", b}};
    std::unique_ptr<Optimizer> opt;
    if (which == 0) opt = std::make_unique<SGD>(named, 0.0, 0.0);
    if (which == 1) opt = std::make_unique<AdamW>(named, AdamWOptions{});
    a.set_grad(ones({3}));
    b.set_grad(ones({2, 2}));
    NoGradGuard ng;
    opt->step(1e-3);
    CHECK(opt->non_finite().empty());
    b.set_grad(tensor({1, 1, 1e30, 1}, {2, 2}));
    // SGD: only b overflows (1 - 1e10 * 1e30). AdamW normalises the gradient, so at lr 1e300
    // every parameter overflows and the first one, a, is named.
    opt->step(which == 0 ? 1e10 : 1e300);
    CHECK(opt->non_finite() == (which == 0 ? "b" : "a"));
  }
}
