// The whole model in one figure: the embeddings, one transformer block with multi-head
// attention drawn step by step (LayerNorm, the q/k/v split, which query heads share which
// key/value head, scores, the causal mask, softmax, weights x values, concat and c_proj,
// the residual adds, the MLP), the final LayerNorm and the tied LM head, each box with this
// model's shapes (B and T symbolic, the rest numbers) and parameter count.
#pragma once

#include <string>

#include "nn/gpt.h"

namespace attend::viz {

std::string model_diagram_svg(const nn::GPTConfig& config, const std::string& title);
std::string model_diagram_html(const nn::GPTConfig& config, const std::string& title);

}  // namespace attend::viz
