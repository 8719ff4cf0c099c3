// The self-contained HTML view of the attention explorer: the page viz/attention.html
// (embedded at build time by CMake, see viz/CMakeLists.txt) with the JSON payload of
// attention_payload in place of __DATA__. No network. See explorer.h for the conventions.
#include "viz/explorer.h"

namespace attend::viz {

namespace {
const char* kPage =
#include "attention_html.inc"
    ;
}  // namespace

std::string attention_html(const AttentionMap& m, const AttentionSelection& sel,
                           const std::string& diagram_svg) {
  AttentionSelection all = sel;
  all.scores = true;   // the page explains each weight from its score
  all.vectors = true;  // and each score from its q and k (the neuron view)
  std::string data = attention_payload(m, all).dump();
  // Keep "</script>" out of the embedded data.
  for (size_t p = 0; (p = data.find("</", p)) != std::string::npos; p += 3)
    data.replace(p, 2, "<\\/");
  std::string page = kPage;
  page.replace(page.find("__DIAGRAM__"), 11,
               diagram_svg.empty()
                   ? std::string()
                   : "<h2 id=\"diagram\" style=\"font-size:15px\">The whole model in one "
                     "figure</h2>\n" +
                         diagram_svg);
  page.replace(page.find("__DATA__"), 8, data);
  return page;
}

}  // namespace attend::viz
