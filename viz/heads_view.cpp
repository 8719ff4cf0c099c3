#include "viz/heads_view.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "viz/plot.h"

namespace attend::viz {

namespace {

std::string table_text(const AblationTable& r, const std::vector<double>& loss, const char* what) {
  std::string o = fmt::format(
      "\nloss increase with each head {} (rows: layers, columns: heads)\n{:8}", what, "");
  for (int64_t h = 0; h < r.n_head; ++h) o += fmt::format(" {:>9}", "head " + std::to_string(h));
  o += "\n";
  for (int64_t l = 0; l < r.n_layer; ++l) {
    o += fmt::format("layer {:<2}", l);
    for (int64_t h = 0; h < r.n_head; ++h)
      o += fmt::format(" {:+9.4f}", loss[static_cast<size_t>(l * r.n_head + h)] - r.base_loss);
    o += "\n";
  }
  return o;
}

}  // namespace

std::string ablation_text(const AblationTable& r) {
  std::string o =
      table_text(r, r.zero, "zeroed") + table_text(r, r.mean, "replaced by its mean output");
  std::vector<size_t> order(r.mean.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return r.mean[x] < r.mean[y]; });
  o += "\ncheapest to remove (mean ablation):";
  for (size_t k = 0; k < std::min<size_t>(order.size(), 8); ++k)
    o += fmt::format(" L{}H{} {:+.4f}", order[k] / static_cast<size_t>(r.n_head),
                     order[k] % static_cast<size_t>(r.n_head), r.mean[order[k]] - r.base_loss);
  return o + "\n";
}

std::string ablation_csv(const AblationTable& r) {
  std::ostringstream o;
  o.precision(9);
  o << "layer,head,zero_loss,mean_loss,zero_increase,mean_increase\n";
  for (int64_t l = 0; l < r.n_layer; ++l)
    for (int64_t h = 0; h < r.n_head; ++h) {
      const size_t i = static_cast<size_t>(l * r.n_head + h);
      o << l << ',' << h << ',' << r.zero[i] << ',' << r.mean[i] << ',' << r.zero[i] - r.base_loss
        << ',' << r.mean[i] - r.base_loss << '\n';
    }
  return o.str();
}

std::string ablation_svg(const AblationTable& r) {
  const int cell = 36, left = 70, top = 50, gap = 50;
  // Wide enough for the panel titles when there are few heads.
  const int panel = std::max(static_cast<int>(r.n_head) * cell, 170);
  const int width = left + 2 * panel + gap + 20,
            height = top + static_cast<int>(r.n_layer) * cell + 30;
  double worst = 1e-12;
  for (size_t i = 0; i < r.zero.size(); ++i)
    worst = std::max({worst, r.zero[i] - r.base_loss, r.mean[i] - r.base_loss});
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' font-family='sans-serif' font-size='12'>\n";
  const std::vector<double>* data[2] = {&r.zero, &r.mean};
  const char* titles[2] = {"head output zeroed", "head output = its mean"};
  for (int p = 0; p < 2; ++p) {
    const int x0 = left + p * (panel + gap);
    o << "<text x='" << x0 << "' y='20' font-weight='bold'>" << titles[p] << "</text>\n";
    for (int64_t h = 0; h < r.n_head; ++h)
      o << "<text x='" << x0 + h * cell + cell / 2 << "' y='" << top - 8
        << "' text-anchor='middle'>h" << h << "</text>\n";
    for (int64_t l = 0; l < r.n_layer; ++l) {
      if (p == 0)
        o << "<text x='" << left - 8 << "' y='" << top + l * cell + cell / 2 + 4
          << "' text-anchor='end'>layer " << l << "</text>\n";
      for (int64_t h = 0; h < r.n_head; ++h) {
        const double d = (*data[p])[static_cast<size_t>(l * r.n_head + h)] - r.base_loss;
        const int shade = 255 - static_cast<int>(std::clamp(d / worst, 0.0, 1.0) * 200);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%+.3f", d);
        o << "<rect x='" << x0 + h * cell << "' y='" << top + l * cell << "' width='" << cell
          << "' height='" << cell << "' fill='rgb(255," << shade << "," << shade
          << ")' stroke='#999'><title>layer " << l << " head " << h << ": loss " << buf
          << "</title></rect>\n";
      }
    }
  }
  o << "<text x='" << left << "' y='" << height - 8 << "'>loss increase over "
    << xml_escape(std::to_string(r.base_loss)) << " (" << r.tokens << " tokens)</text>\n</svg>\n";
  return o.str();
}

std::string ablation_html(const AblationTable& r) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t l = 0; l < r.n_layer; ++l)
    for (int64_t h = 0; h < r.n_head; ++h) {
      const size_t i = static_cast<size_t>(l * r.n_head + h);
      rows.push_back(
          {l, h, r.zero[i], r.mean[i], r.zero[i] - r.base_loss, r.mean[i] - r.base_loss});
    }
  std::string data = rows.dump();
  std::string page = fmt::format(
      R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attend: which heads matter</title>
<style>
body {{ font-family: sans-serif; margin: 20px; color: #222; }}
h1 {{ font-size: 20px; }}
.note {{ font-size: 13px; max-width: 900px; color: #444; }}
table {{ border-collapse: collapse; font-size: 13px; margin-top: 12px; }}
td, th {{ padding: 2px 10px; text-align: right; border-bottom: 1px solid #eee; }}
th {{ cursor: pointer; background: #f3f3f3; }}
th.sorted {{ background: #ffe9a8; }}
</style></head>
<body data-status="loading">
<h1>Which heads matter: the loss with each head ablated</h1>
<div class="note">Base loss {0:.6f} over {1} tokens. Each head's output (its weighted sum of
values, before c_proj) is replaced by zero (the head removed) or by its mean output over the
same batches (the head reduced to a constant), one head at a time; the tables give the loss
and its increase. A head whose removal costs nothing does nothing the model needs on this
data. Choose a column title to sort by it.</div>
{2}
<table id="heads"><thead><tr><th data-k="0">layer</th><th data-k="1">head</th>
<th data-k="2">loss, zeroed</th><th data-k="3">loss, mean</th><th data-k="4">increase, zeroed</th>
<th data-k="5">increase, mean</th></tr></thead><tbody></tbody></table>
<script>
const ROWS = {3};
window.onerror = function (msg) {{ document.body.dataset.status = 'error: ' + msg; }};
(function () {{
  const body = document.querySelector('#heads tbody');
  let key = 5, up = true;
  function draw() {{
    const rows = ROWS.slice().sort((a, b) => (up ? 1 : -1) * (a[key] - b[key]) || a[0] - b[0] || a[1] - b[1]);
    body.innerHTML = rows.map(r => '<tr><td>' + r[0] + '</td><td>' + r[1] + '</td><td>' + r[2].toFixed(5) +
      '</td><td>' + r[3].toFixed(5) + '</td><td>' + (r[4] >= 0 ? '+' : '') + r[4].toFixed(5) + '</td><td>' +
      (r[5] >= 0 ? '+' : '') + r[5].toFixed(5) + '</td></tr>').join('');
    document.querySelectorAll('#heads th').forEach(th => th.classList.toggle('sorted', +th.dataset.k === key));
    document.body.dataset.sort = key + (up ? ' up' : ' down');
  }}
  document.querySelectorAll('#heads th').forEach(th => th.onclick = () => {{
    const k = +th.dataset.k;
    up = k === key ? !up : true;
    key = k;
    draw();
  }});
  draw();
  document.body.dataset.status = 'ok';
}})();
</script>
</body></html>
)",
      r.base_loss, r.tokens, ablation_svg(r), data);
  return page;
}

}  // namespace attend::viz
