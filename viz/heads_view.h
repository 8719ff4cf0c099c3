// The tables of `attend heads` (viz/head_ablation.h computes them): the loss with each attention
// head ablated, zeroed and mean-replaced, laid out as text, CSV and two SVG heatmaps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

struct AblationTable {
  int64_t n_layer = 0, n_head = 0, tokens = 0;
  double base_loss = 0;
  std::vector<double> zero, mean;  // [layer * n_head + head]
};

// Both layer x head tables of loss increases and the heads cheapest to remove (mean).
std::string ablation_text(const AblationTable& t);
std::string ablation_csv(const AblationTable& t);
// Two heatmaps side by side (zero, mean): white = no change, red = the loss rises.
std::string ablation_svg(const AblationTable& t);
// One self-contained page: both heatmaps, and a table of every head (layer, head, loss
// zeroed, loss mean-replaced, both increases) sorted by a column the reader chooses
// (initially the mean increase, cheapest first). No network.
std::string ablation_html(const AblationTable& t);

}  // namespace attend::viz
#pragma GCC visibility pop
