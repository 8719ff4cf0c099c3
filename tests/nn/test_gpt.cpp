// The GPT as a whole: gradcheck of every module, the untrained loss, input errors, dropout
// and the chunked LM head (decoding's weights: tests/infer/test_decoding.cpp).
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/gradcheck_cases.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
using attend::test::check_error;

TEST_CASE("every module passes gradcheck in f64") {
  for (const GradcheckCase& c : module_gradcheck_cases()) {
    GradcheckResult r = c.run(0);
    INFO(c.name, " ", c.shapes, ": ", r.message());
    CHECK(r.passed);
    CHECK(r.checked > 0);
  }
}

TEST_CASE("an untrained GPT's loss on random tokens is ln(V) within 0.1") {
  Generator g(1);
  GPTConfig c{.vocab_size = 1000, .block_size = 32, .n_layer = 2, .n_head = 4, .n_kv_head = 4, .n_embd = 64, .dropout = 0.0, .bias = true};
  GPT m(c, 2);
  Tensor idx = randint({4, 32}, 0, 1000, g), targets = randint({4, 32}, 0, 1000, g);
  const double loss = m.forward(idx, targets).loss.item();
  CHECK(std::abs(loss - std::log(1000.0)) < 0.1);
}

TEST_CASE("sequences longer than block_size and ids outside the vocabulary are errors") {
  GPT m(GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true});
  check_error(
      [&] {
        m.forward(zeros({1, 9}, DType::I64));
      },
      "GPT: sequence length 9 exceeds block_size 8");
  check_error(
      [&] {
        m.forward(tensor({1, 2, 11}, {1, 3}, DType::I64));
      },
      "GPT: token id 11 at (0, 2) is out of range for vocab_size 11");
  check_error(
      [&] {
        m.forward(zeros({1, 3}));
      },
      "GPT: expected token ids of shape (B, T) and an integer dtype");
}

TEST_CASE("dropout makes train mode stochastic and eval mode deterministic") {
  Generator g(3);
  GPT m(GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 8, .dropout = 0.5, .bias = true}, 1);
  Tensor idx = randint({2, 8}, 0, 11, g);
  Tensor a = m.forward(idx).logits;
  m.dropout_context->step = 1;
  Tensor b = m.forward(idx).logits;
  CHECK(!test::bit_identical(a, b));
  m.dropout_context->step = 0;
  CHECK(test::bit_identical(a, m.forward(idx).logits));
  m.eval();
  CHECK(test::bit_identical(m.forward(idx).logits, m.forward(idx).logits));
}

TEST_CASE("the chunked LM head loss equals logits then cross_entropy bit for bit") {
  // GPT::forward with targets runs linear_cross_entropy (no (B, T, V) logits); keep_logits
  // runs lm_head and cross_entropy. Same loss and same gradients, to the bit.
  Generator g(6);
  GPT m(GPTConfig{.vocab_size = 37, .block_size = 32, .n_layer = 2, .n_head = 4, .n_kv_head = 4, .n_embd = 32, .dropout = 0.1, .bias = true}, 2);
  Tensor idx = randint({3, 32}, 0, 37, g), tgt = randint({3, 32}, 0, 37, g);
  std::vector<std::vector<Tensor>> res(2);
  for (int keep = 0; keep < 2; ++keep) {
    m.keep_logits = keep == 1;
    m.zero_grad();
    GPTOutput out = m.forward(idx, tgt);
    CHECK(out.logits.defined() == (keep == 1));
    out.loss.backward();
    res[keep].push_back(out.loss.detach());
    for (const Tensor& p : m.parameters()) res[keep].push_back(p.grad());
  }
  m.keep_logits = false;
  REQUIRE(res[0].size() == res[1].size());
  for (size_t i = 0; i < res[0].size(); ++i) {
    CAPTURE(i);
    CHECK(test::bit_identical(res[0][i], res[1][i]));
  }
}

