// The attention explorer behind `attend attention`: the attention weights of a model on a
// prompt, and four views of them (CSV, JSON, SVG, self-contained HTML).
//
// Conventions, in every view: rows are query positions i, columns are key positions j
// (`--convention column` transposes). The weights are the softmax output before dropout,
// in eval mode; masked (future) cells are exactly 0 in the data and drawn hatched grey, and
// under a sliding window (Mistral) the keys outside the window too, drawn in another hatch.
// With RoPE (a Llama) q and k are the rotated ones the model scores, and q_raw, k_raw the
// projections before rotation.
// Besides a GPT's causal self-attention, a map can hold an encoder's bidirectional
// self-attention (no mask) or a decoder's cross-attention (queries are the decoder's
// tokens, keys the encoder's: Tq x Tk, not square), from nn::Seq2Seq. Numbers written in cells are
// the true weights rounded to `decimals` places by largest-remainder rounding, so each row's shown
// numbers add up to exactly 1; colour encodes the true weight.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "nn/seq2seq.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

struct AttentionMap {
  std::string model;  // a one-line description
  std::string kind =
      "causal self-attention";  // or "bidirectional self-attention", "cross-attention"
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;  // the queries' tokens; display text: whitespace made visible
  std::vector<std::string> key_tokens;  // cross-attention: the keys' tokens; empty: `tokens`
  int64_t n_layer = 0, n_head = 0, head_size = 0;
  int64_t n_kv_head = 0;  // query head h reads key/value head h / (n_head / n_kv_head)
  bool causal = true;
  // > 0: an instruction example (data/instructions.h): tokens [0, prompt_tokens) are its
  // prompt, the rest its response and end marker, the tokens the loss reads as targets
  // (shown in another colour); 0: plain text.
  int64_t prompt_tokens = 0;
  bool response(int64_t t) const { return prompt_tokens > 0 && t >= prompt_tokens; }
  int64_t window = 0;     // > 0: a sliding window of this many keys (Mistral)
  double rope_theta = 0;  // > 0: q and k were turned by RoPE with this theta (Llama)
  // [layer][head] -> T*T row-major (query i, key j)
  std::vector<std::vector<std::vector<double>>> weights;
  std::vector<std::vector<std::vector<double>>>
      scores;  // q_i . k_j, before / sqrt(HS) and the mask
  // [layer][head] -> Tq*HS queries and Tk*HS keys (the key/value head the head reads):
  // the neuron view, q_i . k_j = sum_d q_i[d] k_j[d].
  std::vector<std::vector<std::vector<double>>> q, k;
  std::vector<std::vector<std::vector<double>>> q_raw, k_raw;  // with RoPE: before rotation
  // [layer] -> Tq*NH: the norm of each head's change to the residual stream at each
  // position (value up times its weighted values; see head_sum.h), and [layer] -> Tq: the
  // largest |difference| between the heads' changes summed and concat -> c_proj. GPT only.
  std::vector<std::vector<double>> change_norm, change_sum_norm, change_difference;
  int64_t T() const { return static_cast<int64_t>(tokens.size()); }  // queries, Tq
  int64_t Tk() const { return key_tokens.empty() ? T() : static_cast<int64_t>(key_tokens.size()); }
  const std::string& key_token(int64_t j) const {
    return key_tokens.empty() ? tokens[static_cast<size_t>(j)] : key_tokens[static_cast<size_t>(j)];
  }
  // Key j of query i is masked as the future, or (window > 0) as outside the window.
  bool future(int64_t i, int64_t j) const { return causal && j > i + (Tk() - T()); }
  bool outside_window(int64_t i, int64_t j) const {
    return causal && window > 0 && j <= i + (Tk() - T()) - window;
  }
  bool masked(int64_t i, int64_t j) const { return future(i, j) || outside_window(i, j); }
};

// RoPE's promise, for one head: the score of query vector q (before rotation) placed at
// position base + d against key vector k placed at base, for d = 0..n-1 (the query d
// positions after the key). Every base gives the same scores up to rounding: rotation
// makes them depend on the distance only.
std::vector<double> rope_scores_by_distance(const std::vector<double>& q,
                                            const std::vector<double>& k, double theta, int64_t n,
                                            int64_t base = 0);

// "GPT: 4 layers, 4 heads (4 key/value heads), C 128, V 65, tokenizer char".
std::string describe(const nn::GPTConfig& config, const std::string& tokenizer);

// The model's own attention on the prompt: one forward with an nn::AttentionTrace.
// Throws if the prompt is empty or longer than block_size (giving both numbers).
AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tokenizer,
                               const std::string& prompt);
// The same on token ids; prompt_tokens > 0 marks an instruction example's prompt (above).
AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tokenizer,
                               const std::vector<int32_t>& ids, int64_t prompt_tokens = 0);

// An encoder-decoder's attention on a source and a target (teacher-forced): `which` is
// "encoder" (bidirectional self-attention over the source), "decoder" (causal
// self-attention over the target) or "cross" (target queries, source keys). Tokens are
// the display texts of the ids. Throws naming --attention for another `which`.
AttentionMap compute_seq2seq_attention(const nn::Seq2Seq& model, const std::vector<int32_t>& src,
                                       const std::vector<std::string>& src_tokens,
                                       const std::vector<int32_t>& tgt,
                                       const std::vector<std::string>& tgt_tokens,
                                       const std::string& which, const std::string& description);

// Largest-remainder rounding of a row that sums to 1: integer units of 10^-decimals that
// sum to exactly 10^decimals. Each weight gets floor(w * 10^d); the units left go to the
// largest remainders (ties: the earlier position). Exact zeros stay 0.
std::vector<int64_t> round_row(const std::vector<double>& row, int decimals);

// A token's text with whitespace made visible: space "␣", newline "⏎", tab "⇥",
// carriage return "␍"; bytes that are not UTF-8 as \xNN.
std::string display_token(const std::string& bytes);

struct AttentionSelection {
  std::vector<int64_t> layers, heads;  // empty: all
  int decimals = 2;
  bool scores = false;  // CSV/JSON: include the scores
  // CSV/JSON/SVG: "column" writes the column-vector convention (3Blue1Brown's K^T Q): the
  // same weights transposed, keys as rows and queries as columns, columns summing to 1.
  // "row" (the default): softmax(Q K^T) with queries as rows, as books and code write it.
  std::string convention = "row";
  bool vectors = false;  // JSON: include each head's q and k vectors (the HTML always does)
};

// One head's habits over the prompt's queries (means over query rows i):
//   entropy   -sum_j w_ij ln w_ij, in nats (0: all on one key; ln(i+1): uniform)
//   diagonal  w_ii, the share on the query's own position
//   previous  w_i,i-1 over rows i >= 1, the share on the token before
struct HeadStats {
  double entropy = 0, diagonal = 0, previous = 0;
};
HeadStats head_stats(const std::vector<double>& weights, int64_t T);
// Cross-attention (Tq x Tk): the entropy only (no own position, no previous token).
HeadStats head_stats(const std::vector<double>& weights, int64_t Tq, int64_t Tk, bool self);

// The JSON payload of the JSON view and the HTML page: model, convention, caption,
// tokens, ids, head_size, decimals, scale, and per selected layer and head the weights,
// the shown (rounded) numbers in units of 10^-decimals and, when asked, the scores
// q.k/sqrt(HS) before the mask. Throws naming --layer or --head out of range.
nlohmann::ordered_json attention_payload(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_caption(int decimals, const std::string& convention = "row",
                              bool causal = true);

std::string attention_csv(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_json(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_svg(const AttentionMap& m, const AttentionSelection& sel);
// diagram_svg: when given (viz/diagram.h, with the prompt's activations), the page ends
// with it and links to it from the top.
std::string attention_html(const AttentionMap& m, const AttentionSelection& sel,
                           const std::string& diagram_svg = "");

}  // namespace attend::viz
#pragma GCC visibility pop
