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
  std::vector<BoxActivation>& b = d.boxes;
  b.resize(boxes(c).size());
  // The stages in the order of boxes(): see GPT::forward and Block::forward, which this
  // repeats module by module (the test checks the logits are the model's own, bit for bit).
  const auto& tr = *model.transformer;
  const Tensor te = tr.wte->forward(idx);
  const Tensor pe = tr.wpe->forward(arange(0, static_cast<double>(T), 1, DType::I64));
  b[1] = stats(te);
  b[2] = stats(pe);
  Tensor x = tr.drop->forward(add(te, pe));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const nn::Block& blk = (*tr.h)[static_cast<size_t>(l)];
    if (l != layer) {
      x = blk.forward(x);
      continue;
    }
    const Tensor h1 = blk.ln_1->forward(x);
    nn::AttentionTrace at;
    const Tensor y = blk.attn->forward(h1, Tensor(), &at).y;
    const int64_t HS = c.n_embd / c.n_head;
    const Tensor scaled = mul(at.scores, 1.0 / std::sqrt(static_cast<double>(HS)));
    const Tensor keep = kernel::tril_mask(T, T);  // the kept (past and present) scores
    b[3] = stats(h1);
    b[4] = stats(blk.attn->c_attn->forward(h1));
    b[5] = stats(at.q);
    b[5].shape = "q " + shape_str(at.q.shape());
    b[6] = stats(scaled);
    b[7] = stats(scaled, expand(keep, scaled.shape()));
    b[7].shape += " kept";
    b[8] = stats(at.weights);
    b[9] = stats(at.heads);
    b[10] = stats(reshape(transpose(at.heads, 1, 2), {1, T, c.n_embd}));
    b[11] = stats(y);
    x = add(x, y);
    b[12] = stats(x);
    const Tensor h2 = blk.ln_2->forward(x);
    b[13] = stats(h2);
    const Tensor fc = blk.mlp->c_fc->forward(h2);
    b[14] = stats(fc);
    const Tensor g = blk.mlp->gelu->forward(fc);
    b[15] = stats(g);
    const Tensor m = blk.mlp->dropout->forward(blk.mlp->c_proj->forward(g));
    b[16] = stats(m);
    x = add(x, m);
    b[17] = stats(x);
  }
  x = tr.ln_f->forward(x);
  b[18] = stats(x);
  const Tensor logits = model.lm_head->forward(x);
  b[19] = stats(logits);
  b[20] = stats(softmax(logits));
  b[20].shape += " probabilities";
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
