// Which heads matter: the loss with each attention head ablated, two ways.
//   zero  the head's output (its weighted sum of values, before c_proj) replaced by 0
//   mean  replaced by its mean output over the same data (the head reduced to a constant,
//         which keeps the activation's average; "mean ablation")
// Both over the same `batches` random batches of a token file (Stream::EvalVal, seed 0,
// so every row of the table sees the same tokens), in eval mode and no-grad.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

struct HeadAblation {
  int64_t n_layer = 0, n_head = 0, batches = 0, tokens = 0;
  double base_loss = 0;            // nothing ablated
  std::vector<double> zero, mean;  // [layer * n_head + head]: the loss with it ablated
};

HeadAblation ablate_heads(nn::GPT& model, const data::TokenDataset& data, int64_t batches,
                          int64_t batch_size);

}  // namespace attend::viz
#pragma GCC visibility pop
