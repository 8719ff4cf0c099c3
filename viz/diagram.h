// The whole model in one figure: the embeddings, one transformer block with multi-head
// attention drawn step by step (LayerNorm or RMSNorm, the q/k/v split, RoPE for a Llama,
// which query heads share which key/value head, scores, the causal mask and a sliding
// window, softmax, weights x values, concat and c_proj, the residual adds, the MLP with
// GELU or SwiGLU), the final norm and the LM head, each box with this model's shapes (B and
// T symbolic, the rest numbers) and parameter count.
#pragma once

#include <string>

#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

// A prompt's activations in the boxes: shape, mean and standard deviation of each box's
// output (the block's boxes at one layer; the causal mask's over the kept scores only).
struct BoxActivation {
  bool present = false;
  std::string shape;
  double mean = 0, std = 0;
};
struct DiagramActivations {
  std::string prompt;
  int64_t tokens = 0, layer = 0;
  std::vector<BoxActivation> boxes;  // one per box, in drawing order
  std::vector<std::string> taps;     // the model's stage each box shows (nn::Taps), "" none
  std::vector<double> logits;        // the model's own forward (1, T, V), for checking
  std::vector<double> final_logits;  // the boxes' last stage, the same numbers
};

// One forward of the model on the token ids with taps (nn::Taps): each box's activation is
// the model's own stage of that name. Throws naming --layer out of range.
DiagramActivations diagram_activations(const nn::GPT& model, const std::vector<int32_t>& ids,
                                       int64_t layer, const std::string& prompt);

std::string model_diagram_svg(const nn::GPTConfig& config, const std::string& title,
                              const DiagramActivations* activations = nullptr);
std::string model_diagram_html(const nn::GPTConfig& config, const std::string& title,
                               const DiagramActivations* activations = nullptr);

}  // namespace attend::viz
#pragma GCC visibility pop
