// What each head adds (viz/head_sum): the heads' changes to the residual stream summed
// equal concat -> c_proj, for a GPT (GQA) and a Llama (RoPE, window), and the explorer's
// per-position figures are head_sum's.
#include <cmath>

#include "fixture.h"
#include "test_util.h"
#include "viz/explorer.h"
#include "viz/head_sum.h"

using namespace attend;
using namespace attend::viz;
using attend::test::Fixture;
using attend::test::LlamaFixture;

TEST_CASE("the heads' changes summed equal concat -> c_proj to rounding (GQA model)") {
  // #11 item 2: "concatenated or summed?" Both: c_proj on the concatenation is the sum of
  // each head's value-up product. The sum is formed in double from f32 inputs; the model's
  // path is an f32 GEMM over C = 16 terms, so they may differ by f32 rounding: a few ulps
  // of outputs below 1 (measured 1.9e-9 with `attend attention --position` on a trained
  // C = 64 model); 1e-6 bounds it, while
  // dropping or doubling one head would differ by that head's whole change (checked).
  Fixture f;
  for (int64_t layer : {0, 1})
    for (int64_t pos : {0, 5, 11}) {
      CAPTURE(layer);
      CAPTURE(pos);
      const viz::HeadSum s = viz::head_sum(f.model, *f.tok, "hello, world", layer, pos, 3);
      REQUIRE(s.heads.size() == 4);
      CHECK(s.max_abs_difference < 1e-6);
      double total = 0, head0 = 0;
      for (size_t o = 0; o < s.sum.size(); ++o) {
        double acc = 0;
        for (const viz::HeadChange& h : s.heads) acc += h.change[o];
        CHECK(acc == doctest::Approx(s.sum[o]).epsilon(1e-12));
        total += std::abs(s.concat_cproj[o]);
        head0 = std::max(head0, std::abs(s.heads[0].change[o]));
      }
      CHECK(head0 > 1e-4);  // a missing head would show far above the bound
      CHECK(s.heads[0].top.size() == 3);
      CHECK(total > 0);
    }
  test::check_error([&] { viz::head_sum(f.model, *f.tok, "hello", 2, 0); },
                    "--layer 2: the model has 2 layers");
  test::check_error([&] { viz::head_sum(f.model, *f.tok, "hello", 0, 5); },
                    "--position 5: the prompt has 5 tokens");
}

TEST_CASE("what each head adds at every position equals head_sum's, and sums to concat") {
  // The explorer's per-position panel comes from the same trace as `--position`.
  Fixture f;
  const std::string prompt = "hello, world";
  const AttentionMap m = compute_attention(f.model, *f.tok, prompt);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < m.T(); ++i) {
      const HeadSum s = head_sum(f.model, *f.tok, prompt, l, i);
      for (int64_t h = 0; h < m.n_head; ++h)
        CHECK(m.change_norm[l][i * m.n_head + h] == s.heads[h].norm);  // the same computation
      CHECK(m.change_difference[l][i] == s.max_abs_difference);
      CHECK(m.change_difference[l][i] < 1e-6);
    }
  const auto j = nlohmann::json::parse(attention_json(m, {}));
  CHECK(j["layers"][1]["change_sum_norm"].size() == static_cast<size_t>(m.T()));
  CHECK(j["layers"][1]["heads"][0]["change_norm"].size() == static_cast<size_t>(m.T()));
}


TEST_CASE("a Llama's heads summed equal concat -> c_proj too (RoPE, sliding window)") {
  LlamaFixture f;
  for (int64_t layer : {0, 1}) {
    CAPTURE(layer);
    const viz::HeadSum s = viz::head_sum(f.model, *f.tok, "a cab fed a bad egg", layer, 17, 3);
    REQUIRE(s.heads.size() == 4);
    CHECK(s.max_abs_difference < 1e-6);
    double head0 = 0;
    for (double x : s.heads[0].change) head0 = std::max(head0, std::abs(x));
    CHECK(head0 > 1e-4);
  }
}
