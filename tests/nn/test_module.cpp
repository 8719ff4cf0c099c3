// Module registry: GPT-2's names, tying, state_dict, counts.
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
using attend::test::check_error;

namespace {
GPTConfig tiny() { return GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true}; }
}  // namespace

TEST_CASE("GPT parameters carry GPT-2's state_dict names, lm_head tied to wte") {
  GPT m(tiny());
  std::vector<std::string> names;
  for (auto& [n, _] : m.state_dict()) names.push_back(n);
  const std::vector<std::string> want = {"transformer.wte.weight",
                                         "transformer.wpe.weight",
                                         "transformer.h.0.ln_1.weight",
                                         "transformer.h.0.ln_1.bias",
                                         "transformer.h.0.attn.c_attn.weight",
                                         "transformer.h.0.attn.c_attn.bias",
                                         "transformer.h.0.attn.c_proj.weight",
                                         "transformer.h.0.attn.c_proj.bias",
                                         "transformer.h.0.ln_2.weight",
                                         "transformer.h.0.ln_2.bias",
                                         "transformer.h.0.mlp.c_fc.weight",
                                         "transformer.h.0.mlp.c_fc.bias",
                                         "transformer.h.0.mlp.c_proj.weight",
                                         "transformer.h.0.mlp.c_proj.bias",
                                         "transformer.h.1.ln_1.weight",
                                         "transformer.h.1.ln_1.bias",
                                         "transformer.h.1.attn.c_attn.weight",
                                         "transformer.h.1.attn.c_attn.bias",
                                         "transformer.h.1.attn.c_proj.weight",
                                         "transformer.h.1.attn.c_proj.bias",
                                         "transformer.h.1.ln_2.weight",
                                         "transformer.h.1.ln_2.bias",
                                         "transformer.h.1.mlp.c_fc.weight",
                                         "transformer.h.1.mlp.c_fc.bias",
                                         "transformer.h.1.mlp.c_proj.weight",
                                         "transformer.h.1.mlp.c_proj.bias",
                                         "transformer.ln_f.weight",
                                         "transformer.ln_f.bias",
                                         "lm_head.weight"};
  CHECK(names == want);
  auto sd = m.state_dict();
  CHECK(sd.front().second.is_same(sd.back().second));  // one tensor, two names
  CHECK(m.named_parameters().size() == want.size() - 1);
  CHECK(m.named_parameters().back().first == "transformer.ln_f.bias");
  // Layouts: Linear (out, in); c_attn packs q, k, v.
  CHECK(m.transformer->h->operator[](0).attn->c_attn->weight.shape() == Shape{24, 8});
  CHECK(m.transformer->wte->weight.shape() == Shape{11, 8});
  CHECK(m.transformer->wpe->weight.shape() == Shape{8, 8});
}

TEST_CASE("num_parameters counts the tied tensor once and equals count_parameters") {
  for (GPTConfig c : {tiny(), GPTConfig{.vocab_size = 13, .block_size = 6, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .dropout = 0.1, .bias = true},
                      GPTConfig{.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 4, .n_kv_head = 1, .n_embd = 16, .dropout = 0.0, .bias = false}}) {
    GPT m(c);
    CAPTURE(c.n_kv_head);
    CAPTURE(c.bias);
    CHECK(m.num_parameters() == count_parameters(c).total());
  }
}

TEST_CASE("published parameter counts") {
  CHECK(count_parameters(gpt_preset("gpt2")).total() == 124439808);
  ParameterCount g3 = count_parameters(gpt_preset("gpt3-175b"));
  CHECK(g3.attention_matrices() == 57982058496);
  CHECK(g3.token_embedding == 617558016);
  // The other GPT-2 sizes, usually quoted as 355M, 774M and 1558M:
  CHECK(count_parameters(gpt_preset("gpt2-medium")).total() == 354823168);
  CHECK(count_parameters(gpt_preset("gpt2-large")).total() == 774030080);
  CHECK(count_parameters(gpt_preset("gpt2-xl")).total() == 1557611200);
}

TEST_CASE("state_dict round trip, and load errors name every bad entry") {
  GPT a(tiny(), 1), b(tiny(), 2);
  CHECK(!test::bit_identical(a.transformer->wte->weight, b.transformer->wte->weight));
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : a.state_dict()) state[n] = kernel::clone(t);
  b.load_state_dict(state);
  for (auto& [n, t] : b.state_dict()) {
    INFO(n);
    CHECK(test::bit_identical(t, state[n]));
  }
  // Tying survives loading.
  CHECK(b.lm_head->weight.is_same(b.transformer->wte->weight));

  auto bad = state;
  bad.erase("transformer.h.1.ln_2.bias");
  bad["transformer.h.0.attn.c_proj.weight"] = zeros({8, 9});
  bad["transformer.extra"] = zeros({1});
  check_error([&] { b.load_state_dict(bad); }, "missing: transformer.h.1.ln_2.bias");
  check_error([&] { b.load_state_dict(bad); }, "unexpected: transformer.extra");
  check_error([&] { b.load_state_dict(bad); },
              "wrong shape: transformer.h.0.attn.c_proj.weight (expected (8,8), got (8,9))");
}

TEST_CASE("train/eval reach every submodule - to(f64) keeps ties") {
  GPT m(tiny());
  m.eval();
  for (auto& [name, mod] : m.named_modules()) {
    INFO(name);
    CHECK(!mod->is_training());
  }
  m.train();
  CHECK(m.transformer->h->operator[](1).mlp->dropout->is_training());
  m.to(DType::F64);
  CHECK(m.lm_head->weight.dtype() == DType::F64);
  CHECK(m.lm_head->weight.is_same(m.transformer->wte->weight));
}

TEST_CASE(
    "GPT-2 initialisation: N(0, 0.02), c_proj N(0, 0.02/sqrt(2 n_layer)), zero biases, unit "
    "gains") {
  GPTConfig c{512, 64, 4, 4, 4, 128, 0.0, true};
  GPT m(c, 3);
  auto stddev = [](const Tensor& t) {
    double s = 0, ss = 0;
    auto v = t.to_vector<double>();
    for (double x : v) s += x;
    const double mean = s / v.size();
    for (double x : v) ss += (x - mean) * (x - mean);
    return std::sqrt(ss / v.size());
  };
  // (512 * 128 = 65536 samples: the std of the sample std is ~0.02 / sqrt(2 * 65536).)
  CHECK(stddev(m.transformer->wte->weight) == doctest::Approx(0.02).epsilon(0.02));
  CHECK(stddev(m.transformer->h->operator[](0).attn->c_proj->weight) ==
        doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(stddev(m.transformer->h->operator[](3).mlp->c_proj->weight) ==
        doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(stddev(m.transformer->h->operator[](2).mlp->c_fc->weight) ==
        doctest::Approx(0.02).epsilon(0.05));
  CHECK(m.transformer->h->operator[](0).attn->c_attn->bias.to_vector<float>() ==
        std::vector<float>(384, 0));
  CHECK(m.transformer->ln_f->weight.to_vector<float>() == std::vector<float>(128, 1));
  // Same seed, same model.
  GPT again(c, 3);
  CHECK(test::bit_identical(again.transformer->wpe->weight, m.transformer->wpe->weight));
}

TEST_CASE("config and preset errors name the field and the value") {
  struct Case {
    GPTConfig config;
    const char* message;
  };
  const Case cases[] = {
      {{11, 8, 2, 3, 3, 8, 0.0, true}, "GPTConfig: n_embd 8 must be divisible by n_head 3"},
      {{11, 8, 2, 4, 3, 8, 0.0, true}, "GPTConfig: n_head 4 must be divisible by n_kv_head 3"},
      {{11, 8, 0, 2, 2, 8, 0.0, true}, "GPTConfig: n_layer must be positive, got 0"},
      {{11, 8, 1, 2, 2, 8, 1.0, true}, "GPTConfig: dropout must be in [0, 1), got 1"},
  };
  for (const Case& c : cases) check_error([&] { GPT m(c.config); }, c.message);
  check_error([] { gpt_preset("gpt5"); },
              "unknown preset 'gpt5'; known presets: gpt2, gpt2-medium");
}
