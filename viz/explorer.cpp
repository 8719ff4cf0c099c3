#include "viz/explorer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "data/utf8.h"
#include "tensor/kernels.h"
#include "viz/plot.h"

namespace attend::viz {

std::string display_token(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    data::Utf8Char c = data::decode_utf8(bytes, i);
    if (!c.valid) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", static_cast<uint8_t>(bytes[i]));
      out += b;
    } else if (c.cp == ' ') {
      out += "\u2423";
    } else if (c.cp == '\n') {
      out += "\u23CE";
    } else if (c.cp == '\t') {
      out += "\u21E5";
    } else if (c.cp == '\r') {
      out += "\u240D";
    } else {
      out.append(bytes, i, c.length);
    }
    i += c.length;
  }
  return out;
}

AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tok,
                               const std::string& prompt) {
  const nn::GPTConfig& c = model.config;
  AttentionMap m;
  m.ids = tok.encode(prompt);
  ATTEND_CHECK(!m.ids.empty(), "attention: the prompt is empty");
  const int64_t T = static_cast<int64_t>(m.ids.size());
  ATTEND_CHECK(T <= c.block_size, "attention: the prompt is ", T,
               " tokens, longer than block_size ", c.block_size, "; shorten it to at most ",
               c.block_size, " tokens");
  for (int32_t id : m.ids) m.tokens.push_back(display_token(tok.decode({id})));
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.head_size = c.n_embd / c.n_head;
  m.causal = true;
  char desc[200];
  std::snprintf(desc, sizeof desc,
                "GPT: %lld layers, %lld heads (%lld key/value heads), C %lld, V %lld, tokenizer %s",
                (long long)c.n_layer, (long long)c.n_head, (long long)c.n_kv_head,
                (long long)c.n_embd, (long long)c.vocab_size, tok.spec().name.c_str());
  m.model = desc;

  NoGradGuard no_grad;
  std::vector<double> idv(m.ids.begin(), m.ids.end());
  Tensor idx = tensor(idv, {1, T}, DType::I64);
  const auto& tr = *model.transformer;
  Tensor x =
      add(tr.wte->forward(idx), tr.wpe->forward(arange(0, static_cast<double>(T), 1, DType::I64)));
  const int64_t C = c.n_embd, HS = m.head_size, G = c.n_head / c.n_kv_head;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const nn::Block& block = (*tr.h)[l];
    // q . k for every head, read off the layer's own projections.
    Tensor qkv = block.attn->c_attn->forward(block.ln_1->forward(x));  // (1, T, C + 2 kv)
    std::vector<std::vector<double>> sc(c.n_head);
    for (int64_t h = 0; h < c.n_head; ++h) {
      Tensor q = kernel::narrow(kernel::select(qkv, 0, 0), 1, h * HS, HS);            // (T, HS)
      Tensor k = kernel::narrow(kernel::select(qkv, 0, 0), 1, C + (h / G) * HS, HS);  // (T, HS)
      sc[h] = kernel::cast(kernel::matmul(q, kernel::transpose(k, 0, 1)), DType::F64)
                  .to_vector<double>();
    }
    Tensor w;
    x = block.forward(x, &w);  // w (1, NH, T, T)
    std::vector<std::vector<double>> wl(c.n_head);
    for (int64_t h = 0; h < c.n_head; ++h)
      wl[h] = kernel::select(kernel::select(w, 0, 0), 0, h).to_vector<double>();
    m.weights.push_back(std::move(wl));
    m.scores.push_back(std::move(sc));
  }
  return m;
}

std::vector<int64_t> round_row(const std::vector<double>& row, int decimals) {
  const int64_t units = static_cast<int64_t>(std::llround(std::pow(10.0, decimals)));
  std::vector<int64_t> out(row.size());
  std::vector<std::pair<double, size_t>> rem;
  int64_t used = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const double scaled = std::max(0.0, row[i]) * static_cast<double>(units);
    out[i] = static_cast<int64_t>(std::floor(scaled));
    used += out[i];
    if (row[i] > 0) rem.emplace_back(scaled - std::floor(scaled), i);
  }
  std::stable_sort(rem.begin(), rem.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // The row sums to 1 up to rounding, so at most rem.size() units remain; a row summing a
  // hair over 1 can leave a negative remainder, taken back from the largest weights.
  for (size_t k = 0; used < units && k < rem.size(); ++k, ++used) ++out[rem[k].second];
  while (used > units) {
    const size_t i = static_cast<size_t>(std::max_element(out.begin(), out.end()) - out.begin());
    --out[i];
    --used;
  }
  return out;
}

namespace {

std::vector<int64_t> pick(const std::vector<int64_t>& wanted, int64_t n, const char* what) {
  if (wanted.empty()) {
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  for (int64_t v : wanted)
    ATTEND_CHECK(v >= 0 && v < n, "attention: --", what, " ", v, " is out of range [0, ", n, ")");
  return wanted;
}

bool masked(const AttentionMap& m, int64_t i, int64_t j) { return m.causal && j > i; }

std::string fixed(int64_t units, int decimals) {
  const int64_t scale = static_cast<int64_t>(std::llround(std::pow(10.0, decimals)));
  char b[32];
  std::snprintf(b, sizeof b, "%lld.%0*lld", (long long)(units / scale), decimals,
                (long long)(units % scale));
  return b;
}

// White -> deep blue by the true weight.
std::string colour(double w) {
  w = std::clamp(w, 0.0, 1.0);
  const int r = static_cast<int>(std::lround(255 - w * (255 - 8)));
  const int g = static_cast<int>(std::lround(255 - w * (255 - 48)));
  const int b = static_cast<int>(std::lround(255 - w * (255 - 107)));
  char s[16];
  std::snprintf(s, sizeof s, "#%02x%02x%02x", r, g, b);
  return s;
}

const char* kCaption =
    "Rows are query positions i, columns are key positions j. Each row is a softmax over the keys, "
    "so each row of "
    "true weights sums to 1; masked (future) cells are exactly 0 and drawn hatched grey. Numbers "
    "are the weights "
    "rounded to %d decimals by largest-remainder rounding, so each row's shown numbers add up to "
    "exactly 1. "
    "Colour encodes the true weight.";

}  // namespace

std::string attention_csv(const AttentionMap& m, const AttentionSelection& sel) {
  std::string o = "layer,head,query_index,query_token,key_index,key_token,masked,weight";
  o += sel.scores ? ",score\n" : "\n";
  auto q = [](const std::string& s) {
    std::string r = "\"";
    for (char ch : s) r += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return r + "\"";
  };
  const int64_t T = m.T();
  for (int64_t l : pick(sel.layers, m.n_layer, "layer"))
    for (int64_t h : pick(sel.heads, m.n_head, "head"))
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          char b[64];
          std::snprintf(b, sizeof b, "%.17g", m.weights[l][h][i * T + j]);
          o += std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(i) + "," +
               q(m.tokens[i]) + "," + std::to_string(j) + "," + q(m.tokens[j]) + "," +
               (masked(m, i, j) ? "1" : "0") + "," + b;
          if (sel.scores) {
            std::snprintf(b, sizeof b, "%.17g",
                          m.scores[l][h][i * T + j] / std::sqrt(static_cast<double>(m.head_size)));
            o += std::string(",") + b;
          }
          o += "\n";
        }
  return o;
}

std::string attention_json(const AttentionMap& m, const AttentionSelection& sel) {
  nlohmann::ordered_json j;
  j["model"] = m.model;
  j["convention"] =
      "weights[i][j]: query position i (row) attends to key position j (column); rows sum to 1; "
      "masked (future) entries are exactly 0";
  j["causal"] = m.causal;
  j["tokens"] = m.tokens;
  j["ids"] = m.ids;
  j["head_size"] = m.head_size;
  const int64_t T = m.T();
  auto matrix = [&](const std::vector<double>& v, double scale) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < T; ++i) {
      nlohmann::ordered_json r = nlohmann::ordered_json::array();
      for (int64_t k = 0; k < T; ++k) r.push_back(v[i * T + k] * scale);
      rows.push_back(r);
    }
    return rows;
  };
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int64_t l : pick(sel.layers, m.n_layer, "layer")) {
    nlohmann::ordered_json lj;
    lj["layer"] = l;
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (int64_t h : pick(sel.heads, m.n_head, "head")) {
      nlohmann::ordered_json hj;
      hj["head"] = h;
      hj["weights"] = matrix(m.weights[l][h], 1.0);
      if (sel.scores)
        hj["scores"] = matrix(m.scores[l][h], 1.0 / std::sqrt(static_cast<double>(m.head_size)));
      heads.push_back(hj);
    }
    lj["heads"] = heads;
    layers.push_back(lj);
  }
  j["layers"] = layers;
  return j.dump(1) + "\n";
}

std::string attention_svg(const AttentionMap& m, const AttentionSelection& sel) {
  const auto layers = pick(sel.layers, m.n_layer, "layer");
  const auto heads = pick(sel.heads, m.n_head, "head");
  const int64_t T = m.T();
  const double cell = T <= 16 ? 34 : T <= 32 ? 20 : 12;
  const bool numbers = T <= 24;
  const double label_w = 110, top = 160, map = cell * T, gap = 40;
  const double panel_w = label_w + map + gap, panel_h = top + map + gap;
  const int64_t cols = static_cast<int64_t>(heads.size()),
                rows = static_cast<int64_t>(layers.size());
  const double W = std::max(760.0, 40 + cols * panel_w + 90), H = 95 + rows * panel_h + 60;
  std::string s;
  char b[1024];
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" "
                "font-size=\"11\">\n<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" "
                "patternUnits=\"userSpaceOnUse\" "
                "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" "
                "fill=\"#d9d9d9\"/><line x1=\"0\" y1=\"0\" "
                "x2=\"0\" y2=\"6\" stroke=\"#999\" stroke-width=\"2\"/></pattern>\n"
                "<linearGradient id=\"bar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\"><stop offset=\"0\" "
                "stop-color=\"%s\"/>"
                "<stop offset=\"1\" stop-color=\"%s\"/></linearGradient></defs>\n<rect "
                "width=\"100%%\" height=\"100%%\" "
                "fill=\"white\"/>\n",
                W, H, colour(0).c_str(), colour(1).c_str());
  s += b;
  s += "<text x=\"20\" y=\"24\" font-size=\"15\">attention weights: " + xml_escape(m.model) +
       "</text>\n";
  char cap[600];
  std::snprintf(cap, sizeof cap, kCaption, sel.decimals);
  // The caption, a sentence a line.
  std::string rest = cap;
  for (double y = 40; !rest.empty(); y += 13) {
    size_t cut = rest.find(". ");
    cut = cut == std::string::npos ? rest.size() : cut + 1;
    s += "<text x=\"20\" y=\"" + std::to_string(static_cast<int>(y)) + "\" font-size=\"10\">" +
         xml_escape(rest.substr(0, cut)) + "</text>\n";
    rest = cut < rest.size() ? rest.substr(cut + 1) : "";
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t cidx = 0; cidx < cols; ++cidx) {
      const int64_t l = layers[r], h = heads[cidx];
      const double ox = 40 + cidx * panel_w + label_w, oy = 95 + r * panel_h + top;
      std::snprintf(b, sizeof b, "<g class=\"heatmap\" data-layer=\"%lld\" data-head=\"%lld\">\n",
                    (long long)l, (long long)h);
      s += b;
      std::snprintf(b, sizeof b,
                    "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">layer %lld, "
                    "head %lld</text>\n",
                    ox, oy - top + 14, (long long)l, (long long)h);
      s += b;
      std::snprintf(
          b, sizeof b,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">key position j (column)</text>\n",
          ox + map / 2, oy - top + 32);
      s += b;
      std::snprintf(b, sizeof b,
                    "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" "
                    "text-anchor=\"middle\">query position i (row)</text>\n",
                    ox - label_w + 10, oy + map / 2);
      s += b;
      for (int64_t j = 0; j < T; ++j) {
        std::snprintf(b, sizeof b,
                      "<text transform=\"translate(%.1f,%.1f) rotate(-60)\" class=\"key-label\">",
                      ox + (j + 0.5) * cell, oy - 4);
        s += b + xml_escape(std::to_string(j) + " " + m.tokens[j]) + "</text>\n";
      }
      for (int64_t i = 0; i < T; ++i) {
        std::snprintf(b, sizeof b,
                      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"query-label\">",
                      ox - 4, oy + (i + 0.5) * cell + 4);
        s += b + xml_escape(m.tokens[i] + " " + std::to_string(i)) + "</text>\n";
        std::vector<double> row(m.weights[l][h].begin() + i * T,
                                m.weights[l][h].begin() + (i + 1) * T);
        const std::vector<int64_t> shown = round_row(row, sel.decimals);
        for (int64_t j = 0; j < T; ++j) {
          const bool mk = masked(m, i, j);
          std::snprintf(b, sizeof b,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                        "stroke=\"white\"/>",
                        ox + j * cell, oy + i * cell, cell, cell,
                        mk ? "url(#hatch)" : colour(row[j]).c_str());
          s += b;
          if (numbers && !mk) {
            std::snprintf(b, sizeof b,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"%.0f\" "
                          "fill=\"%s\">%s</text>",
                          ox + (j + 0.5) * cell, oy + (i + 0.5) * cell + 3, cell <= 20 ? 7.0 : 9.0,
                          row[j] > 0.55 ? "white" : "black", fixed(shown[j], sel.decimals).c_str());
            s += b;
          }
        }
        s += "\n";
      }
      s += "</g>\n";
    }
  // Colour bar and legend.
  const double bx = W - 70, by = 90, bh = 200;
  std::snprintf(b, sizeof b,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"16\" height=\"%.0f\" fill=\"url(#bar)\" "
                "stroke=\"#333\"/>"
                "<text x=\"%.0f\" y=\"%.0f\">1</text><text x=\"%.0f\" y=\"%.0f\">0.5</text><text "
                "x=\"%.0f\" y=\"%.0f\">0</text>"
                "<text x=\"%.0f\" y=\"%.0f\">weight</text>\n"
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"16\" height=\"16\" "
                "fill=\"url(#hatch)\"/><text x=\"%.0f\" y=\"%.0f\">masked</text>"
                "<text x=\"%.0f\" y=\"%.0f\">(future: 0)</text>\n",
                bx, by, bh, bx + 20, by + 8, bx + 20, by + bh / 2 + 4, bx + 20, by + bh, bx - 4,
                by - 8, bx, by + bh + 20, bx + 20, by + bh + 33, bx - 10, by + bh + 50);
  s += b;
  s += "</svg>\n";
  return s;
}

}  // namespace attend::viz
