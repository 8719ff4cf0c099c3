// Llama and Mistral as configs of the one model: the published parameter counts, the
// equivalences that hold exactly (GQA = MHA with repeated K/V weights, a window as wide as
// the sequence = no window, the fused path = the composed one) and the rolling cache.
#include <cmath>

#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
namespace k = attend::kernel;

namespace {

// A small Llama: V 13, block 16, 2 layers, 4 heads of 4, H 24.
GPTConfig tiny_llama(int64_t kv_heads, int64_t window = 0, bool tied = true) {
  GPTConfig c = gpt_preset("llama-char");
  c.vocab_size = 13, c.block_size = 16, c.n_layer = 2, c.n_head = 4, c.n_kv_head = kv_heads;
  c.n_embd = 16, c.hidden_dim = 24, c.sliding_window = window, c.tie_embeddings = tied;
  return c;
}

// Every parameter N(0, 0.3) in f64 (unit norm gains would hide a wrong norm).
void randomize(Module& m, uint64_t seed) {
  m.to(DType::F64);
  Generator g(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.set_data(normal(p.shape(), 0.0, 0.3, g, DType::F64));
}

Tensor logits(const GPT& m, const Tensor& idx) {
  NoGradGuard no_grad;
  return m.forward(idx).logits;
}

double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

TEST_CASE("Llama 2 7B, Llama 3 8B and Mistral 7B have their published parameter counts") {
  CHECK(count_parameters(gpt_preset("llama2-7b")).total() == 6738415616);
  CHECK(count_parameters(gpt_preset("llama3-8b")).total() == 8030261248);
  CHECK(count_parameters(gpt_preset("mistral-7b")).total() == 7241732096);
  // llama2.c's stories15M: 15,191,712 (its model.py with dim 288, 6 layers, vocab 32000).
  CHECK(count_parameters(gpt_preset("stories15m")).total() == 15191712);
  // Llama's hidden-size rule: 2/3 of 4C rounded up to multiple_of (Llama 2 7B's 11008).
  GPTConfig c = gpt_preset("llama2-7b");
  c.hidden_dim = 0;
  CHECK(c.mlp_hidden() == 11008);
  c = gpt_preset("llama-char");
  c.hidden_dim = 0, c.multiple_of = 32;
  CHECK(c.mlp_hidden() == 352);
}

TEST_CASE("a Llama's modules hold exactly count_parameters, tied or not, GQA or not") {
  for (const GPTConfig& c : {tiny_llama(4), tiny_llama(2, 0, false), tiny_llama(1, 5)}) {
    GPT m(c, 1);
    CHECK(m.num_parameters() == count_parameters(c).total());
    const NamedTensors sd = m.state_dict();
    bool has_wpe = false, has_bias = false;
    for (const auto& [name, t] : sd) {
      has_wpe |= name.find("wpe") != std::string::npos;
      has_bias |= name.find("bias") != std::string::npos;
    }
    CHECK(!has_wpe);   // positions enter by RoPE only
    CHECK(!has_bias);  // no biases anywhere
    const bool tied = m.lm_head->weight.impl() == m.transformer->wte->weight.impl();
    CHECK(tied == c.tie_embeddings);
  }
}

TEST_CASE("a GQA or MQA Llama equals the MHA Llama whose K/V weights repeat over each group") {
  const Tensor idx = tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 6}, DType::I64);
  for (int64_t kvh : {2, 1}) {
    CAPTURE(kvh);
    GPT gqa(tiny_llama(kvh), 1), mha(tiny_llama(4), 1);
    randomize(gqa, 7);
    mha.to(DType::F64);
    const int64_t C = 16, HS = 4, NH = 4, G = NH / kvh, kv = kvh * HS;
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : gqa.state_dict()) {
      if (name.find("c_attn.weight") == std::string::npos) {
        state[name] = t;
        continue;
      }
      // [q | k | v] with k and v of kvh heads -> [q | k' | v'] of NH heads, head h of k'
      // and v' being head h / G of k and v (Llama's repeat_kv).
      std::vector<Tensor> rows{k::narrow(t, 0, 0, C)};
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < NH; ++h) rows.push_back(k::narrow(t, 0, C + part * kv + h / G * HS, HS));
      state[name] = k::contiguous(cat(rows, 0));
    }
    mha.load_state_dict(state);
    CHECK(max_diff(logits(gqa, idx), logits(mha, idx)) < 1e-12);
  }
}

TEST_CASE("a Llama's fused attention equals its composed ops (RoPE, GQA, window, f32)") {
  for (int64_t window : {0, 3}) {
    CAPTURE(window);
    GPT m(tiny_llama(2, window), 3);
    Generator g(5);
    const Tensor idx = randint({2, 16}, 0, 13, g), targets = randint({2, 16}, 0, 13, g);
    const Tensor fused = logits(m, idx);
    for (size_t l = 0; l < 2; ++l) (*m.transformer->h)[l].attn->fused = false;
    const Tensor composed = logits(m, idx);
    CHECK(max_diff(fused, composed) < 1e-5);
    // Sanity of the comparison: the logits are of order 1, not all zero.
    CHECK(max_diff(fused, zeros(fused.shape(), fused.dtype())) > 0.1);
  }
}

TEST_CASE("sliding window: a Llama equals full causal attention when W >= T, differs when W < T") {
  Generator g(9);
  const Tensor idx = randint({2, 16}, 0, 13, g);
  GPT full(tiny_llama(2), 4);
  const Tensor want = logits(full, idx);
  for (int64_t W : {16, 40}) {
    GPT m(tiny_llama(2, W), 4);  // the same seed: the same weights
    CHECK(test::bit_identical(logits(m, idx), want));
  }
  GPT narrow_window(tiny_llama(2, 4), 4);
  const Tensor got = logits(narrow_window, idx);
  // The first 4 positions see the same keys either way; later ones do not.
  CHECK(test::bit_identical(k::narrow(got, 1, 0, 4), k::narrow(want, 1, 0, 4)));
  CHECK(max_diff(k::narrow(got, 1, 4, 12), k::narrow(want, 1, 4, 12)) > 1e-3);
}

TEST_CASE("decoding from caches equals a full recomputation, the window's cache rolling") {
  // One token at a time through 16 positions; the window model's caches keep 5 keys.
  for (int64_t window : {0, 5}) {
    CAPTURE(window);
    GPT m(tiny_llama(2, window), 11);
    randomize(m, 12);
    m.eval();
    Generator g(13);
    const Tensor idx = randint({1, 16}, 0, 13, g);
    const Tensor full = logits(m, idx);
    std::vector<KVCache> caches;
    NoGradGuard no_grad;
    for (int64_t t = 0; t < 16; ++t) {
      const Tensor step = m.forward(k::narrow(idx, 1, t, 1), Tensor(), nullptr, &caches).logits;
      CAPTURE(t);
      CHECK(max_diff(step, k::narrow(full, 1, t, 1)) < 1e-10);
      CHECK(caches[0].position == t + 1);
      CHECK(caches[0].length() == (window > 0 ? std::min<int64_t>(window, t + 1) : t + 1));
    }
  }
}

TEST_CASE("a sliding-window Llama decodes past block_size, and others refuse with the reason") {
  // Past block_size (16) the window model's rolling caches go on. Its receptive field is
  // n_layer (W - 1) + 1 = 7 tokens, and RoPE makes scores depend on distances only, so the
  // logits at any position equal a fresh forward of the last 7 (or 16) tokens.
  GPT m(tiny_llama(2, 4), 21);
  randomize(m, 22);
  m.eval();
  Generator g(23);
  const Tensor idx = randint({1, 40}, 0, 13, g);
  std::vector<KVCache> caches;
  NoGradGuard no_grad;
  for (int64_t t = 0; t < 40; ++t) {
    const Tensor step = m.forward(k::narrow(idx, 1, t, 1), Tensor(), nullptr, &caches).logits;
    if (t < 20) continue;
    CAPTURE(t);
    for (int64_t span : {7, 16}) {
      const Tensor fresh = m.forward(k::narrow(idx, 1, t + 1 - span, span)).logits;
      CHECK(max_diff(step, k::narrow(fresh, 1, span - 1, 1)) < 1e-9);
    }
  }
  CHECK(caches[0].position == 40);
  CHECK(caches[0].length() == 4);

  GPT plain(tiny_llama(2), 21);
  std::vector<KVCache> c2;
  plain.forward(zeros({1, 16}, DType::I64), Tensor(), nullptr, &c2);
  test::check_error([&] { plain.forward(zeros({1, 1}, DType::I64), Tensor(), nullptr, &c2); },
                    "GPT: sequence length 17 exceeds block_size 16 (decoding past the context "
                    "needs a sliding-window model)");
}

TEST_CASE("Llama configs refuse what a Llama cannot be, naming the field") {
  GPTConfig c = tiny_llama(2);
  c.bias = true;
  test::check_error([&] { c.validate("--"); }, "--bias must be false for arch llama");
  c = tiny_llama(2);
  c.n_head = 16, c.n_kv_head = 16, c.n_embd = 48;  // head size 3
  test::check_error([&] { c.validate("--"); }, "arch llama needs an even head size for RoPE");
  c = tiny_llama(2);
  c.rope_theta = 1;
  test::check_error([&] { c.validate("--"); }, "--rope_theta must be in (1, 1e12), got 1");
  c = gpt_preset("cpu-char");
  c.sliding_window = 4;
  test::check_error([&] { c.validate("--"); }, "--sliding_window needs arch llama");
  c = gpt_preset("cpu-char");
  c.tie_embeddings = false;
  test::check_error([&] { c.validate("--"); }, "--tie_embeddings must be true for arch gpt2");
  c = gpt_preset("cpu-char");
  c.arch = "mamba";
  test::check_error([&] { c.validate("--"); }, "--arch must be gpt2 or llama, got 'mamba'");
}
