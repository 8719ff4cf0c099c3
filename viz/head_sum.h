// "Concatenated or summed?" For one position of one layer: each head's proposed change to
// the residual stream, value_up_h(sum_j w_ij value_down_h(x_j)), i.e. c_proj's HS columns
// of head h times the head's output (its weighted sum of values); their sum over heads;
// and c_proj applied to the concatenated heads (without its bias), as the model computes
// it. The two are the same linear map, so they differ by rounding only.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

struct HeadChange {
  std::vector<double> change;  // (C)
  double norm = 0;
  std::vector<std::pair<int64_t, double>> top;  // the largest |components|: (dim, value)
};

struct HeadSum {
  int64_t layer = 0, position = 0;
  std::string token;
  std::vector<HeadChange> heads;
  std::vector<double> sum;           // sum over heads, in double
  std::vector<double> concat_cproj;  // c_proj(concat) - bias, the model's f32 path
  double max_abs_difference = 0;     // between the two
};

// One forward of the model on the prompt. Throws naming the flag for a layer or position
// out of range.
HeadSum head_sum(const nn::GPT& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                 int64_t layer, int64_t position, int top_k = 5);

// The same for every position at once, from a layer's head outputs (NH, T, HS) and its
// c_proj (layer, position and token left for the caller); c_proj's weights are read once.
// top_k 0: no top dimensions.
std::vector<HeadSum> head_sums(const Tensor& heads, const nn::Linear& c_proj, int top_k);

std::string head_sum_text(const HeadSum& s);

}  // namespace attend::viz
#pragma GCC visibility pop
