// A small SVG writer for line plots: axes with ticks, axis labels, a title and a legend.
// Used for loss.svg; readable in any browser.
#pragma once

#include <string>
#include <vector>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::viz {

struct Series {
  std::string name;
  std::string color;  // CSS colour
  std::vector<double> x, y;
  bool markers = false;  // draw each point
  bool line = true;      // join the points
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_y = false;
  int width = 720, height = 420;
};

// log_y: ticks at 1, 2 and 5 times powers of ten when the range holds two or more.
std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& options);

// Several SVGs (of the given heights) one above the other in one SVG of that width.
std::string stacked_svg(const std::vector<std::string>& panels, const std::vector<int>& heights,
                        int width);

// Escapes &, <, >, " for XML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace attend::viz
#pragma GCC visibility pop
