#include "viz/explorer.h"

#include <spdlog/fmt/fmt.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "tensor/kernels.h"
#include "viz/plot.h"

// The explorer's views of an AttentionMap (viz/attention_map.cpp makes it): CSV, JSON,
// SVG; the HTML page is explorer_html.cpp with attention.html.
namespace attend::viz {

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

bool masked(const AttentionMap& m, int64_t i, int64_t j) { return m.masked(i, j); }

// Rounded for the page (the neuron view): 5 significant digits keep the JSON small.
double short_number(double x) { return std::stod(fmt::format("{:.5g}", x)); }

std::string fixed(int64_t units, int decimals) {
  const int64_t scale = static_cast<int64_t>(std::llround(std::pow(10.0, decimals)));
  return fmt::format("{}.{:0{}}", units / scale, units % scale, decimals);
}

// White -> deep blue by the true weight.
std::string colour(double w) {
  w = std::clamp(w, 0.0, 1.0);
  const int r = static_cast<int>(std::lround(255 - w * (255 - 8)));
  const int g = static_cast<int>(std::lround(255 - w * (255 - 48)));
  const int b = static_cast<int>(std::lround(255 - w * (255 - 107)));
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

}  // namespace

std::string attention_caption(int decimals, const std::string& convention, bool causal) {
  if (!causal) {
    const bool col = convention == "column";
    return fmt::format(
        "{0} are query positions i, {1} are key positions j. Each {2} is a softmax over the keys, "
        "so each {2} of true weights sums to 1. There is no mask here: every query sees every "
        "key, earlier or later. Numbers are the weights rounded to {3} decimals by "
        "largest-remainder rounding, so each {2}'s shown numbers add up to exactly 1. Colour "
        "encodes the true weight.",
        col ? "Columns" : "Rows", col ? "rows" : "columns", col ? "column" : "row", decimals);
  }
  if (convention == "column")
    return fmt::format(
        "Columns are query positions i, rows are key positions j (column vectors, K^T Q). Each "
        "column is a softmax over the keys, so each column of true weights sums to 1; masked "
        "(future) cells, below the diagonal, are exactly 0 and drawn hatched grey. Numbers are "
        "the weights rounded to {} decimals by largest-remainder rounding, so each column's "
        "shown numbers add up to exactly 1. Colour encodes the true weight.",
        decimals);
  return fmt::format(
      "Rows are query positions i, columns are key positions j. Each row is a softmax over the "
      "keys, so each row of true weights sums to 1; masked (future) cells are exactly 0 and drawn "
      "hatched grey. Numbers are the weights rounded to {} decimals by largest-remainder "
      "rounding, so each row's shown numbers add up to exactly 1. Colour encodes the true weight.",
      decimals);
}

namespace {
// Appended to the caption of a sliding-window model, and of an instruction example.
std::string window_sentence(const AttentionMap& m) {
  std::string s;
  if (m.window > 0)
    s = fmt::format(
        " Sliding window of {} keys: query i sees keys i - {} < j <= i; the keys further back "
        "are masked too, exactly 0 and drawn hatched blue.",
        m.window, m.window);
  if (m.prompt_tokens > 0)
    s += fmt::format(
        " An instruction example: tokens 0 to {} are its prompt, which the loss never scores; "
        "tokens {} to {} (labels in orange) are the response and its end marker, the targets "
        "the loss reads, each predicted from the positions before it.",
        m.prompt_tokens - 1, m.prompt_tokens, m.T() - 1);
  return s;
}
}  // namespace


namespace {

// Rows of a (T, Tk) matrix (values times scale) as JSON arrays.
nlohmann::ordered_json matrix_rows(const std::vector<double>& v, int64_t T, int64_t Tk,
                                   double scale) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> r(v.begin() + i * Tk, v.begin() + (i + 1) * Tk);
    for (double& x : r) x *= scale;
    out.push_back(r);
  }
  return out;
}

// n vectors of HS values, 5 significant digits.
nlohmann::ordered_json head_vectors(const std::vector<double>& v, int64_t HS) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i + static_cast<size_t>(HS) <= v.size(); i += static_cast<size_t>(HS)) {
    std::vector<double> r(v.begin() + static_cast<std::ptrdiff_t>(i),
                          v.begin() + static_cast<std::ptrdiff_t>(i) + HS);
    for (double& x : r) x = short_number(x);
    out.push_back(r);
  }
  return out;
}

// Head h of layer l: its weights (raw and as shown), statistics, and what the selection
// asks for (scores, q/k vectors), and how much it changes each position.
nlohmann::ordered_json head_json(const AttentionMap& m, const AttentionSelection& sel, int64_t l,
                                 int64_t h) {
  const int64_t T = m.T(), Tk = m.Tk(), HS = m.head_size;
  const std::vector<double>& w = m.weights[l][h];
  nlohmann::ordered_json hj;
  hj["head"] = h;
  hj["kv_head"] = h / (m.n_head / std::max<int64_t>(1, m.n_kv_head));
  const bool self = m.key_tokens.empty();
  const HeadStats st = head_stats(w, T, Tk, self);
  hj["stats"] = self ? nlohmann::ordered_json{{"entropy", st.entropy},
                                              {"diagonal", st.diagonal},
                                              {"previous", st.previous}}
                     : nlohmann::ordered_json{{"entropy", st.entropy}};
  hj["weights"] = matrix_rows(w, T, Tk, 1.0);
  nlohmann::ordered_json shown = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < T; ++i)
    shown.push_back(
        round_row(std::vector<double>(w.begin() + i * Tk, w.begin() + (i + 1) * Tk), sel.decimals));
  hj["shown"] = shown;
  if (sel.scores)
    hj["scores"] = matrix_rows(m.scores[l][h], T, Tk, 1.0 / std::sqrt(static_cast<double>(HS)));
  if (sel.vectors && l < static_cast<int64_t>(m.q.size())) {
    hj["q"] = head_vectors(m.q[l][h], HS);
    hj["k"] = head_vectors(m.k[l][h], HS);
    if (l < static_cast<int64_t>(m.q_raw.size())) {
      hj["q_raw"] = head_vectors(m.q_raw[l][h], HS);
      hj["k_raw"] = head_vectors(m.k_raw[l][h], HS);
    }
  }
  if (l < static_cast<int64_t>(m.change_norm.size())) {
    std::vector<double> norms;
    for (int64_t i = 0; i < T; ++i)
      norms.push_back(short_number(m.change_norm[l][static_cast<size_t>(i * m.n_head + h)]));
    hj["change_norm"] = norms;  // per query position: |this head's change|
  }
  return hj;
}

}  // namespace

nlohmann::ordered_json attention_payload(const AttentionMap& m, const AttentionSelection& sel) {
  nlohmann::ordered_json j;
  j["model"] = m.model;
  j["kind"] = m.kind;
  j["convention"] =
      std::string(
          "weights[i][j]: query position i (row) attends to key position j (column); rows "
          "sum to 1; ") +
      (m.causal ? "masked (future) entries are exactly 0" : "no mask");
  j["caption"] = attention_caption(sel.decimals, "row", m.causal) + window_sentence(m);
  j["caption_column"] =
      attention_caption(sel.decimals, "column", m.causal) + window_sentence(m);  // the toggle
  j["convention_initial"] = sel.convention;
  j["causal"] = m.causal;
  j["window"] = m.window;          // > 0: keys j <= i - window are masked too
  j["rope_theta"] = m.rope_theta;  // > 0: q and k are rotated (q_raw, k_raw before)
  j["tokens"] = m.tokens;
  if (!m.key_tokens.empty()) j["key_tokens"] = m.key_tokens;
  // An instruction example: tokens >= prompt_tokens are the response, the loss's targets.
  if (m.prompt_tokens > 0) j["prompt_tokens"] = m.prompt_tokens;
  j["ids"] = m.ids;
  j["head_size"] = m.head_size;
  j["decimals"] = sel.decimals;
  j["scale"] = static_cast<int64_t>(std::llround(std::pow(10.0, sel.decimals)));
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int64_t l : pick(sel.layers, m.n_layer, "layer")) {
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (int64_t h : pick(sel.heads, m.n_head, "head")) heads.push_back(head_json(m, sel, l, h));
    nlohmann::ordered_json lj{{"layer", l}, {"heads", heads}};
    if (l < static_cast<int64_t>(m.change_sum_norm.size())) {
      // Per query position: |sum of every head's change| and the largest difference
      // between that sum and concat -> c_proj (rounding).
      lj["change_sum_norm"] = m.change_sum_norm[l];
      lj["change_difference"] = m.change_difference[l];
    }
    layers.push_back(lj);
  }
  j["layers"] = layers;
  return j;
}

std::string attention_csv(const AttentionMap& m, const AttentionSelection& sel) {
  // Column convention: the same cells, keys first (key-major order), so a reader filling a
  // matrix row by row gets keys as rows and queries as columns.
  const bool column = sel.convention == "column";
  std::string o = column ? "layer,head,key_index,key_token,query_index,query_token,masked,weight"
                         : "layer,head,query_index,query_token,key_index,key_token,masked,weight";
  o += sel.scores ? ",score\n" : "\n";
  auto q = [](const std::string& s) {
    std::string r = "\"";
    for (char ch : s) r += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return r + "\"";
  };
  const int64_t T = m.T(), Tk = m.Tk();
  for (int64_t l : pick(sel.layers, m.n_layer, "layer"))
    for (int64_t h : pick(sel.heads, m.n_head, "head"))
      for (int64_t a = 0; a < (column ? Tk : T); ++a)
        for (int64_t b = 0; b < (column ? T : Tk); ++b) {
          const int64_t i = column ? b : a, j = column ? a : b;  // query i, key j
          const std::string& ta = column ? m.key_token(a) : m.tokens[a];
          const std::string& tb = column ? m.tokens[b] : m.key_token(b);
          o += fmt::format("{},{},{},{},{},{},{},{:.17g}", l, h, a, q(ta), b, q(tb),
                           masked(m, i, j) ? 1 : 0, m.weights[l][h][i * Tk + j]);
          if (sel.scores)
            o += fmt::format(",{:.17g}", m.scores[l][h][i * Tk + j] /
                                             std::sqrt(static_cast<double>(m.head_size)));
          o += "\n";
        }
  return o;
}

namespace {

nlohmann::ordered_json transposed(const nlohmann::ordered_json& rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t j = 0; !rows.empty() && j < rows[0].size(); ++j) {
    nlohmann::ordered_json col = nlohmann::ordered_json::array();
    for (size_t i = 0; i < rows.size(); ++i) col.push_back(rows[i][j]);
    out.push_back(col);
  }
  return out;
}

}  // namespace

std::string attention_json(const AttentionMap& m, const AttentionSelection& sel) {
  ATTEND_CHECK(sel.convention == "row" || sel.convention == "column",
               "attention: --convention must be row or column, got ", sel.convention);
  nlohmann::ordered_json j = attention_payload(m, sel);
  const int64_t T = m.T(), Tk = m.Tk(), HS = m.head_size;
  const std::string shapes_row = T == Tk
                                     ? fmt::format("Q, K, V ({} x {})", T, HS)
                                     : fmt::format("Q ({0} x {1}), K, V ({2} x {1})", T, HS, Tk);
  const std::string shapes_col = T == Tk
                                     ? fmt::format("Q, K, V ({} x {})", HS, T)
                                     : fmt::format("Q ({0} x {1}), K, V ({0} x {2})", HS, T, Tk);
  if (sel.convention == "row") {
    j["formula"] = fmt::format(
        "softmax(Q K^T / sqrt({0})) V: {1} one row per token; weights ({2} x {3}) row i = query i",
        HS, shapes_row, T, Tk);
    return j.dump(1) + "\n";
  }
  j["caption"] = attention_caption(sel.decimals, "column", m.causal);
  j["convention"] =
      std::string(
          "weights[j][i]: key position j (row) is attended to by query position i "
          "(column); columns sum to 1; ") +
      (m.causal ? "masked (future) entries, below the diagonal, are exactly 0" : "no mask");
  j["formula"] = fmt::format(
      "V softmax(K^T Q / sqrt({0})): {1} one column per token; weights ({2} x {3}) column i = "
      "query i",
      HS, shapes_col, Tk, T);
  for (auto& layer : j["layers"])
    for (auto& head : layer["heads"])
      for (const char* key : {"weights", "shown", "scores"})
        if (head.contains(key)) head[key] = transposed(head[key]);
  return j.dump(1) + "\n";
}

namespace {

// The SVG's parts, each a function of the map and the layout.
struct SvgLayout {
  int64_t T = 0;  // the longer side
  double cell = 0, label_w = 110, top = 160, map = 0, gap = 40, panel_w = 0, panel_h = 0;
  double map_w = 0, map_h = 0;  // the heatmap: columns x rows
  double W = 0, H = 0;
  bool numbers = false;
};

std::string svg_head(const AttentionMap& m, const AttentionSelection& sel, const SvgLayout& g) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#d9d9d9\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#999\" stroke-width=\"2\"/></pattern>\n"
      "<pattern id=\"hatchw\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(-45)\"><rect width=\"6\" height=\"6\" fill=\"#dbe4f0\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#7d93b5\" stroke-width=\"2\"/></pattern>\n"
      "<linearGradient id=\"bar\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
      "<stop offset=\"0\" stop-color=\"{}\"/><stop offset=\"1\" stop-color=\"{}\"/>"
      "</linearGradient></defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      g.W, g.H, colour(0), colour(1));
  s += "<text x=\"20\" y=\"24\" font-size=\"15\">attention weights (" + xml_escape(m.kind) +
       "): " + xml_escape(m.model) + "</text>\n";
  // The caption, a sentence a line.
  std::string rest = attention_caption(sel.decimals, sel.convention, m.causal) + window_sentence(m);
  for (int y = 40; !rest.empty(); y += 13) {
    size_t cut = rest.find(". ");
    cut = cut == std::string::npos ? rest.size() : cut + 1;
    s += fmt::format("<text x=\"20\" y=\"{}\" font-size=\"10\">{}</text>\n", y,
                     xml_escape(rest.substr(0, cut)));
    rest = cut < rest.size() ? rest.substr(cut + 1) : "";
  }
  return s;
}

// One heatmap: layer l, head h, its top-left cell at (ox, oy).
std::string svg_panel(const AttentionMap& m, const AttentionSelection& sel, const SvgLayout& g,
                      int64_t l, int64_t h, double ox, double oy) {
  const int64_t T = m.T(), Tk = m.Tk();
  const double cell = g.cell;
  // Row convention: query i is row i, key j column j. Column convention: transposed.
  const bool col = sel.convention == "column";
  const int64_t across = col ? T : Tk, down = col ? Tk : T;
  auto across_label = [&](int64_t t) { return col ? m.tokens[t] : m.key_token(t); };
  auto down_label = [&](int64_t t) { return col ? m.key_token(t) : m.tokens[t]; };
  std::string s = fmt::format("<g class=\"heatmap\" data-layer=\"{}\" data-head=\"{}\">\n", l, h);
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" font-weight=\"bold\">layer {}, head {}"
      "</text>\n<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}"
      "</text>\n<text transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\">"
      "{}</text>\n",
      ox, oy - g.top + 14, l, h, ox + g.map_w / 2, oy - g.top + 32,
      col ? "query position i (column)" : "key position j (column)", ox - g.label_w + 10,
      oy + g.map_h / 2, col ? "key position j (row)" : "query position i (row)");
  // An instruction example's response tokens (the loss's targets) in orange.
  auto mark = [&](int64_t t) {
    return m.response(t) ? std::string(" response\" fill=\"#c2410c") : std::string();
  };
  for (int64_t t = 0; t < across; ++t)
    s += fmt::format(
        "<text transform=\"translate({:.1f},{:.1f}) rotate(-60)\" class=\"{}{}\">{}</text>\n",
        ox + (t + 0.5) * cell, oy - 4, col ? "query-label" : "key-label", mark(t),
        xml_escape(std::to_string(t) + " " + across_label(t)));
  for (int64_t t = 0; t < down; ++t)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"{}{}\">{}</text>\n",
                     ox - 4, oy + (t + 0.5) * cell + 4, col ? "key-label" : "query-label", mark(t),
                     xml_escape(down_label(t) + " " + std::to_string(t)));
  for (int64_t i = 0; i < T; ++i) {
    const std::vector<double> row(m.weights[l][h].begin() + i * Tk,
                                  m.weights[l][h].begin() + (i + 1) * Tk);
    const std::vector<int64_t> shown = round_row(row, sel.decimals);
    for (int64_t j = 0; j < Tk; ++j) {
      const bool mk = masked(m, i, j);
      const double x = static_cast<double>(col ? i : j), y = static_cast<double>(col ? j : i);
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" "
          "stroke=\"white\"/>",
          ox + x * cell, oy + y * cell, cell, cell,
          !mk ? colour(row[j]) : m.outside_window(i, j) ? "url(#hatchw)" : "url(#hatch)");
      if (g.numbers && !mk)
        s += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"{:.0f}\" "
            "fill=\"{}\">{}</text>",
            ox + (x + 0.5) * cell, oy + (y + 0.5) * cell + 3, cell >= 40 ? 12.0 : 10.0,
            row[j] > 0.55 ? "white" : "black", fixed(shown[j], sel.decimals));
    }
    s += "\n";
  }
  return s + "</g>\n";
}

std::string svg_legend(const AttentionMap& m, const SvgLayout& g) {
  const double bx = g.W - 70, by = 90, bh = 200;
  std::string window;
  if (m.window > 0)
    window = fmt::format(
        "<rect x=\"{0:.0f}\" y=\"{1:.0f}\" width=\"16\" height=\"16\" fill=\"url(#hatchw)\" "
        "class=\"window-legend\"/><text x=\"{2:.0f}\" y=\"{3:.0f}\">outside</text>"
        "<text x=\"{4:.0f}\" y=\"{5:.0f}\">the window</text>"
        "<text x=\"{4:.0f}\" y=\"{6:.0f}\">(j &lt;= i - {7}: 0)</text>\n",
        bx, by + bh + 62, bx + 20, by + bh + 75, bx - 10, by + bh + 92, by + bh + 106, m.window);
  return window + fmt::format(
      "<rect x=\"{0:.0f}\" y=\"{1:.0f}\" width=\"16\" height=\"{2:.0f}\" fill=\"url(#bar)\" "
      "stroke=\"#333\"/><text x=\"{3:.0f}\" y=\"{4:.0f}\">1</text>"
      "<text x=\"{3:.0f}\" y=\"{5:.0f}\">0.5</text><text x=\"{3:.0f}\" y=\"{6:.0f}\">0</text>"
      "<text x=\"{7:.0f}\" y=\"{8:.0f}\">weight</text>\n"
      "<rect x=\"{0:.0f}\" y=\"{9:.0f}\" width=\"16\" height=\"16\" fill=\"url(#hatch)\"/>"
      "<text x=\"{3:.0f}\" y=\"{10:.0f}\">masked</text>"
      "<text x=\"{11:.0f}\" y=\"{12:.0f}\">(future: 0)</text>\n",
      bx, by, bh, bx + 20, by + 8, by + bh / 2 + 4, by + bh, bx - 4, by - 8, by + bh + 20,
      by + bh + 33, bx - 10, by + bh + 50);
}

}  // namespace

std::string attention_svg(const AttentionMap& m, const AttentionSelection& sel) {
  const auto layers = pick(sel.layers, m.n_layer, "layer");
  const auto heads = pick(sel.heads, m.n_head, "head");
  SvgLayout g;
  g.T = std::max(m.T(), m.Tk());
  // Cells large enough for numbers readable on a slide (10-12 px) where they are shown.
  g.cell = g.T <= 16 ? 40 : g.T <= 32 ? 28 : 12;
  g.numbers = g.T <= 24;
  const bool col = sel.convention == "column";
  g.map_w = g.cell * static_cast<double>(col ? m.T() : m.Tk());
  g.map_h = g.cell * static_cast<double>(col ? m.Tk() : m.T());
  g.map = std::max(g.map_w, g.map_h);
  g.panel_w = g.label_w + g.map_w + g.gap;
  g.panel_h = g.top + g.map_h + g.gap;
  const auto cols = static_cast<double>(heads.size()), rows = static_cast<double>(layers.size());
  g.W = std::max(760.0, 40 + cols * g.panel_w + 90);
  g.H = 95 + rows * g.panel_h + 60;
  std::string s = svg_head(m, sel, g);
  for (size_t r = 0; r < layers.size(); ++r)
    for (size_t c = 0; c < heads.size(); ++c)
      s += svg_panel(m, sel, g, layers[r], heads[c],
                     40 + static_cast<double>(c) * g.panel_w + g.label_w,
                     95 + static_cast<double>(r) * g.panel_h + g.top);
  return s + svg_legend(m, g) + "</svg>\n";
}

}  // namespace attend::viz
