// The attention explorer (and what each head adds, the heads page): the data
// obeys the rules (masked cells exactly 0, rows summing to 1, shown rows summing to
// exactly 1), the rounding rule on adversarial rows, well-formed SVG with its labels, and
// HTML that runs in a browser.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"
#include "browser.h"
#include "fixture.h"
#include "xml_check.h"
#include "train/toy.h"
#include "viz/explorer.h"
#include "viz/plot.h"  // xml_escape

using namespace attend;
using namespace attend::viz;
using attend::test::Browser;
using attend::test::Fixture;
using attend::test::LlamaFixture;
using attend::test::xml_problem;
namespace fs = std::filesystem;

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("largest-remainder rounding: adversarial rows sum to exactly 1") {
  CHECK(round_row({1.0 / 3, 1.0 / 3, 1.0 / 3}, 1) == std::vector<int64_t>{4, 3, 3});
  CHECK(round_row({1.0, 0.0, 0.0}, 2) == std::vector<int64_t>{100, 0, 0});
  std::vector<double> tiny(1000, 1.0 / 1000);
  std::vector<int64_t> r = round_row(tiny, 2);
  CHECK(sum(r) == 100);
  CHECK(*std::max_element(r.begin(), r.end()) == 1);
  // Remainders decide: 0.456 -> 45 + 0.6 remainder, beats 0.544's 0.4.
  CHECK(round_row({0.456, 0.544}, 2) == std::vector<int64_t>{46, 54});
  // Exact zeros (masked cells) stay zero even when units are left to give.
  CHECK(round_row({0.335, 0.0, 0.665}, 1) == std::vector<int64_t>{3, 0, 7});
  Generator g(1);
  for (int k = 0; k < 200; ++k) {
    const int n = 1 + k % 40;
    Tensor w = kernel::softmax(randn({n}, g, DType::F64));
    for (int d : {1, 2, 3})
      CHECK(sum(round_row(w.to_vector<double>(), d)) == (d == 1 ? 10 : d == 2 ? 100 : 1000));
  }
}

TEST_CASE("the attention data: masked cells exactly 0, rows sum to 1, shown rows to exactly 1") {
  Fixture f;
  AttentionMap m = compute_attention(f.model, *f.tok, "a cab.\nfed bad");
  const int64_t T = m.T();
  CHECK(T == 14);
  CHECK(m.tokens[1] == "\u2423");  // a space, made visible
  CHECK(m.tokens[6] == "\u23CE");  // a newline
  for (int64_t l = 0; l < m.n_layer; ++l)
    for (int64_t h = 0; h < m.n_head; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> row(m.weights[l][h].begin() + i * T,
                                m.weights[l][h].begin() + (i + 1) * T);
        double s = 0;
        for (int64_t j = 0; j < T; ++j) {
          if (j > i) REQUIRE(row[j] == 0.0);
          s += row[j];
        }
        REQUIRE(std::abs(s - 1.0) <= 1e-6);
        REQUIRE(sum(round_row(row, 2)) == 100);
      }
  // The scores against an independent derivation from the weights: layer 0, head 2 (of 4,
  // with 2 key/value heads, so it reads k/v head 1): q = ln_1(x) Wq^T + bq, k likewise
  // from c_attn's rows C + HS .. C + 2 HS. f32 GEMMs of another shape: equal to rounding
  // (the scores here are below 1; 1e-5 is about 100 ulps).
  {
    NoGradGuard ng;
    std::vector<double> ids(m.ids.begin(), m.ids.end());
    const auto& tr = *f.model.transformer;
    Tensor x = add(tr.wte->forward(tensor(ids, {T}, DType::I64)),
                   tr.wpe->forward(arange(0, static_cast<double>(T), 1, DType::I64)));
    Tensor h = (*tr.h)[0].ln_1->forward(x);  // (T, C)
    const Tensor& W = (*tr.h)[0].attn->c_attn->weight;
    const Tensor& b = (*tr.h)[0].attn->c_attn->bias;
    const int64_t C = 16, HS = 4;
    Tensor q = add(matmul(h, transpose(narrow(W, 0, 2 * HS, HS), 0, 1)), narrow(b, 0, 2 * HS, HS));
    Tensor k = add(matmul(h, transpose(narrow(W, 0, C + HS, HS), 0, 1)), narrow(b, 0, C + HS, HS));
    Tensor s = matmul(q, transpose(k, 0, 1));  // (T, T)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        CHECK(std::abs(s.at({i, j}) - m.scores[0][2][i * T + j]) <= 1e-5);
  }
  test::check_error([&] { compute_attention(f.model, *f.tok, std::string(40, 'a')); },
                    "attention: the prompt is 40 tokens, longer than block_size 32");
}

TEST_CASE("the SVG is well-formed XML with axis titles, every token label and a legend") {
  Fixture f;
  AttentionMap m = compute_attention(f.model, *f.tok, "a<b & c\"d");
  const std::string svg = attention_svg(m, {{1}, {}, 2, false});
  CHECK(xml_problem(svg) == "");
  CHECK(svg.find("query position i (row)") != std::string::npos);
  CHECK(svg.find("key position j (column)") != std::string::npos);
  for (int64_t i = 0; i < m.T(); ++i) {
    CAPTURE(i);
    CHECK(svg.find(std::string(">") + xml_escape(std::to_string(i) + " " + m.tokens[i]) + "<") !=
          std::string::npos);
    CHECK(svg.find(std::string(">") + xml_escape(m.tokens[i] + " " + std::to_string(i)) + "<") !=
          std::string::npos);
  }
  CHECK(svg.find("masked") != std::string::npos);
  CHECK(svg.find("each row's shown numbers add up to exactly 1") != std::string::npos);
  CHECK(svg.find("url(#hatch)") != std::string::npos);
  // The checker itself refuses broken XML.
  CHECK(xml_problem("<svg><g></svg>") != "");
  CHECK(xml_problem("<a>x & y</a>") != "");
}

TEST_CASE("CSV and JSON carry the raw weights with their token labels") {
  Fixture f;
  AttentionMap m = compute_attention(f.model, *f.tok, "abc");
  const std::string csv = attention_csv(m, {{0}, {1}, 2, true});
  CHECK(csv.rfind("layer,head,query_index,query_token,key_index,key_token,masked,weight,score\n",
                  0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 9);
  CHECK(csv.find("0,1,0,\"a\",2,\"c\",1,0,") != std::string::npos);  // masked: exactly 0
  const std::string js = attention_json(m, {});
  CHECK(js.find("\"tokens\"") != std::string::npos);
  CHECK(js.find("query position i (row)") != std::string::npos);
}


TEST_CASE("the HTML runs in headless Chromium without script errors") {
  Fixture f;
  AttentionMap m = compute_attention(f.model, *f.tok, "a cab.\nfed bad dog");
  const std::string html = attention_html(m, {});
  CHECK(html.find("<script src") == std::string::npos);  // self-contained
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  const fs::path out = fs::path(ATTEND_BUILD_DIR) / "attention_test.html";
  std::ofstream(out) << html;
  const char* chromium = std::getenv("ATTEND_CHROMIUM");
  const std::string exe = chromium ? chromium : "/usr/bin/chromium";
  if (!fs::exists(exe)) {
    ATTEND_SKIP("Chromium not found at " + exe +
               " (apt-get install chromium; scripts/test.sh installs it)");
  }
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking"
      " --disable-component-update --disable-sync --user-data-dir=" +
      attend::test::chromium_profile().string();
  const fs::path dom = fs::path(ATTEND_BUILD_DIR) / "attention_test.dom";
  const int rc = std::system(
      (exe + flags + " --dump-dom file://" + out.string() + " > " + dom.string() + " 2>/dev/null")
          .c_str());
  CHECK(rc == 0);
  std::ifstream in(dom);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  CAPTURE(page.substr(0, 300));
  CHECK(page.find("data-status=\"ok\"") != std::string::npos);
  CHECK(page.find("How weight (") != std::string::npos);  // the chain panel was drawn
  CHECK(page.find("data-convention=\"row\"") != std::string::npos);
  CHECK(page.find("<td class=\"sum\">1.00</td>") != std::string::npos);     // row sums
  CHECK(page.find("reads key/value head 0, shared") != std::string::npos);  // GQA label
  CHECK(page.find("weight on the previous token") != std::string::npos);    // head stats
  CHECK(page.find("key position j (column)") != std::string::npos);
  CHECK(page.find("Neuron view: which dimensions make the score") != std::string::npos);
  CHECK(page.find("What each head adds at position") != std::string::npos);
  // The same page opened in the column convention (--convention column: the toggle's
  // initial state): queries along the top, and the formula and caption follow.
  AttentionSelection col;
  col.convention = "column";
  std::ofstream(out) << attention_html(m, col);
  REQUIRE(std::system((exe + flags + " --dump-dom file://" + out.string() + " > " + dom.string() +
                       " 2>/dev/null")
                          .c_str()) == 0);
  std::ifstream in2(dom);
  const std::string page2((std::istreambuf_iterator<char>(in2)), {});
  CHECK(page2.find("data-status=\"ok\"") != std::string::npos);
  CHECK(page2.find("data-convention=\"column\"") != std::string::npos);
  CHECK(page2.find("query position i (column)") != std::string::npos);
  CHECK(page2.find("V softmax(K") != std::string::npos);
  CHECK(page2.find("Columns are query positions i") != std::string::npos);
  CHECK(page2.find("<th class=\"top query\" data-i=\"0\">") != std::string::npos);
  const fs::path png = fs::path(ATTEND_BUILD_DIR) / "attention_test.png";
  std::system((exe + flags + " --window-size=1400,1000 --screenshot=" + png.string() + " file://" +
               out.string() + " > /dev/null 2>&1")
                  .c_str());
  CHECK(fs::exists(png));
  MESSAGE("screenshot: ", png.string());
  fs::remove_all(attend::test::chromium_profile());
}

TEST_CASE("--convention column: the same weights transposed, columns sum to 1, labelled") {
  // #11 item 1: 3Blue1Brown's column vectors (K^T Q) against the books' rows (Q K^T).
  Fixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "to be or not");
  const int64_t T = m.T();
  AttentionSelection row, col;
  row.scores = col.scores = true;
  col.convention = "column";
  const auto jr = nlohmann::json::parse(attention_json(m, row));
  const auto jc = nlohmann::json::parse(attention_json(m, col));
  CHECK(jr["formula"].get<std::string>().rfind("softmax(Q K^T / sqrt(4)) V", 0) == 0);
  CHECK(jc["formula"].get<std::string>().rfind("V softmax(K^T Q / sqrt(4))", 0) == 0);
  CHECK(jc["convention"].get<std::string>().find("columns sum to 1") != std::string::npos);
  for (size_t l = 0; l < jr["layers"].size(); ++l)
    for (size_t h = 0; h < jr["layers"][l]["heads"].size(); ++h) {
      const auto& a = jr["layers"][l]["heads"][h];
      const auto& b = jc["layers"][l]["heads"][h];
      for (const char* key : {"weights", "shown", "scores"})
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) CHECK(a[key][i][j] == b[key][j][i]);  // exactly
      for (int64_t i = 0; i < T; ++i) {  // column i (query i) sums to 1; below the diagonal 0
        double s = 0;
        for (int64_t j = 0; j < T; ++j) {
          s += b["weights"][j][i].get<double>();
          if (j > i) CHECK(b["weights"][j][i].get<double>() == 0.0);
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
      }
    }
  // CSV: keys first, every cell the same number as in the row file.
  const std::string cr = attention_csv(m, {{0}, {1}, 2, false, "row"});
  const std::string cc = attention_csv(m, {{0}, {1}, 2, false, "column"});
  CHECK(cc.rfind("layer,head,key_index,key_token,query_index,query_token,masked,weight\n", 0) == 0);
  std::map<std::pair<int, int>, std::string> cells_r, cells_c;
  auto read = [](const std::string& csv, bool key_first, auto& cells) {
    std::stringstream in(csv);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::string cell;
      bool quoted = false;
      for (char ch : line) {
        if (ch == '"') quoted = !quoted;
        if (ch == ',' && !quoted)
          f.push_back(cell), cell.clear();
        else
          cell += ch;
      }
      f.push_back(cell);
      const int a = std::stoi(f[2]), b = std::stoi(f[4]);
      cells[key_first ? std::make_pair(b, a) : std::make_pair(a, b)] = f[6] + "," + f[7];
    }
  };
  read(cr, false, cells_r);
  read(cc, true, cells_c);
  CHECK(cells_r.size() == static_cast<size_t>(T * T));
  CHECK(cells_r == cells_c);
}

TEST_CASE("--convention column SVG: queries as columns, the mask below the diagonal") {
  Fixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "to be or not");
  for (const std::string conv : {"row", "column"}) {
    CAPTURE(conv);
    AttentionSelection sel{{0}, {0}, 2, false, conv};
    const std::string svg = attention_svg(m, sel);
    CHECK(xml_problem(svg).empty());
    const bool col = conv == "column";
    CHECK(svg.find(col ? "query position i (column)" : "key position j (column)") !=
          std::string::npos);
    CHECK(svg.find(col ? "key position j (row)" : "query position i (row)") != std::string::npos);
    CHECK(svg.find(col ? "Columns are query positions i" : "Rows are query positions i") !=
          std::string::npos);
    // Every masked (hatched) cell lies above the diagonal in the row view (key > query)
    // and below it in the column view.
    double x0 = 1e9, y0 = 1e9;
    std::vector<std::pair<double, double>> hatched;
    for (size_t at = 0; (at = svg.find("<rect x=\"", at)) != std::string::npos; ++at) {
      const double x = std::stod(svg.substr(at + 9));
      const size_t yat = svg.find("y=\"", at);
      const double y = std::stod(svg.substr(yat + 3));
      const size_t end = svg.find("/>", at);
      if (svg.find("stroke=\"white\"", at) > end) continue;  // not a heatmap cell
      x0 = std::min(x0, x), y0 = std::min(y0, y);
      if (svg.substr(at, end - at).find("url(#hatch)") != std::string::npos)
        hatched.emplace_back(x, y);
    }
    const int64_t T = m.T();
    CHECK(hatched.size() == static_cast<size_t>(T * (T - 1) / 2));
    for (const auto& [x, y] : hatched) CHECK((col ? y - y0 > x - x0 : x - x0 > y - y0));
  }
}

TEST_CASE("head statistics: entropy, own-position and previous-token shares") {
  // Hand-made weights for T = 3 (causal rows): a previous-token head and a uniform one.
  const std::vector<double> prev = {1, 0, 0, 1, 0, 0, 0, 1, 0};
  const HeadStats p = head_stats(prev, 3);
  CHECK(p.entropy == 0.0);
  CHECK(p.diagonal == doctest::Approx(1.0 / 3));  // only row 0 sits on itself
  CHECK(p.previous == 1.0);
  const std::vector<double> uni = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  const HeadStats u = head_stats(uni, 3);
  CHECK(u.entropy == doctest::Approx((0 + std::log(2.0) + std::log(3.0)) / 3).epsilon(1e-12));
  CHECK(u.diagonal == doctest::Approx((1 + 0.5 + 1.0 / 3) / 3).epsilon(1e-12));
  CHECK(u.previous == doctest::Approx((0.5 + 1.0 / 3) / 2).epsilon(1e-12));
}

TEST_CASE("neuron view: each score is the sum over dimensions of q_i[d] k_j[d] (GQA model)") {
  // #11 item 5: the chain panel's q_i and k_j. The map's q and k are the model's own (its
  // trace), so their dot product must give the model's score: f32 GEMM against a sum in
  // double over HS = 4 terms, equal to f32 rounding.
  Fixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "to be or not");
  const int64_t T = m.T(), HS = m.head_size;
  REQUIRE(m.q.size() == 2);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < m.n_head; ++h) {
      REQUIRE(m.q[l][h].size() == static_cast<size_t>(T * HS));
      REQUIRE(m.k[l][h].size() == static_cast<size_t>(T * HS));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0, mag = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dot += m.q[l][h][i * HS + d] * m.k[l][h][j * HS + d];
            mag += std::abs(m.q[l][h][i * HS + d] * m.k[l][h][j * HS + d]);
          }
          CHECK(std::abs(dot - m.scores[l][h][i * T + j]) <= 1e-6 * mag + 1e-12);
        }
    }
  // Heads 0 and 1 share key/value head 0 (n_kv_head 2): the same keys.
  CHECK(m.k[0][0] == m.k[0][1]);
  CHECK(m.k[0][1] != m.k[0][2]);
  // The JSON carries them with --scores (5 significant digits).
  AttentionSelection sel;
  sel.vectors = true;
  const auto j = nlohmann::json::parse(attention_json(m, sel));
  CHECK(j["layers"][0]["heads"][2]["q"].size() == static_cast<size_t>(T));
  CHECK(j["layers"][0]["heads"][2]["k"][0].size() == static_cast<size_t>(HS));
  CHECK(j["layers"][1]["heads"][3]["q"][4][1].get<double>() ==
        doctest::Approx(m.q[1][3][4 * HS + 1]).epsilon(1e-4));
}

namespace {

// An untrained encoder-decoder with a 5-token source and a 3-token target: the views must
// not assume a square map.
struct CrossFixture {
  nn::Seq2Seq s2s{{7, 8, 1, 2, 8}, 4};
  std::vector<int32_t> src{1, 4, 0, 6, 2}, tgt{3, 5, 5};
  std::vector<std::string> st{"a", "b", "c", "d", "e"}, tt{"X", "Y", "Z"};
  CrossFixture() { s2s.eval(); }
  AttentionMap map(const std::string& which) const {
    return compute_seq2seq_attention(s2s, src, st, tgt, tt, which, "toy");
  }
};

}  // namespace

TEST_CASE("cross-attention maps are Tq x Tk: rows sum to 1, no mask, transposition exact") {
  const CrossFixture f;
  const AttentionMap m = f.map("cross");
  CHECK(m.kind == "cross-attention");
  CHECK_FALSE(m.causal);
  CHECK(m.T() == 3);
  CHECK(m.Tk() == 5);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        CHECK(m.weights[0][h][i * 5 + j] > 0);  // nothing masked
        sum += m.weights[0][h][i * 5 + j];
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    }
  AttentionSelection row, col;
  row.scores = col.scores = true;
  col.convention = "column";
  const auto jr = nlohmann::json::parse(attention_json(m, row));
  const auto jc = nlohmann::json::parse(attention_json(m, col));
  CHECK(jr["key_tokens"] == nlohmann::json(f.st));
  CHECK(jr["kind"] == "cross-attention");
  CHECK(jr["formula"].get<std::string>().find("weights (3 x 5)") != std::string::npos);
  CHECK(jc["formula"].get<std::string>().find("weights (5 x 3)") != std::string::npos);
  CHECK(jr["caption"].get<std::string>().find("There is no mask here") != std::string::npos);
  for (const char* key : {"weights", "shown", "scores"}) {
    REQUIRE(jc["layers"][0]["heads"][1][key].size() == 5);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        CHECK(jr["layers"][0]["heads"][1][key][i][j] == jc["layers"][0]["heads"][1][key][j][i]);
  }
  const std::string csv = attention_csv(m, {});
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 2 * 3 * 5);
  CHECK(csv.find("0,1,2,\"Z\",4,\"e\",0,") != std::string::npos);
  for (const char* conv : {"row", "column"}) {
    AttentionSelection sel;
    sel.convention = conv;
    const std::string svg = attention_svg(m, sel);
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find("fill=\"url(#hatch)\" stroke=\"white\"") ==
          std::string::npos);  // no cell masked
    CHECK(svg.find("cross-attention") != std::string::npos);
  }
  // The encoder's self-attention is bidirectional: weight above the diagonal.
  const AttentionMap e = f.map("encoder");
  CHECK(e.kind == "bidirectional self-attention");
  CHECK(e.T() == 5);
  CHECK(e.weights[0][0][0 * 5 + 4] > 0);
  const AttentionMap d = f.map("decoder");
  CHECK(d.causal);
  CHECK(d.weights[0][0][0 * 3 + 2] == 0.0);  // the future is exactly 0
  test::check_error([&] { f.map("both"); },
                    "--attention: expected encoder, decoder or cross, got 'both'");
}

TEST_CASE(
    "the toy encoder-decoder learns to reverse and its cross-attention is the anti-diagonal") {
  // #11 item 5: a cross-attention / bidirectional view from a model that learned something.
  // Deterministic training (Philox batches, fixed seed): 1500 steps, ~10 s on 2 threads.
  train::ToyOptions o;
  o.task = "reverse";
  const train::ToyModel toy = train::train_toy(o);
  MESSAGE("toy reverse loss after 1500 steps: ", toy.final_loss);
  CHECK(toy.final_loss < 0.05);
  int right = 0;
  const std::vector<std::string> held_out{"abcdef", "lkj", "gabled", "hhhaai", "fedlcbak"};
  for (const std::string& s : held_out)
    right += train::toy_decode(toy, s) == train::toy_answer("reverse", s);
  CHECK(right == static_cast<int>(held_out.size()));
  // Its cross-attention on "abcdef": some head of the last layer puts each output
  // position's largest weight on the mirrored source letter (t -> 5 - t).
  const std::string src = "gabled";
  const std::vector<int32_t> ids = train::toy_encode(src, "--prompt");
  const std::string answer = train::toy_decode(toy, src);
  const std::vector<int32_t> tgt = train::toy_decoder_input(answer);
  std::vector<std::string> st, tt;
  for (char ch : src) st.emplace_back(1, ch);
  for (size_t t = 0; t < tgt.size(); ++t) tt.push_back(std::to_string(t));
  const AttentionMap m =
      compute_seq2seq_attention(*toy.model, ids, st, tgt, tt, "cross", "toy reverse");
  const int64_t T = m.T(), last = m.n_layer - 1;
  int mirrored_heads = 0;
  for (int64_t h = 0; h < m.n_head; ++h) {
    bool all = true;
    for (int64_t i = 0; i < T; ++i) {
      const auto& w = m.weights[last][h];
      const auto row = w.begin() + i * T;
      all = all && std::max_element(row, row + T) - row == T - 1 - i;
    }
    mirrored_heads += all;
  }
  CHECK(mirrored_heads >= 1);
  // The page: cross-attention, no mask, its neuron view; a screenshot to look at.
  const fs::path page = fs::path(ATTEND_BUILD_DIR) / "attention_toy_cross.html";
  std::ofstream(page) << attention_html(m, {});
  REQUIRE_BROWSER(b);
  const std::string dom = b.dom(page);
  CHECK(dom.find("data-status=\"ok\"") != std::string::npos);
  CHECK(dom.find("Attention weights: cross-attention") != std::string::npos);
  CHECK(dom.find("no mask: every query sees every key") != std::string::npos);
  CHECK(dom.find("none: every key is kept") != std::string::npos);
  CHECK(dom.find("Neuron view") != std::string::npos);
  CHECK(dom.find("class=\"w masked\" data-i=\"0\"") == std::string::npos);  // no cell masked
  CHECK(dom.find("<td class=\"w\" data-i=\"0\" data-j=\"5\"") != std::string::npos);
  b.screenshot(page, fs::path(ATTEND_BUILD_DIR) / "attention_toy_cross.png", "1400,1000");
}

TEST_CASE("a Tq x Tk cross-attention page in both conventions runs in Chromium") {
  // 3 decoder queries, 5 encoder keys: the page's tables, sums and labels must follow the
  // two lengths, not one T, in both conventions.
  const AttentionMap m = CrossFixture().map("cross");
  REQUIRE_BROWSER(b);
  for (const char* conv : {"row", "column"}) {
    CAPTURE(conv);
    AttentionSelection sel;
    sel.convention = conv;
    const fs::path page =
        fs::path(ATTEND_BUILD_DIR) / (std::string("attention_cross_") + conv + ".html");
    std::ofstream(page) << attention_html(m, sel);
    const std::string dom = b.dom(page);
    CHECK(dom.find("data-status=\"ok\"") != std::string::npos);
    CHECK(dom.find("Q is ") != std::string::npos);  // the formula gives both lengths
    CHECK(dom.find("the weights are " +
                   std::string(conv[0] == 'r' ? "3 \u00d7 5" : "5 \u00d7 3")) != std::string::npos);
    // Every query's shown weights sum to 1.00: three sums, in the last column or row.
    size_t sums = 0;
    for (size_t at = 0; (at = dom.find("<td class=\"sum\">1.00</td>", at)) != std::string::npos;
         ++at)
      ++sums;
    CHECK(sums == 3);
    CHECK(dom.find(conv[0] == 'r' ? "key position j (column)" : "query position i (column)") !=
          std::string::npos);
    CHECK(dom.find("class=\"w\" data-i=\"2\" data-j=\"4\"") != std::string::npos);  // last cell
  }
  b.screenshot(fs::path(ATTEND_BUILD_DIR) / "attention_cross_column.html",
               fs::path(ATTEND_BUILD_DIR) / "attention_cross_column.png", "1200,800");
}

// ---- A Llama with Mistral's window in the explorer ----------------------------------------

TEST_CASE("a Mistral's map: cells outside the window exactly 0, drawn apart from the future") {
  LlamaFixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "a cab fed a bad egg");
  const int64_t T = m.T();
  CHECK(m.window == 4);
  CHECK(m.rope_theta == 10000.0);
  CHECK(m.model.find("Llama (Mistral, sliding window ") == 0);
  int outside = 0;
  for (int64_t l = 0; l < m.n_layer; ++l)
    for (int64_t h = 0; h < m.n_head; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double row = 0;
        for (int64_t j = 0; j < T; ++j) {
          const double w = m.weights[l][h][static_cast<size_t>(i * T + j)];
          CHECK(m.outside_window(i, j) == (j <= i - 4));
          CHECK(m.future(i, j) == (j > i));
          if (m.masked(i, j)) {
            CHECK(w == 0.0);
          } else {
            CHECK(w > 0.0);
          }
          outside += m.outside_window(i, j);
          row += w;
        }
        CHECK(std::abs(row - 1.0) < 1e-6);
      }
  CHECK(outside > 0);
  const std::string svg = attention_svg(m, {});
  CHECK(xml_problem(svg) == "");
  CHECK(svg.find("fill=\"url(#hatchw)\" stroke") != std::string::npos);  // a window cell
  CHECK(svg.find("class=\"window-legend\"") != std::string::npos);
  CHECK(svg.find("Sliding window of 4 keys") != std::string::npos);
  // A GPT's page has no window legend.
  Fixture g;
  CHECK(attention_svg(compute_attention(g.model, *g.tok, "a cab"), {}).find("window-legend") ==
        std::string::npos);
}

TEST_CASE("RoPE: the map's q and k are the rotated ones the model scores, q_raw and k_raw before") {
  LlamaFixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "a cab fed");
  const int64_t T = m.T(), HS = m.head_size;
  REQUIRE(m.q_raw.size() == 2);
  for (int64_t h = 0; h < m.n_head; ++h)
    for (int64_t i = 0; i < T; ++i) {
      // rotating q_raw at position i gives q
      const std::vector<double> raw(m.q_raw[0][h].begin() + i * HS,
                                    m.q_raw[0][h].begin() + (i + 1) * HS);
      const Tensor turned =
          kernel::rotary(tensor(raw, {1, 1, HS}, DType::F64), HS, HS, i, m.rope_theta);
      for (int64_t d = 0; d < HS; ++d)
        CHECK(turned.at({0, 0, d}) ==
              doctest::Approx(m.q[0][h][static_cast<size_t>(i * HS + d)]).epsilon(1e-5).scale(1e-6));
      // the neuron view: score = q_i . k_j of the rotated vectors
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < HS; ++d)
          s += m.q[0][h][static_cast<size_t>(i * HS + d)] * m.k[0][h][static_cast<size_t>(j * HS + d)];
        CHECK(s == doctest::Approx(m.scores[0][h][static_cast<size_t>(i * T + j)]).epsilon(1e-5).scale(1e-6));
      }
    }
  // The RoPE view's promise: the same q and k placed d apart score the same wherever they sit.
  const std::vector<double> q(m.q_raw[1][2].begin(), m.q_raw[1][2].begin() + HS),
      k(m.k_raw[1][2].begin() + HS, m.k_raw[1][2].begin() + 2 * HS);
  const std::vector<double> at0 = rope_scores_by_distance(q, k, m.rope_theta, T, 0);
  for (int64_t base : {1, 9, 500}) {
    const std::vector<double> moved = rope_scores_by_distance(q, k, m.rope_theta, T, base);
    for (int64_t d = 0; d < T; ++d)
      CHECK(moved[static_cast<size_t>(d)] ==
            doctest::Approx(at0[static_cast<size_t>(d)]).epsilon(1e-12).scale(1e-12));
  }
  double spread = 0;  // and the distance does matter
  for (double s : at0) spread = std::max(spread, std::abs(s - at0[0]));
  CHECK(spread > 1e-3);
}

TEST_CASE("a Llama's explorer page in Chromium: window legend, rotation panel, RoPE view") {
  LlamaFixture f;
  const AttentionMap m = compute_attention(f.model, *f.tok, "a cab fed a bad egg");
  const fs::path page = fs::path(ATTEND_BUILD_DIR) / "attention_llama_test.html";
  std::ofstream(page) << attention_html(m, {});
  REQUIRE_BROWSER(b);
  const std::string dom = b.dom(page);
  CHECK(dom.find("data-status=\"ok\"") != std::string::npos);
  CHECK(dom.find("outside the sliding window") != std::string::npos);
  CHECK(dom.find("class=\"w masked window\"") != std::string::npos);
  CHECK(dom.find("RoPE: q and k before and after rotation") != std::string::npos);
  CHECK(dom.find("RoPE view: q of query") != std::string::npos);
  CHECK(dom.find("rotation makes the score depend on the distance only") != std::string::npos);
  b.screenshot(page, fs::path(ATTEND_BUILD_DIR) / "attention_llama_test.png", "1400,1100");
}
