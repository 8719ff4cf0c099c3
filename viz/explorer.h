// The attention explorer behind `attend attention`: the attention weights of a model on a
// prompt, and four views of them (CSV, JSON, SVG, self-contained HTML).
//
// Conventions, in every view: rows are query positions i, columns are key positions j.
// The weights are the softmax output before dropout, in eval mode; masked (future) cells
// are exactly 0 in the data and drawn hatched grey. Numbers written in cells are the true
// weights rounded to `decimals` places by largest-remainder rounding, so each row's shown
// numbers add up to exactly 1; colour encodes the true weight.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "nn/gpt.h"

namespace attend::viz {

struct AttentionMap {
  std::string model;  // a one-line description
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;  // display text: whitespace made visible
  int64_t n_layer = 0, n_head = 0, head_size = 0;
  int64_t n_kv_head = 0;  // query head h reads key/value head h / (n_head / n_kv_head)
  bool causal = true;
  // [layer][head] -> T*T row-major (query i, key j)
  std::vector<std::vector<std::vector<double>>> weights;
  std::vector<std::vector<std::vector<double>>>
      scores;  // q_i . k_j, before / sqrt(HS) and the mask
  int64_t T() const { return static_cast<int64_t>(tokens.size()); }
};

// "GPT: 4 layers, 4 heads (4 key/value heads), C 128, V 65, tokenizer char".
std::string describe(const nn::GPTConfig& config, const std::string& tokenizer);

// The model's own attention on the prompt: one forward with an nn::AttentionTrace.
// Throws if the prompt is empty or longer than block_size (giving both numbers).
AttentionMap compute_attention(const nn::GPT& model, const data::Tokenizer& tokenizer,
                               const std::string& prompt);

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
};

// One head's habits over the prompt's queries (means over query rows i):
//   entropy   -sum_j w_ij ln w_ij, in nats (0: all on one key; ln(i+1): uniform)
//   diagonal  w_ii, the share on the query's own position
//   previous  w_i,i-1 over rows i >= 1, the share on the token before
struct HeadStats {
  double entropy = 0, diagonal = 0, previous = 0;
};
HeadStats head_stats(const std::vector<double>& weights, int64_t T);

// The JSON payload of the JSON view and the HTML page: model, convention, caption,
// tokens, ids, head_size, decimals, scale, and per selected layer and head the weights,
// the shown (rounded) numbers in units of 10^-decimals and, when asked, the scores
// q.k/sqrt(HS) before the mask. Throws naming --layer or --head out of range.
nlohmann::ordered_json attention_payload(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_caption(int decimals, const std::string& convention = "row");

std::string attention_csv(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_json(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_svg(const AttentionMap& m, const AttentionSelection& sel);
std::string attention_html(const AttentionMap& m, const AttentionSelection& sel);

}  // namespace attend::viz
