// The model diagram: every box shows the model's own stage of its name (nn::Taps), the
// taps obey the block's identities, GPT-2's and a Llama's boxes, and the page in Chromium.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "browser.h"
#include "fixture.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "train/toy.h"
#include "viz/diagram.h"
#include "viz/explorer.h"
#include "viz/summary_text.h"
#include "xml_check.h"

using namespace attend;
using namespace attend::viz;
using attend::test::Browser;
using attend::test::Fixture;
using attend::test::llama_config;
using attend::test::xml_problem;
namespace fs = std::filesystem;

namespace {


// Mean and standard deviation of every element (or those where keep != 0), by plain loops.
std::pair<double, double> moments(const Tensor& t, const Tensor& keep = Tensor()) {
  const std::vector<double> v = kernel::cast(t, DType::F64).to_vector<double>();
  std::vector<double> k;
  if (keep.defined()) k = kernel::cast(kernel::contiguous(keep), DType::F64).to_vector<double>();
  double s = 0, n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (k.empty() || k[i] != 0) s += v[i], n += 1;
  const double m = s / n;
  double q = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (k.empty() || k[i] != 0) q += (v[i] - m) * (v[i] - m);
  return {m, std::sqrt(q / n)};
}

bool same(const Tensor& a, const Tensor& b) { return test::bit_identical(kernel::contiguous(a), kernel::contiguous(b)); }

}  // namespace

TEST_CASE("the diagram's activations come from the model's own forward, stage by stage") {
  Fixture f;
  const std::vector<int32_t> ids = f.tok->encode("a cab fed");
  const DiagramActivations d = diagram_activations(f.model, ids, 1, "a cab fed");
  // The tapped forward (composed attention) gives the fused forward's logits, bit for bit.
  CHECK(d.final_logits == d.logits);
  REQUIRE(d.boxes.size() == 21);
  CHECK_FALSE(d.boxes[0].present);  // token ids: no activation
  for (size_t k = 1; k < d.boxes.size(); ++k) CHECK(d.boxes[k].present);
  CHECK(d.boxes[3].shape == "(1,9,16)");
  CHECK(d.boxes[3].mean == doctest::Approx(0.0).epsilon(1e-6).scale(1));  // LayerNorm, gain 1
  // Softmax rows sum to 1 over kept keys: the mean of all T x T weights is 1/T.
  CHECK(d.boxes[8].mean == doctest::Approx(1.0 / 9).epsilon(1e-6));
  CHECK(d.boxes[20].mean == doctest::Approx(1.0 / 33).epsilon(1e-6));  // probabilities over V
  const std::string svg = model_diagram_svg(f.model.config, "t", &d);
  CHECK(xml_problem(svg) == "");
  CHECK(svg.find("prompt (layer 1): (1,4,9,9) kept mean") != std::string::npos);
  test::check_error([&] { diagram_activations(f.model, ids, 2, "x"); },
                    "--layer 2: the model has 2 layers");
  // The explorer embeds it and links to it.
  const AttentionMap m = compute_attention(f.model, *f.tok, "a cab fed");
  const fs::path page = fs::path(ATTEND_BUILD_DIR) / "attention_diagram_test.html";
  std::ofstream(page) << attention_html(m, {}, svg);
  REQUIRE_BROWSER(b);
  const std::string dom = b.dom(page);
  CHECK(dom.find("data-status=\"ok\"") != std::string::npos);
  CHECK(dom.find("<div class=\"note\" id=\"diagramlink\" style=\"\">") != std::string::npos);
  CHECK(dom.find("class=\"activation\"") != std::string::npos);
  const fs::path alone = fs::path(ATTEND_BUILD_DIR) / "diagram_test.html";
  std::ofstream(alone) << model_diagram_html(f.model.config, "diagram test", &d);
  CHECK(b.dom(alone).find("prompt (layer 1): (1,9,64) mean") != std::string::npos);
  b.screenshot(alone, fs::path(ATTEND_BUILD_DIR) / "diagram_test.png", "1000,1500");
  // Without a diagram the link stays hidden.
  std::ofstream(page) << attention_html(m, {});
  CHECK(b.dom(page).find("id=\"diagramlink\" style=\"display:none\"") != std::string::npos);
}


TEST_CASE("every box shows the model's tap of its name, and the taps are the block's stages") {
  // For GPT-2's block and a Llama's: each box's activation is the stage the model reports
  // under the box's tap name (checked here by plain loops), and those stages obey the
  // block's identities bit for bit, so the boxes cannot drift from Block::forward.
  Fixture f;
  nn::GPT llama(llama_config(f.tok->vocab_size()), 5);
  llama.eval();
  const std::vector<int32_t> ids = f.tok->encode("a cab fed a bad egg");
  const auto T = static_cast<int64_t>(ids.size());
  for (const nn::GPT* m : {&f.model, &llama}) {
    const nn::GPTConfig& c = m->config;
    CAPTURE(c.arch);
    const DiagramActivations d = diagram_activations(*m, ids, 1, "p");
    CHECK(d.final_logits == d.logits);
    nn::Taps taps;
    taps.layer = 1;
    NoGradGuard no_grad;
    const Tensor idx = tensor(std::vector<double>(ids.begin(), ids.end()), {1, T}, DType::I64);
    const Tensor logits = m->forward(idx, Tensor(), nullptr, nullptr, &taps).logits;
    taps.at["probabilities"] = softmax(logits);
    REQUIRE(d.taps.size() == d.boxes.size());
    int shown = 0;
    for (size_t k = 0; k < d.boxes.size(); ++k) {
      const std::string& name = d.taps[k];
      CAPTURE(name);
      if (name.empty()) {
        CHECK_FALSE(d.boxes[k].present);
        continue;
      }
      REQUIRE(taps.at.count(name) == 1);
      const Tensor& t = taps.at.at(name);
      Tensor keep;
      if (d.boxes[k].shape.find("kept") != std::string::npos) {
        keep = zeros({T, T}, DType::F64);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j <= i; ++j)
            if (c.sliding_window == 0 || i - j < c.sliding_window) keep.set({i, j}, 1.0);
        keep = kernel::expand(keep, t.shape());
      }
      const auto [mean, sd] = moments(t, keep);
      CHECK(d.boxes[k].present);
      CHECK(d.boxes[k].mean == doctest::Approx(mean).epsilon(1e-12).scale(1));
      CHECK(d.boxes[k].std == doctest::Approx(sd).epsilon(1e-12).scale(1));
      ++shown;
    }
    CHECK(shown == static_cast<int>(d.boxes.size()) - 1);  // all but the token ids
    // The identities of Block::forward, on the taps themselves.
    const nn::Block& blk = (*m->transformer->h)[1];
    const auto& t = taps.at;
    CHECK(same(t.at("attn.c_attn"), blk.attn->c_attn->forward(t.at("ln_1"))));
    CHECK(same(t.at("attn.c_proj"), blk.attn->c_proj->forward(t.at("attn.concat"))));
    CHECK(same(t.at("ln_2"), blk.ln_2->forward(t.at("residual_1"))));
    CHECK(same(t.at("mlp.c_fc"), blk.mlp->c_fc->forward(t.at("ln_2"))));
    CHECK(same(t.at("mlp.act"), c.is_llama() ? swiglu(t.at("mlp.c_fc")) : gelu(t.at("mlp.c_fc"))));
    CHECK(same(t.at("mlp.c_proj"), blk.mlp->c_proj->forward(t.at("mlp.act"))));
    CHECK(same(t.at("residual_2"), add(t.at("residual_1"), t.at("mlp.c_proj"))));
    CHECK(same(t.at("logits"), m->lm_head->forward(t.at("ln_f"))));
    if (c.is_llama()) {
      const int64_t qk = c.n_embd + c.n_kv_head * (c.n_embd / c.n_head);
      CHECK(same(t.at("attn.rope"), kernel::narrow(rotary(t.at("attn.c_attn"), c.n_embd / c.n_head,
                                                          qk, 0, c.rope_theta),
                                                   2, 0, qk)));
      CHECK(t.count("wpe") == 0);
      // Outside the window the weights are exactly 0.
      const Tensor& w = t.at("attn.weights");
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          if (j > i || i - j >= c.sliding_window) CHECK(w.at({0, 0, i, j}) == 0.0);
    }
  }
}

TEST_CASE("a Llama's diagram: RMSNorm, RoPE, SwiGLU and window boxes, the model's parameters") {
  Fixture f;
  const nn::GPTConfig c = llama_config(f.tok->vocab_size());
  nn::GPT m(c, 5);
  m.eval();
  const DiagramActivations d = diagram_activations(m, f.tok->encode("a cab fed"), 0, "a cab fed");
  const std::string svg = model_diagram_svg(c, "llama", &d);
  CHECK(xml_problem(svg) == "");
  for (const char* want : {"ln_1: RMSNorm", "RoPE: q and k turned", "causal mask + sliding window",
                           "outside the window", "mlp.c_fc: gate | up", "SwiGLU", "ln_f: RMSNorm",
                           "its own weight"})
    CHECK_MESSAGE(svg.find(want) != std::string::npos, want);
  CHECK(svg.find("wpe") == std::string::npos);
  CHECK(svg.find(with_commas(m.num_parameters()) + " parameters in all") != std::string::npos);
  // The published 7B models' diagrams (config only) carry their published totals.
  CHECK(model_diagram_svg(nn::gpt_preset("mistral-7b"), "m").find("7,241,732,096 parameters in all") !=
        std::string::npos);
  CHECK(model_diagram_svg(nn::gpt_preset("llama3-8b"), "m").find("8,030,261,248 parameters in all") !=
        std::string::npos);
  const fs::path page = fs::path(ATTEND_BUILD_DIR) / "diagram_llama_test.html";
  std::ofstream(page) << model_diagram_html(c, "Llama diagram test", &d);
  REQUIRE_BROWSER(b);
  CHECK(b.dom(page).find("RoPE: q and k turned") != std::string::npos);
  b.screenshot(page, fs::path(ATTEND_BUILD_DIR) / "diagram_llama_test.png", "1000,1600");
}
