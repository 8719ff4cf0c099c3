// The heads page (viz/heads_view): the ablation heatmaps and the table of every head.
#include <filesystem>
#include <fstream>

#include "browser.h"
#include "fixture.h"
#include "test_util.h"
#include "viz/head_ablation.h"
#include "viz/heads_view.h"
#include "xml_check.h"

using namespace attend;
using namespace attend::viz;
using attend::test::Browser;
using attend::test::Fixture;
using attend::test::xml_problem;
namespace fs = std::filesystem;

TEST_CASE("the heads page: both heatmaps and every head in a table sorted by its cost") {
  AblationTable t{
      2, 3, 1024, 2.0, {2.5, 2.0, 2.1, 2.9, 2.05, 2.2}, {2.3, 2.0, 2.02, 2.6, 2.01, 2.1}};
  const std::string html = ablation_html(t);
  CHECK(xml_problem(ablation_svg(t)) == "");
  CHECK(html.find("<script src") == std::string::npos);
  const fs::path page = fs::path(ATTEND_BUILD_DIR) / "heads_test.html";
  std::ofstream(page) << html;
  REQUIRE_BROWSER(b);
  const std::string dom = b.dom(page);
  CHECK(dom.find("data-status=\"ok\"") != std::string::npos);
  CHECK(dom.find("data-sort=\"5 up\"") != std::string::npos);
  // Cheapest first by the mean increase: L0H1 (+0), L1H1 (+0.01), L0H2 (+0.02), ...
  const size_t a = dom.find("<tr><td>0</td><td>1</td>"), c = dom.find("<tr><td>1</td><td>1</td>"),
               d = dom.find("<tr><td>0</td><td>2</td>"), e = dom.find("<tr><td>1</td><td>0</td>");
  REQUIRE(a != std::string::npos);
  REQUIRE(e != std::string::npos);
  CHECK(a < c);
  CHECK(c < d);
  CHECK(d < e);
  CHECK(dom.find("head output = its mean") != std::string::npos);
  b.screenshot(page, fs::path(ATTEND_BUILD_DIR) / "heads_test.png", "1000,700");
}

