#include "viz/diagram.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "tensor/kernels.h"

#include "viz/plot.h"
#include "viz/summary_text.h"

namespace attend::viz {

namespace {

struct Box {
  std::string name, shape, detail;
  int64_t params = -1;  // -1: no parameters (an operation)
  bool in_block = false, residual = false;
  std::string tap;      // the model's stage this box shows (Taps), "" for none
  bool masked = false;  // its activation over the keys the mask keeps only
  Box(std::string n, std::string s, std::string d, int64_t p = -1, bool block = false,
      bool res = false, std::string t = "", bool m = false)
      : name(std::move(n)), shape(std::move(s)), detail(std::move(d)), params(p), in_block(block),
        residual(res), tap(std::move(t)), masked(m) {}
};

std::string shape(const std::vector<std::string>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i];
  return s + ")";
}

// The boxes top to bottom, each named by the tap it shows: a new kind of box is one entry
// here (and its tap in nn/gpt.cpp).
std::vector<Box> boxes(const nn::GPTConfig& c) {
  const int64_t C = c.n_embd, NH = c.n_head, KVH = c.n_kv_head, HS = C / NH, V = c.vocab_size;
  const int64_t b = c.bias ? 1 : 0, G = NH / KVH, H = c.mlp_hidden();
  const bool rms = c.norm() == nn::GPTConfig::NormKind::rms_norm;
  const std::string Cs = std::to_string(C), HSs = std::to_string(HS), NHs = std::to_string(NH),
                    KVHs = std::to_string(KVH), Vs = std::to_string(V), Hs = std::to_string(H);
  const std::string kind = KVH == NH ? "MHA" : KVH == 1 ? "MQA" : "GQA";
  const std::string norm = c.norm_name();
  const int64_t norm_params = rms ? C : C * (1 + b);
  const std::string norm_detail =
      rms ? "over C: x / rms(x) * gain, no mean, no bias" : "over C";
  std::string sharing = kind == "MHA" ? "each query head has its own key/value head" : "";
  for (int64_t g = 0; g < KVH && kind != "MHA"; ++g) {
    if (g == 3 && KVH > 4) {
      sharing += fmt::format("; ... ; query heads {}-{} read key/value head {}", (KVH - 1) * G,
                             NH - 1, KVH - 1);
      break;
    }
    sharing += fmt::format("{}query heads {}-{} read key/value head {}", g ? "; " : "", g * G,
                           g * G + G - 1, g);
  }
  const std::string TT = shape({"B", NHs, "T", "T"});
  std::vector<Box> v;
  auto box = [&](Box x) { v.push_back(std::move(x)); };
  box({"token ids", shape({"B", "T"}), "integers in [0, " + Vs + ")"});
  box({"wte: token embedding", shape({"B", "T", Cs}), Vs + " x " + Cs + " table", V * C, false,
       false, "wte"});
  if (c.learned_positions())
    box({"wpe: position embedding", shape({"T", Cs}),
         std::to_string(c.block_size) + " x " + Cs + " table; added to the token embeddings",
         c.block_size * C, false, false, "wpe"});
  box({"ln_1: " + norm, shape({"B", "T", Cs}), norm_detail, norm_params, true, false, "ln_1"});
  box({"c_attn: q | k | v", shape({"B", "T", std::to_string((NH + 2 * KVH) * HS)}),
       fmt::format("Linear {} -> {} + {} + {} ({})", C, NH * HS, KVH * HS, KVH * HS, kind),
       C * (NH + 2 * KVH) * HS + b * (NH + 2 * KVH) * HS, true, false, "attn.c_attn"});
  if (c.rotary())
    box({"RoPE: q and k turned", shape({"B", "T", std::to_string((NH + KVH) * HS)}),
         fmt::format("pair (2i, 2i+1) of each head turned by position x {}^(-2i/{}); v as is",
                     c.rope_theta, HS),
         -1, true, false, "attn.rope"});
  box({"split into heads",
       "q " + shape({"B", NHs, "T", HSs}) + ", k, v " + shape({"B", KVHs, "T", HSs}), sharing, -1,
       true, false, "attn.q"});
  box({"scores q k^T / sqrt(" + HSs + ")", TT, "query i (row) against key j (column)", -1, true,
       false, "attn.scores"});
  box({c.window() > 0 ? "causal mask + sliding window" : "causal mask", TT,
       c.window() > 0
           ? fmt::format("key j > query i (the future) or j <= i - {} (outside the window) set "
                         "to -inf",
                         c.window())
           : "key j > query i set to -inf (the future)",
       -1, true, false, "attn.scores", true});
  box({"softmax over keys", TT, "each row sums to 1", -1, true, false, "attn.weights"});
  box({"weights x values", shape({"B", NHs, "T", HSs}), "each head's weighted sum of its values",
       -1, true, false, "attn.heads"});
  box({"concat heads", shape({"B", "T", Cs}), NHs + " heads x " + HSs, -1, true, false,
       "attn.concat"});
  box({"c_proj", shape({"B", "T", Cs}),
       "Linear " + Cs + " -> " + Cs + " (value up, summed over heads)", C * C + b * C, true, false,
       "attn.c_proj"});
  box({"+ residual", shape({"B", "T", Cs}), "x = x + attn(ln_1(x))", -1, true, true,
       "residual_1"});
  box({"ln_2: " + norm, shape({"B", "T", Cs}), norm_detail, norm_params, true, false, "ln_2"});
  if (c.gated_mlp()) {
    box({"mlp.c_fc: gate | up", shape({"B", "T", std::to_string(2 * H)}),
         "Linear " + Cs + " -> " + Hs + " + " + Hs, 2 * H * C, true, false, "mlp.c_fc"});
    box({"SwiGLU", shape({"B", "T", Hs}), "silu(gate) * up, silu(a) = a sigmoid(a)", -1, true,
         false, "mlp.act"});
  } else {
    box({"mlp.c_fc", shape({"B", "T", Hs}), "Linear " + Cs + " -> " + Hs, H * C + b * H, true,
         false, "mlp.c_fc"});
    box({"GELU (tanh)", shape({"B", "T", Hs}), "elementwise", -1, true, false, "mlp.act"});
  }
  box({"mlp.c_proj", shape({"B", "T", Cs}), "Linear " + Hs + " -> " + Cs, H * C + b * C, true,
       false, "mlp.c_proj"});
  box({"+ residual", shape({"B", "T", Cs}), "x = x + mlp(ln_2(x))", -1, true, true,
       "residual_2"});
  box({"ln_f: " + norm, shape({"B", "T", Cs}), norm_detail, c.bias ? 2 * C : C, false, false,
       "ln_f"});
  if (c.tie_embeddings) {
    box({"lm_head", shape({"B", "T", Vs}), "Linear " + Cs + " -> " + Vs + ", weight tied to wte",
         0, false, false, "logits"});
  } else {
    box({"lm_head", shape({"B", "T", Vs}), "Linear " + Cs + " -> " + Vs + ", its own weight",
         V * C, false, false, "logits"});
  }
  box({"logits", shape({"B", "T", Vs}), "softmax over V: the next token's probabilities", -1,
       false, false, "probabilities"});
  return v;
}

BoxActivation stats(const Tensor& t, const Tensor& keep = Tensor()) {
  const std::vector<double> v = kernel::cast(t, DType::F64).to_vector<double>();
  std::vector<double> k;
  if (keep.defined()) k = kernel::cast(keep, DType::F64).to_vector<double>();
  double sum = 0, n = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (k.empty() || k[i] != 0) sum += v[i], n += 1;
  BoxActivation a;
  a.present = true;
  a.mean = n > 0 ? sum / n : 0;
  double sq = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (k.empty() || k[i] != 0) sq += (v[i] - a.mean) * (v[i] - a.mean);
  a.std = n > 0 ? std::sqrt(sq / n) : 0;
  a.shape = shape_str(t.shape());
  return a;
}

}  // namespace

DiagramActivations diagram_activations(const nn::GPT& model, const std::vector<int32_t>& ids,
                                       int64_t layer, const std::string& prompt) {
  const nn::GPTConfig& c = model.config;
  ATTEND_CHECK(layer >= 0 && layer < c.n_layer, "--layer ", layer, ": the model has ", c.n_layer,
               " layers (0 to ", c.n_layer - 1, ")");
  const auto T = static_cast<int64_t>(ids.size());
  ATTEND_CHECK(T >= 1 && T <= c.block_size, "--prompt: ", T, " tokens; expected 1 to block_size ",
               c.block_size);
  NoGradGuard no_grad;
  DiagramActivations d;
  d.prompt = prompt;
  d.tokens = T;
  d.layer = layer;
  const Tensor idx = tensor(std::vector<double>(ids.begin(), ids.end()), {1, T}, DType::I64);
  // One forward with taps: every box shows the stage of the model that has its name.
  nn::Taps taps;
  taps.layer = layer;
  const Tensor logits = model.forward(idx, Tensor(), nullptr, nullptr, &taps).logits;
  taps.at["probabilities"] = softmax(logits);
  // The keys the mask keeps: j <= i, and j > i - W with a sliding window.
  Tensor keep = zeros({T, T}, DType::F64);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j)
      if (c.window() == 0 || j > i - c.window()) keep.set({i, j}, 1.0);
  const std::vector<Box> v = boxes(c);
  for (const Box& b : v) {
    BoxActivation a;
    if (!b.tap.empty()) {
      auto it = taps.at.find(b.tap);
      ATTEND_INTERNAL_CHECK(it != taps.at.end(), "diagram: the model has no tap '", b.tap, "'");
      a = b.masked ? stats(it->second, expand(keep, it->second.shape())) : stats(it->second);
      if (b.masked) a.shape += " kept";
      if (b.tap == "attn.q") a.shape = "q " + a.shape;
      if (b.tap == "probabilities") a.shape += " probabilities";
    }
    d.boxes.push_back(a);
    d.taps.push_back(b.tap);
  }
  d.final_logits = kernel::cast(logits, DType::F64).to_vector<double>();
  d.logits = kernel::cast(model.forward(idx).logits, DType::F64).to_vector<double>();
  return d;
}

std::string model_diagram_svg(const nn::GPTConfig& c, const std::string& title,
                              const DiagramActivations* acts) {
  const std::vector<Box> v = boxes(c);
  ATTEND_CHECK(!acts || acts->boxes.size() == v.size(), "diagram: ", acts->boxes.size(),
               " activations for ", v.size(), " boxes");
  const int x = 60, w = 720, h = acts ? 58 : 44, gap = 16, top = acts ? 86 : 70;
  int y = top, block_top = 0, block_bottom = 0;
  std::string body;
  int64_t block_params = 0;
  for (const Box& b : v) {
    if (b.in_block && !block_top) block_top = y - 8;
    if (b.in_block) block_params += std::max<int64_t>(0, b.params);
    const std::string fill = b.params > 0 ? "#dbe9f6" : b.residual ? "#fde9c9" : "#f2f2f2";
    body += fmt::format(
        "<g class=\"box\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"6\" fill=\"{}\" "
        "stroke=\"#555\"/>\n<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-family=\"monospace\">{}</text>\n"
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#444\">{}</text>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"11\" "
        "fill=\"#444\">{}</text></g>\n",
        x, y, w, h, fill, x + 10, y + 18, xml_escape(b.name), x + w - 10, y + 18,
        xml_escape(b.shape), x + 10, y + 36, xml_escape(b.detail), x + w - 10, y + 36,
        b.params > 0    ? with_commas(b.params) + " parameters"
        : b.params == 0 ? "0 (tied)"
                        : "");
    const size_t k = static_cast<size_t>(&b - v.data());
    if (acts && acts->boxes[k].present) {
      const BoxActivation& a = acts->boxes[k];
      body += fmt::format(
          "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#8c2d04\" class=\"activation\">"
          "prompt{}: {} mean {:.4g} std {:.4g}</text>\n",
          x + 10, y + 51, b.in_block ? " (layer " + std::to_string(acts->layer) + ")" : "",
          xml_escape(a.shape), a.mean, a.std);
    }
    if (&b != &v.back())
      body += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#555\" "
          "marker-end=\"url(#arrow)\"/>\n",
          x + w / 2, y + h, y + h + gap);
    y += h + gap;
    if (b.in_block) block_bottom = y - gap + 8;
  }
  const int H = y + 30;
  int64_t total = block_params * c.n_layer;
  for (const Box& b : v)
    if (!b.in_block) total += std::max<int64_t>(0, b.params);
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" "
      "font-size=\"13\">\n<defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" "
      "refX=\"6\" "
      "refY=\"3\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#555\"/></marker></defs>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"20\" y=\"28\" font-size=\"17\">{}</text>\n"
      "<text x=\"20\" y=\"50\" font-size=\"12\" fill=\"#444\">B batch, T sequence length (up to "
      "{}); blue boxes hold parameters, grey ones are operations, orange ones the residual "
      "adds</text>\n",
      x + w + 200, H, xml_escape(title), c.block_size);
  if (acts)
    s += fmt::format(
        "<text x=\"20\" y=\"68\" font-size=\"12\" fill=\"#8c2d04\">red lines: this "
        "prompt's activations, \"{}\" ({} tokens), shape, mean and standard deviation of "
        "each box's output (the block's at layer {})</text>\n",
        xml_escape(acts->prompt), acts->tokens, acts->layer);
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#1f77b4\" "
      "stroke-dasharray=\"6,4\"/>\n<text x=\"{}\" y=\"{}\" fill=\"#1f77b4\" font-weight=\"bold\">"
      "Block x {}</text>\n<text x=\"{}\" y=\"{}\" fill=\"#1f77b4\" font-size=\"11\">{} "
      "parameters each</text>\n<text x=\"{}\" y=\"{}\" fill=\"#1f77b4\" font-size=\"11\">{} in all "
      "blocks</text>\n",
      x - 12, block_top, w + 24, block_bottom - block_top, x + w + 20, block_top + 20, c.n_layer,
      x + w + 20, block_top + 38, with_commas(block_params), x + w + 20, block_top + 54,
      with_commas(block_params * c.n_layer));
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"total\" font-weight=\"bold\">{} parameters in all</text>\n",
      x + w + 20, top + 18, with_commas(total));
  return s + body + "</svg>\n";
}

std::string model_diagram_html(const nn::GPTConfig& c, const std::string& title,
                               const DiagramActivations* acts) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
         xml_escape(title) + "</title></head>\n<body style=\"font-family:sans-serif\">\n" +
         model_diagram_svg(c, title, acts) + "</body></html>\n";
}

}  // namespace attend::viz
