// A small SVG writer for line plots: axes with ticks, axis labels, a title and a legend.
// Used for loss.svg; readable in any browser.
#pragma once

#include <string>
#include <vector>

namespace attend::viz {

struct Series {
  std::string name;
  std::string color;  // CSS colour
  std::vector<double> x, y;
  bool markers = false;  // draw points as well as the line
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_y = false;
  int width = 720, height = 420;
};

std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& options);

// Escapes &, <, >, " for XML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace attend::viz
