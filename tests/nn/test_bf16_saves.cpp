// Under bf16 products, Linear's input and attention's q, k, v are kept for backward as bf16
// (tensor/kernels/kept_operand.h): the same loss and gradients, bit for bit, as keeping them in f32
// (the GEMM rounds them to bf16 anyway), in less memory; under f32 nothing changes.
#include <cstring>

#include "tensor/kernels/kept_operand.h"
#include "nn/gpt.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
namespace k = attend::kernel;

namespace {

struct Run {
  std::vector<std::vector<float>> values;  // the loss, then every parameter's gradient
  size_t forward = 0;  // storage bytes above the model's after forward (what backward keeps)
  size_t peak = 0;     // and at most, through backward
};

// One forward and backward of a fresh model (the same seed, so the same weights and dropout).
Run step(const GPTConfig& c, k::GemmPrecision precision, bool compact) {
  const k::GemmPrecision old_precision = k::set_gemm_precision(precision);
  const bool old_compact = kernel::set_compact_saves(compact);
  Run r;
  {
    GPT m(c, 3);
    m.train();
    Generator g(9);
    const Tensor idx = randint({4, c.block_size}, 0, c.vocab_size, g);
    const Tensor targets = randint({4, c.block_size}, 0, c.vocab_size, g);
    const size_t base = storage_stats().live;
    reset_storage_peak();
    const GPTOutput out = m.forward(idx, targets);
    r.forward = storage_stats().live - base;
    out.loss.backward();
    r.peak = storage_stats().peak - base;
    r.values.push_back(out.loss.to_vector<float>());
    for (const Tensor& p : m.parameters()) r.values.push_back(p.grad().to_vector<float>());
  }
  kernel::set_compact_saves(old_compact);
  k::set_gemm_precision(old_precision);
  return r;
}

size_t differing(const Run& a, const Run& b) {
  REQUIRE(a.values.size() == b.values.size());
  size_t n = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    REQUIRE(a.values[i].size() == b.values[i].size());
    n += std::memcmp(a.values[i].data(), b.values[i].data(), a.values[i].size() * 4) != 0;
  }
  return n;
}

GPTConfig small_gpt() {
  return GPTConfig{.vocab_size = 65,
                   .block_size = 64,
                   .n_layer = 2,
                   .n_head = 4,
                   .n_kv_head = 4,
                   .n_embd = 64,
                   .dropout = 0.1,
                   .bias = true};
}

GPTConfig small_llama() {
  GPTConfig c = gpt_preset("llama-char");
  c.vocab_size = 65, c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2;
  c.n_embd = 64;
  return c;
}

}  // namespace

TEST_CASE("bf16 products: activations kept as bf16 give the same gradients in less memory") {
  for (const GPTConfig& c : {small_gpt(), small_llama()}) {
    CAPTURE(c.arch);
    const Run kept_f32 = step(c, k::GemmPrecision::bf16, false);
    const Run kept_bf16 = step(c, k::GemmPrecision::bf16, true);
    CHECK(differing(kept_f32, kept_bf16) == 0);
    // What a layer keeps for its products' backward, per token: GPT-2 ln_1's output, qkv,
    // the attention's output, ln_2's output, GELU's output (C + 3C + C + C + 4C); the Llama
    // RMSNorm's output, qkv after RoPE (C + 2 KVH HS), the attention's output, RMSNorm's,
    // SwiGLU's (H). After forward exactly half of those bytes are gone (2 of 4 per value),
    // and the peak through backward is lower.
    const int64_t C = c.n_embd, kv = c.n_kv_head * (C / c.n_head);
    const int64_t per_token = c.is_llama() ? 4 * C + 2 * kv + c.mlp_hidden() : 10 * C;
    const size_t halved = static_cast<size_t>(4 * c.block_size * c.n_layer * per_token * 2);
    CAPTURE(kept_f32.forward);
    CAPTURE(kept_bf16.forward);
    CAPTURE(kept_f32.peak);
    CAPTURE(kept_bf16.peak);
    CHECK(kept_f32.forward - kept_bf16.forward == halved);
    CHECK(kept_bf16.peak < kept_f32.peak);
    // and bf16 products change the numbers (this test compares something)
    CHECK(differing(kept_f32, step(c, k::GemmPrecision::f32, false)) > 0);
  }
}

TEST_CASE("f32 products: nothing is kept as bf16") {
  const Run a = step(small_gpt(), k::GemmPrecision::f32, true);
  const Run b = step(small_gpt(), k::GemmPrecision::f32, false);
  CHECK(differing(a, b) == 0);
  CHECK(a.peak == b.peak);
}

TEST_CASE("bf16 products: Linear's weight gradient from a bf16 input has the f32 input's bits "
          "and never widens the input") {
  const int64_t in = 1100;
  for (const int64_t outs : {3, 40})
    for (const int64_t rows : {k::kGemmKBlock, 2 * k::kGemmKBlock + 37}) {
      CAPTURE(outs);
      CAPTURE(rows);
      std::vector<std::vector<float>> grads[2];
      size_t rise = 0;
      for (const bool compact : {false, true}) {
        const test::PrecisionGuard guard(k::GemmPrecision::bf16);
        const bool old = kernel::set_compact_saves(compact);
        Generator g(31);  // the same x, w, b and output gradient both times
        Tensor x = randn({rows, in}, g), w = randn({outs, in}, g), b = randn({outs}, g);
        const Tensor go = randn({rows, outs}, g);
        x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
        const Tensor y = linear(x, w, b);
        const size_t before = storage_stats().live;
        reset_storage_peak();
        y.backward(go);
        if (compact) rise = storage_stats().peak - before;
        for (const Tensor& t : {x, w, b}) grads[compact].push_back(t.grad().to_vector<float>());
        kernel::set_compact_saves(old);
      }
      for (size_t i = 0; i < 3; ++i)
        CHECK(std::memcmp(grads[0][i].data(), grads[1][i].data(), grads[0][i].size() * 4) == 0);
      // Backward's new storage: dx, dW and db, and not one row of x in f32 (the product packs
      // x's bf16 bits; the one-row allowance stands for a bias's column sums' partials).
      const size_t f = 4;
      const size_t bound = static_cast<size_t>(rows * in + outs * in + outs + in) * f;
      CAPTURE(rise);
      CAPTURE(bound);
      CHECK(rise <= bound);
    }
}

TEST_CASE("a backward under another precision than its forward's is an internal error naming both") {
  // Linear saves its input, attention its q, k, v; each read checks the precision it was
  // kept under (Note [Precision is scoped]). Both directions, compact saves on and off.
  for (const bool compact : {true, false})
    for (const k::GemmPrecision fwd : {k::GemmPrecision::bf16, k::GemmPrecision::f32}) {
      const k::GemmPrecision bwd =
          fwd == k::GemmPrecision::bf16 ? k::GemmPrecision::f32 : k::GemmPrecision::bf16;
      CAPTURE(compact);
      CAPTURE(k::gemm_precision_name(fwd));
      const bool old = kernel::set_compact_saves(compact);
      Generator g(5);
      Tensor x = randn({3, 8}, g), w = randn({4, 8}, g);
      x.requires_grad_(), w.requires_grad_();
      Tensor y;
      {
        const test::PrecisionGuard forward(fwd);
        y = sum(linear(x, w, Tensor()));
      }
      const test::PrecisionGuard backward(bwd);
      std::string message;
      try {
        y.backward();
      } catch (const std::logic_error& e) {
        message = e.what();
      }
      kernel::set_compact_saves(old);
      CAPTURE(message);
      CHECK(message.find(std::string("kept for backward under ") + k::gemm_precision_name(fwd) +
                         " products is read under " + k::gemm_precision_name(bwd)) !=
            std::string::npos);
    }
  // And the same precision both ways passes.
  const test::PrecisionGuard both(k::GemmPrecision::bf16);
  Generator g(5);
  Tensor x = randn({3, 8}, g).requires_grad_(), w = randn({4, 8}, g).requires_grad_();
  sum(linear(x, w, Tensor())).backward();
  CHECK(x.grad().defined());
}
