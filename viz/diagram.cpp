#include "viz/diagram.h"

#include <fmt/format.h>

#include <vector>

#include "viz/plot.h"
#include "viz/summary_text.h"

namespace attend::viz {

namespace {

struct Box {
  std::string name, shape, detail;
  int64_t params = -1;  // -1: no parameters (an operation)
  bool in_block = false, residual = false;
};

std::string shape(const std::vector<std::string>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i];
  return s + ")";
}

std::vector<Box> boxes(const nn::GPTConfig& c) {
  const int64_t C = c.n_embd, NH = c.n_head, KVH = c.n_kv_head, HS = C / NH, V = c.vocab_size;
  const int64_t b = c.bias ? 1 : 0, G = NH / KVH;
  const std::string Cs = std::to_string(C), HSs = std::to_string(HS), NHs = std::to_string(NH),
                    KVHs = std::to_string(KVH), Vs = std::to_string(V);
  const std::string kind = KVH == NH ? "MHA" : KVH == 1 ? "MQA" : "GQA";
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
  std::vector<Box> v = {
      {"token ids", shape({"B", "T"}), "integers in [0, " + Vs + ")"},
      {"wte: token embedding", shape({"B", "T", Cs}), Vs + " x " + Cs + " table", V * C},
      {"wpe: position embedding", shape({"T", Cs}),
       std::to_string(c.block_size) + " x " + Cs + " table; added to the token embeddings",
       c.block_size * C},
      {"ln_1: LayerNorm", shape({"B", "T", Cs}), "over C", C * (1 + b), true},
      {"c_attn: q | k | v", shape({"B", "T", std::to_string((NH + 2 * KVH) * HS)}),
       fmt::format("Linear {} -> {} + {} + {} ({})", C, NH * HS, KVH * HS, KVH * HS, kind),
       C * (NH + 2 * KVH) * HS + b * (NH + 2 * KVH) * HS, true},
      {"split into heads",
       "q " + shape({"B", NHs, "T", HSs}) + ", k, v " + shape({"B", KVHs, "T", HSs}), sharing, -1,
       true},
      {"scores q k^T / sqrt(" + HSs + ")", shape({"B", NHs, "T", "T"}),
       "query i (row) against key j (column)", -1, true},
      {"causal mask", shape({"B", NHs, "T", "T"}), "key j > query i set to -inf (the future)", -1,
       true},
      {"softmax over keys", shape({"B", NHs, "T", "T"}), "each row sums to 1", -1, true},
      {"weights x values", shape({"B", NHs, "T", HSs}), "each head's weighted sum of its values",
       -1, true},
      {"concat heads", shape({"B", "T", Cs}), NHs + " heads x " + HSs, -1, true},
      {"c_proj", shape({"B", "T", Cs}),
       "Linear " + Cs + " -> " + Cs + " (value up, summed over heads)", C * C + b * C, true},
      {"+ residual", shape({"B", "T", Cs}), "x = x + attn(ln_1(x))", -1, true, true},
      {"ln_2: LayerNorm", shape({"B", "T", Cs}), "over C", C * (1 + b), true},
      {"mlp.c_fc", shape({"B", "T", std::to_string(4 * C)}),
       "Linear " + Cs + " -> " + std::to_string(4 * C), 4 * C * C + b * 4 * C, true},
      {"GELU (tanh)", shape({"B", "T", std::to_string(4 * C)}), "elementwise", -1, true},
      {"mlp.c_proj", shape({"B", "T", Cs}), "Linear " + std::to_string(4 * C) + " -> " + Cs,
       4 * C * C + b * C, true},
      {"+ residual", shape({"B", "T", Cs}), "x = x + mlp(ln_2(x))", -1, true, true},
      {"ln_f: LayerNorm", shape({"B", "T", Cs}), "over C", C * (1 + b)},
      {"lm_head", shape({"B", "T", Vs}), "Linear " + Cs + " -> " + Vs + ", weight tied to wte", 0},
      {"logits", shape({"B", "T", Vs}), "softmax over V: the next token's probabilities"},
  };
  return v;
}

}  // namespace

std::string model_diagram_svg(const nn::GPTConfig& c, const std::string& title) {
  const std::vector<Box> v = boxes(c);
  const int x = 60, w = 720, h = 44, gap = 16, top = 70;
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

std::string model_diagram_html(const nn::GPTConfig& c, const std::string& title) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
         xml_escape(title) + "</title></head>\n<body style=\"font-family:sans-serif\">\n" +
         model_diagram_svg(c, title) + "</body></html>\n";
}

}  // namespace attend::viz
