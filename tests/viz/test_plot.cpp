// SVG line plots (viz/plot.h): well-formed XML with labelled axes and a legend, log-y
// ticks, and degenerate value ranges.
#include <string>
#include <vector>

#include "test_util.h"
#include "viz/plot.h"
#include "xml_check.h"

using namespace attend;
using namespace attend::viz;
using attend::test::xml_problem;

TEST_CASE("loss plots are well-formed SVG with labelled axes and a legend") {
  Series train{"train loss (per step)", "#1f77b4", {1, 2, 3, 4}, {4.2, 3.1, 2.5, 2.2}, false};
  Series val{"val loss (evaluation)", "#d62728", {0, 4}, {4.2, 2.4}, true};
  for (bool log_y : {false, true}) {
    const std::string svg =
        line_plot_svg({train, val}, {"attend: loss", "step", "cross-entropy loss (nats)", log_y});
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find(">step<") != std::string::npos);
    CHECK(svg.find("cross-entropy loss (nats)") != std::string::npos);
    CHECK(svg.find(">train loss (per step)<") != std::string::npos);
    CHECK(svg.find(">val loss (evaluation)<") != std::string::npos);
    CHECK((svg.find("(log scale)") != std::string::npos) == log_y);
  }
}

TEST_CASE("log-y ticks are 1, 2, 5 times powers of ten, and panels stack") {
  Series s{"loss", "#000", {0, 1, 2, 3}, {4.2, 2.0, 0.9, 0.3}, true, false};
  const std::string svg = line_plot_svg({s}, {"t", "step", "loss", true});
  CHECK(xml_problem(svg) == "");
  for (const std::string tick : {">0.5<", ">1<", ">2<"}) {
    INFO(tick);
    CHECK(svg.find(tick) != std::string::npos);
  }
  CHECK(svg.find("polyline") == std::string::npos);  // points only: line = false
  const std::string both = stacked_svg({svg, svg}, {420, 420}, 720);
  CHECK(xml_problem(both) == "");
  CHECK(both.find("<svg x=\"0\" y=\"420\"") != std::string::npos);
}

TEST_CASE("a loss plot whose values differ by an ulp ends, with a few ticks") {
  // Regression (adversarial M5): the tick loop never ended when step < half an ulp of v.
  Series a{"a", "#000", {0, 1}, {1.0, std::nextafter(1.0, 2.0)}, false};
  Series b{"b", "#000", {1e17, 1e17 + 16}, {2.0, 3.0}, false};
  for (const Series& s : {a, b}) {
    const std::string svg = line_plot_svg({s}, {"t", "step", "loss", false});
    CHECK(xml_problem(svg) == "");
    CHECK(svg.size() < 20000);
  }
}
