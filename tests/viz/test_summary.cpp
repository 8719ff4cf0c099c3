// attend summary: counts from nn::summarize, text from viz::format_summary.
#include "nn/summary.h"
#include "test_util.h"
#include "viz/diagram.h"
#include "viz/summary_text.h"

using namespace attend;
using viz::format_summary;

TEST_CASE("summary: published totals, and the key/value cache of MQA and GQA against MHA") {
  nn::ModelSummary g2 = nn::summarize(nn::gpt_preset("gpt2"), 1, 1024);
  CHECK(g2.counts.total() == 124439808);
  CHECK(format_summary(g2).find("124,439,808") != std::string::npos);
  nn::ModelSummary g3 = nn::summarize(nn::gpt_preset("gpt3-175b"), 1, 2048);
  CHECK(g3.counts.attention_matrices() == 57982058496);
  CHECK(format_summary(g3).find("57,982,058,496") != std::string::npos);
  CHECK(g3.counts.total() > 174e9);
  // gpt2: N = 124,439,808 - 786,432; 6N + 12 * 12 * 768 * 1024.
  CHECK(g2.flops_per_token == 6.0 * 123653376 + 12.0 * 12 * 768 * 1024);
  nn::GPTConfig mqa = nn::gpt_preset("gpt2"), gqa = mqa;
  mqa.n_kv_head = 1;
  gqa.n_kv_head = 4;
  nn::ModelSummary sm = nn::summarize(mqa, 1, 0), sg = nn::summarize(gqa, 1, 0);
  // f32, 2 (k and v) x 12 layers x KVH x 64.
  CHECK(sm.kv_cache_bytes_per_token == 4 * 2 * 12 * 1 * 64);
  CHECK(sg.kv_cache_bytes_per_token == 4 * 2 * 12 * 4 * 64);
  CHECK(sm.kv_cache_bytes_per_token_mha == 4 * 2 * 12 * 768);
  CHECK(format_summary(sm).find("12x more") != std::string::npos);
  CHECK(format_summary(sg).find("3x more") != std::string::npos);
}

TEST_CASE("summary: the Llamas' published totals, by component, and GQA's saving") {
  // Meta's Llama 2 7B and Llama 3 8B, Mistral AI's Mistral 7B: their published counts.
  struct Want {
    const char* preset;
    int64_t total;
    const char* text;
  };
  for (const Want& w : {Want{"llama2-7b", 6738415616, "6,738,415,616"},
                        Want{"llama3-8b", 8030261248, "8,030,261,248"},
                        Want{"mistral-7b", 7241732096, "7,241,732,096"}}) {
    CAPTURE(w.preset);
    const nn::ModelSummary s = nn::summarize(nn::gpt_preset(w.preset), 1, 128);
    CHECK(s.counts.total() == w.total);
    const std::string t = format_summary(s);
    CHECK(t.find(w.text) != std::string::npos);
    for (const char* part : {"MLP gate (H x C", "MLP up (H x C)", "MLP down, c_proj (C x H)",
                             "RMSNorms ln_1, ln_2", "lm_head (V x C, not tied)", "RMSNorm",
                             "SwiGLU", "RoPE"})
      CHECK_MESSAGE(t.find(part) != std::string::npos, part);
    CHECK(t.find("position embedding") == std::string::npos);
    // The module rows add up to the total, as for the GPT.
    int64_t rows = 0;
    for (const nn::SummaryRow& r : s.rows)
      if (r.depth == 1) rows += r.params;
    CHECK(rows == w.total);
  }
  // Llama 3 8B: GQA (8 of 32 key/value heads) saves 2 x 32 layers x 24 x 128 x 4096
  // parameters against MHA, and the cache per token is 4x smaller.
  const std::string t = format_summary(nn::summarize(nn::gpt_preset("llama3-8b"), 1, 128));
  CHECK(t.find("saved by GQA against MHA (K, V at 8 of 32 heads)") != std::string::npos);
  CHECK(t.find(viz::with_commas(2LL * 32 * 24 * 128 * 4096)) != std::string::npos);
  CHECK(t.find("4x more") != std::string::npos);
  CHECK(t.find("sliding_window") == std::string::npos);
  CHECK(format_summary(nn::summarize(nn::gpt_preset("mistral-7b"), 1, 128)).find("sliding_window 4096") !=
        std::string::npos);
}

TEST_CASE("summary: per-head value down and value up, GPT-3's 12288 x 128 each way") {
  const nn::ModelSummary g3 = nn::summarize(nn::gpt_preset("gpt3-175b"), 1, 2048);
  const std::string t = format_summary(g3);
  CHECK(t.find("value down: c_attn's v rows (HS x C = 128 x 12288)") != std::string::npos);
  CHECK(t.find("value up: c_proj's columns (C x HS = 12288 x 128)") != std::string::npos);
  CHECK(t.find("1,572,864  (x 96 heads x 96 layers = 14,495,514,624)") != std::string::npos);
  // The per-head lines add up to the component counts: V = value down, O = value up.
  CHECK(g3.counts.attn_v * 96 == 1572864LL * 96 * 96);
  CHECK(g3.counts.attn_o * 96 == 1572864LL * 96 * 96);
  nn::GPTConfig gqa = nn::gpt_preset("gpt2");
  gqa.n_kv_head = 4;
  const std::string tg = format_summary(nn::summarize(gqa, 1, 0));
  CHECK(tg.find("(x 4 kv heads x 12 layers = 2,359,296); each shared by 3 query heads") !=
        std::string::npos);
}

TEST_CASE("diagram: one figure with the model's shapes and parameter counts") {
  for (const bool gqa : {false, true}) {
    nn::GPTConfig c = nn::gpt_preset(gqa ? "cpu-char" : "gpt2");
    if (gqa) c.n_kv_head = 2;
    const std::string svg = viz::model_diagram_svg(c, "test");
    // The total drawn equals the model summary's count (the published 124,439,808 for gpt2).
    const int64_t total = nn::summarize(c, 1, 0).counts.total();
    CHECK(svg.find(viz::with_commas(total) + " parameters in all") != std::string::npos);
    CHECK(svg.find("Block x " + std::to_string(c.n_layer)) != std::string::npos);
    if (gqa) {
      CHECK(svg.find(
                "query heads 0-1 read key/value head 0; query heads 2-3 read key/value head 1") !=
            std::string::npos);
      CHECK(svg.find("q (B, 4, T, 32), k, v (B, 2, T, 32)") != std::string::npos);
    } else {
      CHECK(svg.find("124,439,808 parameters in all") != std::string::npos);
      CHECK(svg.find("(B, 12, T, T)") != std::string::npos);
      CHECK(svg.find("1,771,776 parameters") != std::string::npos);  // c_attn of GPT-2 small
    }
    // Balanced tags: every <g>, <svg>, <text> opened is closed.
    auto count = [&](const std::string& t) {
      size_t n = 0;
      for (size_t at = 0; (at = svg.find(t, at)) != std::string::npos; ++at) ++n;
      return n;
    };
    CHECK(count("<g ") == count("</g>"));
    CHECK(count("<text ") == count("</text>"));
  }
}
