#include "viz/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

// About n "nice" ticks (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int n) {
  const double span = hi - lo > 0 ? hi - lo : 1.0;
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

std::string line_plot_svg(const std::vector<Series>& series, const PlotOptions& o) {
  const double ml = 70, mr = 20, mt = 40, mb = 55;
  const double pw = o.width - ml - mr, ph = o.height - mt - mb;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto ty = [&](double y) { return o.log_y ? std::log10(y) : y; };
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (o.log_y && s.y[i] <= 0)) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return ml + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return mt + ph - (ty(y) - y0) / (y1 - y0) * ph; };

  std::string s;
  char b[256];
  std::snprintf(
      b, sizeof b,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      o.width, o.height, o.width, o.height);
  s += b;
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt(o.width / 2.0) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
       xml_escape(o.title) + "</text>\n";
  // Axes and ticks.
  std::snprintf(
      b, sizeof b,
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n", ml,
      mt, pw, ph);
  s += b;
  for (double t : nice_ticks(x0, x1, 8)) {
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n",
                  px(t), mt, px(t), mt + ph, px(t), mt + ph + 16, fmt(t).c_str());
    s += b;
  }
  for (double t : nice_ticks(y0, y1, 6)) {
    const double yv = o.log_y ? std::pow(10.0, t) : t;
    const double yy = mt + ph - (t - y0) / (y1 - y0) * ph;
    std::snprintf(b, sizeof b,
                  "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                  ml, yy, ml + pw, yy, ml - 6, yy + 4, fmt(yv).c_str());
    s += b;
  }
  s += "<text x=\"" + fmt(ml + pw / 2) + "\" y=\"" + fmt(o.height - 12.0) +
       "\" text-anchor=\"middle\">" + xml_escape(o.x_label) + "</text>\n";
  s += "<text transform=\"translate(18," + fmt(mt + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(o.y_label) +
       (o.log_y ? " (log scale)" : "") + "</text>\n";
  // Series.
  for (const Series& ser : series) {
    std::string pts;
    for (size_t i = 0; i < ser.x.size(); ++i) {
      if (!std::isfinite(ser.y[i]) || (o.log_y && ser.y[i] <= 0)) continue;
      std::snprintf(b, sizeof b, "%.1f,%.1f ", px(ser.x[i]), py(ser.y[i]));
      pts += b;
    }
    s += "<polyline fill=\"none\" stroke=\"" + ser.color + "\" stroke-width=\"1.5\" points=\"" +
         pts + "\"/>\n";
    if (ser.markers) {
      for (size_t i = 0; i < ser.x.size(); ++i) {
        if (!std::isfinite(ser.y[i]) || (o.log_y && ser.y[i] <= 0)) continue;
        std::snprintf(b, sizeof b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                      px(ser.x[i]), py(ser.y[i]), ser.color.c_str());
        s += b;
      }
    }
  }
  // Legend.
  for (size_t i = 0; i < series.size(); ++i) {
    const double lx = ml + pw - 150, ly = mt + 14 + 18.0 * i;
    std::snprintf(
        b, sizeof b,
        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"3\"/>", lx, ly,
        lx + 24, ly, series[i].color.c_str());
    s += b;
    s += "<text x=\"" + fmt(lx + 30) + "\" y=\"" + fmt(ly + 4) + "\">" +
         xml_escape(series[i].name) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace attend::viz
