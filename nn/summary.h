// A model summary from its config alone, allocating nothing (so gpt3-175b works): a
// torchinfo-style table of modules with output shapes and parameters, the parameter
// breakdown by component, memory for training at a batch size and sequence length, and
// training FLOPs per token.
#pragma once

#include <string>
#include <vector>

#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

struct SummaryRow {
  std::string name, type;
  Shape output;
  int64_t params = 0;  // owned by this module and its children (a tied tensor: 0 here)
  int depth = 0;
  std::string note;
};

struct ModelSummary {
  GPTConfig config;
  int64_t batch = 1, seq = 0;
  std::vector<SummaryRow> rows;
  ParameterCount counts;
  // Bytes, f32.
  int64_t weight_bytes = 0, grad_bytes = 0, adamw_bytes = 0, activation_bytes = 0;
  double flops_per_token = 0;  // training: forward and backward
  int64_t flops_n = 0;         // N in the formula
  int64_t kv_cache_bytes_per_token = 0, kv_cache_bytes_per_token_mha = 0;
};

ModelSummary summarize(const GPTConfig& config, int64_t batch, int64_t seq);
// The text layout of a summary is viz::format_summary (viz/summary_text.h).

}  // namespace attend::nn
#pragma GCC visibility pop
