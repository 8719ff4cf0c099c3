#include "viz/plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <spdlog/fmt/fmt.h>

namespace attend::viz {

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

namespace {

// About n "nice" ticks (1, 2, 5 x 10^k) covering [lo, hi]. Ticks are k * step for whole k,
// counted, so an axis whose span is a few ulps (where v += step would not move v) still
// ends; at most 4n ticks.
std::vector<double> nice_ticks(double lo, double hi, int n) {
  const double span = hi - lo > 0 ? hi - lo : 1.0;
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  std::vector<double> t;
  const double first = std::ceil(lo / step);
  for (int k = 0; k < 4 * n; ++k) {
    const double v = (first + k) * step;
    if (v > hi + step * 1e-9) break;
    if (!t.empty() && v <= t.back()) continue;  // below the resolution of doubles here
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return t;
}

std::string num(double v) { return fmt::format("{:g}", v); }

struct Frame {  // the plot area and the data ranges mapped onto it
  double ml = 70, mr = 20, mt = 40, mb = 55, pw = 0, ph = 0;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool log_y = false;
  double ty(double y) const { return log_y ? std::log10(y) : y; }
  double px(double x) const { return ml + (x - x0) / (x1 - x0) * pw; }
  double py(double y) const { return mt + ph - (ty(y) - y0) / (y1 - y0) * ph; }
  bool drawn(double x, double y) const {
    return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
  }
};

Frame frame(const std::vector<Series>& series, const PlotOptions& o) {
  Frame f;
  f.log_y = o.log_y;
  f.pw = o.width - f.ml - f.mr, f.ph = o.height - f.mt - f.mb;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!f.drawn(s.x[i], s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, f.ty(s.y[i])), y1 = std::max(y1, f.ty(s.y[i]));
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  f.x0 = x0, f.x1 = x1, f.y0 = y0 - pad, f.y1 = y1 + pad;
  return f;
}

std::string axes(const Frame& f, const PlotOptions& o) {
  std::string s = fmt::format(
      "<rect x=\"{:g}\" y=\"{:g}\" width=\"{:g}\" height=\"{:g}\" fill=\"none\" "
      "stroke=\"#333\"/>\n",
      f.ml, f.mt, f.pw, f.ph);
  for (double t : nice_ticks(f.x0, f.x1, 8))
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:g}\" x2=\"{0:.1f}\" y2=\"{2:g}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:g}\" text-anchor=\"middle\">{4}</text>\n",
        f.px(t), f.mt, f.mt + f.ph, f.mt + f.ph + 16, num(t));
  std::vector<double> yt = nice_ticks(f.y0, f.y1, 6);
  if (f.log_y) {  // 1-2-5 x 10^k, readable, where at least two fall in the range
    std::vector<double> ok;
    for (int k = static_cast<int>(std::floor(f.y0)); k <= static_cast<int>(std::ceil(f.y1)); ++k)
      for (double m : {1.0, 2.0, 5.0}) {
        const double t = std::log10(m) + k;
        if (t >= f.y0 && t <= f.y1) ok.push_back(t);
      }
    if (ok.size() >= 2 && ok.size() <= 24) yt = ok;
  }
  for (double t : yt) {
    const double yy = f.mt + f.ph - (t - f.y0) / (f.y1 - f.y0) * f.ph;
    s += fmt::format(
        "<line x1=\"{0:g}\" y1=\"{1:.1f}\" x2=\"{2:g}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3:g}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        f.ml, yy, f.ml + f.pw, f.ml - 6, yy + 4, num(f.log_y ? std::pow(10.0, t) : t));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                   num(f.ml + f.pw / 2), num(o.height - 12.0), xml_escape(o.x_label));
  s += fmt::format(
      "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">{}{}</text>\n",
      num(f.mt + f.ph / 2), xml_escape(o.y_label), o.log_y ? " (log scale)" : "");
  return s;
}

std::string lines(const Frame& f, const std::vector<Series>& series) {
  std::string s;
  for (const Series& ser : series) {
    std::string pts, dots;
    for (size_t i = 0; i < ser.x.size() && i < ser.y.size(); ++i) {
      if (!f.drawn(ser.x[i], ser.y[i])) continue;
      pts += fmt::format("{:.1f},{:.1f} ", f.px(ser.x[i]), f.py(ser.y[i]));
      if (ser.markers)
        dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                            f.px(ser.x[i]), f.py(ser.y[i]), ser.color);
    }
    if (ser.line)
      s += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", ser.color,
          pts);
    s += dots;
  }
  for (size_t i = 0; i < series.size(); ++i) {  // the legend
    const double lx = f.ml + f.pw - 150, ly = f.mt + 14 + 18.0 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{:g}\" y1=\"{:g}\" x2=\"{:g}\" y2=\"{:g}\" stroke=\"{}\" stroke-width=\"3\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        lx, ly, lx + 24, ly, series[i].color, num(lx + 30), num(ly + 4),
        xml_escape(series[i].name));
  }
  return s;
}

}  // namespace

std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& o) {
  const Frame f = frame(series, o);
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      o.width, o.height);
  s += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                   num(o.width / 2.0), xml_escape(o.title));
  return s + axes(f, o) + lines(f, series) + "</svg>\n";
}

std::string stacked_svg(const std::vector<std::string>& panels, const std::vector<int>& heights,
                        int width) {
  int total = 0;
  for (int h : heights) total += h;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\">\n",
      width, total);
  int y = 0;
  for (size_t i = 0; i < panels.size(); ++i) {
    // Each panel is a whole <svg>; nested, it is placed by x and y.
    std::string p = panels[i];
    p.replace(0, 4, fmt::format("<svg x=\"0\" y=\"{}\"", y));
    s += p;
    y += heights[i];
  }
  return s + "</svg>\n";
}

}  // namespace attend::viz
