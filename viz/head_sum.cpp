#include "viz/head_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "tensor/kernels.h"
#include "viz/explorer.h"

namespace attend::viz {

HeadSum head_sum(const nn::GPT& model, const data::Tokenizer& tok, const std::string& prompt,
                 int64_t layer, int64_t position, int top_k) {
  const nn::GPTConfig& c = model.config;
  const data::TokenIds ids = tok.encode(prompt);
  const int64_t T = static_cast<int64_t>(ids.size());
  ATTEND_CHECK(T >= 1 && T <= c.block_size, "--prompt: ", T, " tokens; expected 1 to block_size ",
               c.block_size);
  ATTEND_CHECK(layer >= 0 && layer < c.n_layer, "--layer ", layer, ": the model has ", c.n_layer,
               " layers (0 to ", c.n_layer - 1, ")");
  ATTEND_CHECK(position >= 0 && position < T, "--position ", position, ": the prompt has ", T,
               " tokens (0 to ", T - 1, ")");
  NoGradGuard no_grad;
  std::vector<double> idv(ids.begin(), ids.end());
  std::vector<nn::AttentionTrace> trace;
  model.forward(tensor(idv, {1, T}, DType::I64), Tensor(), &trace);
  // The heads' outputs at the position: (NH, HS), and the concatenation (1, C) in f32.
  const Tensor heads = kernel::contiguous(
      kernel::select(kernel::select(trace[static_cast<size_t>(layer)].heads, 0, 0), 1, position));
  const nn::Linear& proj = *(*model.transformer->h)[static_cast<size_t>(layer)].attn->c_proj;
  HeadSum s = head_sums(kernel::unsqueeze(heads, 1), proj, top_k)[0];
  s.layer = layer, s.position = position;
  s.token = display_token(tok.decode({ids[static_cast<size_t>(position)]}));
  return s;
}

std::vector<HeadSum> head_sums(const Tensor& heads, const nn::Linear& proj, int top_k) {
  const int64_t NH = heads.size(0), T = heads.size(1), HS = heads.size(2), C = NH * HS;
  // (T, NH, HS): position t's heads side by side, which is also its concatenation.
  const Tensor by_position = kernel::contiguous(kernel::transpose(heads, 0, 1));
  const std::vector<double> hv = kernel::cast(by_position, DType::F64).to_vector<double>();
  const std::vector<double> w =
      kernel::cast(proj.weight, DType::F64).to_vector<double>();  // (C, C), cast once
  // The model's own path for every position in one product: c_proj on the concatenations.
  const std::vector<double> y =
      kernel::cast(proj.forward(kernel::reshape(by_position, {T, C})), DType::F64)
          .to_vector<double>();
  std::vector<double> bias(static_cast<size_t>(C), 0.0);
  if (proj.bias.defined()) bias = kernel::cast(proj.bias, DType::F64).to_vector<double>();

  std::vector<HeadSum> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    HeadSum& s = out[static_cast<size_t>(t)];
    const double* ht = hv.data() + t * C;
    s.sum.assign(static_cast<size_t>(C), 0.0);
    for (int64_t h = 0; h < NH; ++h) {
      HeadChange hc;
      hc.change.assign(static_cast<size_t>(C), 0.0);
      for (int64_t o = 0; o < C; ++o) {
        double acc = 0;
        for (int64_t k = 0; k < HS; ++k)
          acc += w[static_cast<size_t>(o * C + h * HS + k)] * ht[h * HS + k];
        hc.change[static_cast<size_t>(o)] = acc;
        s.sum[static_cast<size_t>(o)] += acc;
        hc.norm += acc * acc;
      }
      hc.norm = std::sqrt(hc.norm);
      std::vector<int64_t> order(static_cast<size_t>(C));
      for (int64_t o = 0; o < C; ++o) order[static_cast<size_t>(o)] = o;
      const int64_t k = std::min<int64_t>(top_k, C);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return std::abs(hc.change[static_cast<size_t>(a)]) >
               std::abs(hc.change[static_cast<size_t>(b)]);
      });
      for (int64_t i = 0; i < k; ++i)
        hc.top.emplace_back(order[static_cast<size_t>(i)],
                            hc.change[static_cast<size_t>(order[static_cast<size_t>(i)])]);
      s.heads.push_back(std::move(hc));
    }
    for (int64_t o = 0; o < C; ++o) {  // c_proj(concat) minus its bias, against the sum
      s.concat_cproj.push_back(y[static_cast<size_t>(t * C + o)] - bias[static_cast<size_t>(o)]);
      s.max_abs_difference = std::max(
          s.max_abs_difference, std::abs(s.concat_cproj.back() - s.sum[static_cast<size_t>(o)]));
    }
  }
  return out;
}

std::string head_sum_text(const HeadSum& s) {
  std::string o = fmt::format(
      "layer {}, position {} ('{}'): what each head adds to the residual stream\n"
      "(value up: c_proj's columns of the head x its weighted sum of values)\n",
      s.layer, s.position, s.token);
  double sum_norm = 0, cat_norm = 0;
  for (size_t i = 0; i < s.sum.size(); ++i)
    sum_norm += s.sum[i] * s.sum[i], cat_norm += s.concat_cproj[i] * s.concat_cproj[i];
  for (size_t h = 0; h < s.heads.size(); ++h) {
    o += fmt::format("  head {:<3} |change| {:10.6f}   top dims:", h, s.heads[h].norm);
    for (const auto& [d, v] : s.heads[h].top) o += fmt::format(" {}:{:+.4f}", d, v);
    o += "\n";
  }
  o += fmt::format("  sum of the heads      |sum| {:10.6f}\n", std::sqrt(sum_norm));
  o += fmt::format("  concat -> c_proj      |out| {:10.6f}  (the model's path, bias left out)\n",
                   std::sqrt(cat_norm));
  o += fmt::format("  largest difference between the two: {:.3g} (rounding: the same map)\n",
                   s.max_abs_difference);
  return o;
}

}  // namespace attend::viz
