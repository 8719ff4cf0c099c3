// The explorer's data (declared in viz/explorer.h): a model's own attention on a prompt,
// from one forward with nn::AttentionTrace, the token texts, and each head's habits. The
// views of it (CSV, JSON, SVG, HTML) are viz/explorer.cpp.
#include <spdlog/fmt/fmt.h>

#include <cmath>

#include "data/utf8.h"
#include "tensor/kernels.h"
#include "viz/explorer.h"
#include "viz/head_sum.h"

namespace attend::viz {

std::string display_token(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    data::Utf8Char c = data::decode_utf8(bytes, i);
    if (!c.valid) {
      out += fmt::format("\\x{:02X}", static_cast<uint8_t>(bytes[i]));
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

std::string describe(const nn::GPTConfig& c, const std::string& tokenizer) {
  return fmt::format("{}: {} layers, {} heads ({} key/value heads), C {}, V {}{}, tokenizer {}",
                     nn::describe(c), c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.vocab_size,
                     c.rotary() ? fmt::format(", RoPE theta {}", c.rope_theta) : "", tokenizer);
}

std::vector<double> rope_scores_by_distance(const std::vector<double>& q,
                                            const std::vector<double>& k, double theta, int64_t n,
                                            int64_t base) {
  const auto HS = static_cast<int64_t>(q.size());
  ATTEND_CHECK(HS > 0 && HS % 2 == 0 && k.size() == q.size() && n >= 0 && base >= 0,
               "rope_scores_by_distance: q and k of one even size, n and base >= 0");
  const Tensor qt = tensor(q, {1, 1, HS}, DType::F64), kt = tensor(k, {1, 1, HS}, DType::F64);
  const Tensor kr = kernel::rotary(kt, HS, HS, base, theta);
  std::vector<double> out;
  for (int64_t d = 0; d < n; ++d) {
    const Tensor qr = kernel::rotary(qt, HS, HS, base + d, theta);
    double s = 0;
    for (int64_t c = 0; c < HS; ++c) s += qr.at({0, 0, c}) * kr.at({0, 0, c});
    out.push_back(s);
  }
  return out;
}

namespace {

// One layer's trace into the map: weights, scores, queries and keys per query head.
void add_trace(AttentionMap& m, const nn::AttentionTrace& t) {
  const int64_t NH = m.n_head, G = NH / std::max<int64_t>(1, m.n_kv_head);
  auto head = [](const Tensor& x, int64_t h) {  // (1, H, A, B) -> A*B of head h
    return kernel::cast(kernel::select(kernel::select(x, 0, 0), 0, h), DType::F64)
        .to_vector<double>();
  };
  std::vector<std::vector<double>> w(NH), s(NH), q(NH), k(NH), qr, kr;
  for (int64_t h = 0; h < NH; ++h) {
    w[h] = head(t.weights, h);
    s[h] = head(t.scores, h);
    q[h] = head(t.q, h);
    k[h] = head(t.k, h / G);
    if (t.q_raw.defined()) {
      qr.push_back(head(t.q_raw, h));
      kr.push_back(head(t.k_raw, h / G));
    }
  }
  if (t.q_raw.defined()) {
    m.q_raw.push_back(std::move(qr));
    m.k_raw.push_back(std::move(kr));
  }
  m.weights.push_back(std::move(w));
  m.scores.push_back(std::move(s));
  m.q.push_back(std::move(q));
  m.k.push_back(std::move(k));
}

}  // namespace

AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tok,
                               const std::string& prompt) {
  return compute_attention(model, tok, tok.encode(prompt));
}

AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tok,
                               const std::vector<int32_t>& ids, int64_t prompt_tokens) {
  const nn::GPTConfig& c = model.config;
  AttentionMap m;
  m.ids = ids;
  ATTEND_CHECK(!m.ids.empty(), "attention: the prompt is empty");
  ATTEND_CHECK(prompt_tokens >= 0 && prompt_tokens <= static_cast<int64_t>(ids.size()),
               "attention: a prompt of ", prompt_tokens, " tokens in an example of ", ids.size());
  m.prompt_tokens = prompt_tokens;
  const int64_t T = static_cast<int64_t>(m.ids.size());
  ATTEND_CHECK(T <= c.block_size, "attention: the prompt is ", T,
               " tokens, longer than block_size ", c.block_size, "; shorten it to at most ",
               c.block_size, " tokens");
  for (int32_t id : m.ids) m.tokens.push_back(display_token(tok.decode({id})));
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_kv_head = c.n_kv_head;
  m.head_size = c.n_embd / c.n_head;
  m.causal = true;
  m.window = c.window();
  m.rope_theta = c.rotary() ? c.rope_theta : 0;
  m.model = describe(c, tok.spec().name);

  // One forward of the model itself, asked for its attention.
  NoGradGuard no_grad;
  std::vector<double> idv(m.ids.begin(), m.ids.end());
  std::vector<nn::AttentionTrace> trace;
  model.forward(tensor(idv, {1, T}, DType::I64), Tensor(), &trace);
  for (size_t l = 0; l < trace.size(); ++l) {
    add_trace(m, trace[l]);
    // What each head adds at each position: c_proj's HS columns of head h times its output.
    const nn::Linear& proj = *(*model.transformer->h)[l].attn->c_proj;
    const Tensor heads = kernel::contiguous(kernel::select(trace[l].heads, 0, 0));  // (NH, T, HS)
    std::vector<double> norms, sums, diffs;
    for (const HeadSum& hs : head_sums(heads, proj, 0)) {
      for (const HeadChange& hc : hs.heads) norms.push_back(hc.norm);
      double sn = 0;
      for (double x : hs.sum) sn += x * x;
      sums.push_back(std::sqrt(sn));
      diffs.push_back(hs.max_abs_difference);
    }
    m.change_norm.push_back(std::move(norms));
    m.change_sum_norm.push_back(std::move(sums));
    m.change_difference.push_back(std::move(diffs));
  }
  return m;
}

AttentionMap compute_seq2seq_attention(const nn::Seq2Seq& model, const std::vector<int32_t>& src,
                                       const std::vector<std::string>& src_tokens,
                                       const std::vector<int32_t>& tgt,
                                       const std::vector<std::string>& tgt_tokens,
                                       const std::string& which, const std::string& description) {
  ATTEND_CHECK(which == "encoder" || which == "decoder" || which == "cross",
               "--attention: expected encoder, decoder or cross, got '", which, "'");
  const nn::Seq2SeqConfig& c = model.config;
  AttentionMap m;
  m.model = description;
  m.n_layer = c.n_layer;
  m.n_head = m.n_kv_head = c.n_head;
  m.head_size = c.n_embd / c.n_head;
  m.causal = which == "decoder";
  m.kind = which == "encoder"   ? "bidirectional self-attention"
           : which == "decoder" ? "causal self-attention"
                                : "cross-attention";
  const bool source_queries = which == "encoder";
  m.ids = source_queries ? src : tgt;
  m.tokens = source_queries ? src_tokens : tgt_tokens;
  if (which == "cross") m.key_tokens = src_tokens;
  NoGradGuard no_grad;
  auto ids = [](const std::vector<int32_t>& v) {
    return tensor(std::vector<double>(v.begin(), v.end()), {1, static_cast<int64_t>(v.size())},
                  DType::I64);
  };
  nn::Seq2SeqTrace trace;
  model.forward(ids(src), ids(tgt), Tensor(), &trace);
  const auto& layers = which == "encoder"   ? trace.encoder
                       : which == "decoder" ? trace.decoder
                                            : trace.cross;
  for (const nn::AttentionTrace& layer : layers) add_trace(m, layer);
  return m;
}

HeadStats head_stats(const std::vector<double>& w, int64_t Tq, int64_t Tk, bool self) {
  if (self) return head_stats(w, Tq);
  HeadStats s;
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) {
      const double x = w[static_cast<size_t>(i * Tk + j)];
      if (x > 0) s.entropy -= x * std::log(x);
    }
  s.entropy /= static_cast<double>(Tq);
  return s;
}

HeadStats head_stats(const std::vector<double>& w, int64_t T) {
  HeadStats s;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) {
      const double x = w[static_cast<size_t>(i * T + j)];
      if (x > 0) s.entropy -= x * std::log(x);
    }
    s.diagonal += w[static_cast<size_t>(i * T + i)];
    if (i >= 1) s.previous += w[static_cast<size_t>(i * T + i - 1)];
  }
  s.entropy /= static_cast<double>(T);
  s.diagonal /= static_cast<double>(T);
  s.previous = T > 1 ? s.previous / static_cast<double>(T - 1) : 0.0;
  return s;
}

}  // namespace attend::viz
