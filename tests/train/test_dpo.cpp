// DPO's pieces (train/dpo.h): the loss and its derivatives against the formula and finite
// differences, stable at large margins; a row's log-probability against log_softmax of the
// logits; the adapters switched off give the base bit for bit.
#include <cmath>

#include "autograd/ops.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "train/dpo.h"

using namespace attend;

TEST_CASE("dpo_terms: the loss, margin, accuracy and derivatives of Rafailov et al.'s formula") {
  // Two pairs: policy and reference log-probs, chosen rows first.
  const std::vector<double> pol = {-10.0, -12.5, -11.0, -12.0}, ref = {-10.5, -12.0, -10.8, -12.4};
  const double beta = 0.3;
  std::vector<double> g;
  const train::DpoStats s = train::dpo_terms(pol, ref, beta, &g);
  const double z0 = beta * ((-10.0 + 10.5) - (-11.0 + 10.8));
  const double z1 = beta * ((-12.5 + 12.0) - (-12.0 + 12.4));
  CHECK(s.pairs == 2);
  CHECK(s.loss == doctest::Approx(std::log1p(std::exp(-z0)) + std::log1p(std::exp(-z1))).epsilon(1e-15));
  CHECK(s.margin == doctest::Approx(z0 + z1).epsilon(1e-15));
  CHECK(s.correct == 1.0);  // z0 > 0, z1 < 0
  // The derivatives of the mean loss against central differences.
  for (size_t i = 0; i < pol.size(); ++i) {
    std::vector<double> up = pol, down = pol;
    const double h = 1e-6;
    up[i] += h, down[i] -= h;
    const double fd =
        (train::dpo_terms(up, ref, beta).loss - train::dpo_terms(down, ref, beta).loss) / 2 / 2 / h;
    INFO(i);
    CHECK(g[i] == doctest::Approx(fd).epsilon(1e-7));
  }
  // Equal policy and reference: log 2 exactly, margin 0, gradient -+beta / (2 B).
  const train::DpoStats e = train::dpo_terms(pol, pol, beta, &g);
  CHECK(e.loss == 2 * std::log(2.0));
  CHECK(e.margin == 0.0);
  CHECK(e.correct == 0.0);
  CHECK(g[0] == -beta / 4);
  CHECK(g[2] == beta / 4);
  // Margins of +-1e4 nats: finite, the loss ~0 or ~|z|, no overflow.
  const train::DpoStats big = train::dpo_terms({0, -1e4 / beta}, {0, 0}, beta, &g);
  CHECK(std::isfinite(big.loss));
  CHECK(big.loss < 1e-300);
  CHECK(g[0] == doctest::Approx(0.0));
  const train::DpoStats bad = train::dpo_terms({-1e4 / beta, 0}, {0, 0}, beta, &g);
  CHECK(bad.loss == doctest::Approx(1e4));
  CHECK(g[0] == doctest::Approx(-beta));
}

TEST_CASE("GPT::sequence_log_probs is the sum of log_softmax(logits) at the scored targets") {
  nn::GPTConfig c = nn::gpt_preset("llama-char");
  c.n_layer = 2, c.n_embd = 32, c.n_head = 2, c.n_kv_head = 1, c.vocab_size = 19, c.block_size = 8;
  nn::GPT model(c, 7);
  model.eval();
  model.to(DType::F64);
  Tensor x = tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}, {2, 8}, DType::I64);
  Tensor y = tensor({-100, -100, 1, 5, 9, 2, 6, -100, -100, 5, 8, 9, 7, 9, 3, 2}, {2, 8},
                    DType::I64);
  const Tensor lp = model.sequence_log_probs(x, y);
  model.keep_logits = true;
  const Tensor logits = kernel::contiguous(model.forward(x).logits);  // (2, 8, 19)
  for (int64_t b = 0; b < 2; ++b) {
    double want = 0;
    for (int64_t t = 0; t < 8; ++t) {
      const int64_t target = y.data<int64_t>()[b * 8 + t];
      if (target == -100) continue;
      const double* row = logits.data<double>() + (b * 8 + t) * 19;
      double mx = row[0], sum = 0;
      for (int v = 0; v < 19; ++v) mx = std::max(mx, row[v]);
      for (int v = 0; v < 19; ++v) sum += std::exp(row[v] - mx);
      want += row[target] - mx - std::log(sum);
    }
    INFO(b);
    CHECK(lp.data<double>()[b] == doctest::Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("AdaptersOff: the LoRA model's forward is its base's, bit for bit, then the adapters again") {
  nn::GPTConfig c = nn::gpt_preset("llama-char");
  c.n_layer = 2, c.n_embd = 32, c.n_head = 2, c.n_kv_head = 1, c.vocab_size = 19, c.block_size = 8;
  nn::GPT base(c, 3);
  base.eval();
  nn::GPTConfig lc = c;
  lc.lora_rank = 2, lc.lora_targets = "q,v,o,down";
  nn::GPT lora(lc, 3);
  lora.eval();
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : lora.named_parameters()) {
      if (name.find(".lora_") == std::string::npos) {
        for (auto& [bn, bp] : base.named_parameters())
          if (bn == name) p.set_data(kernel::clone(bp));
      } else {
        p.set_data(add(p, 0.05));  // B off zero: the adapters change the output
      }
    }
  }
  Tensor x = tensor({3, 1, 4, 1, 5, 9, 2, 6}, {1, 8}, DType::I64);
  NoGradGuard no_grad;
  const Tensor want = base.hidden(x), with = lora.hidden(x);
  CHECK(!test::bit_identical(want, with));
  {
    nn::AdaptersOff off(lora);
    CHECK(test::bit_identical(lora.hidden(x), want));
  }
  CHECK(test::bit_identical(lora.hidden(x), with));
}
