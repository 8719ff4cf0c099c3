// The self-contained HTML view of the attention explorer: data and script embedded, no
// network. See explorer.h for the conventions every view keeps.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "viz/explorer.h"

namespace attend::viz {

namespace {

const char* kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attend: attention weights</title>
<style>
body { font-family: sans-serif; margin: 20px; color: #222; }
h1 { font-size: 20px; margin: 0 0 6px 0; }
.note { font-size: 13px; max-width: 980px; color: #444; }
#controls { margin: 12px 0; }
#grid { display: grid; gap: 6px; margin: 10px 0 18px 0; }
#grid figure { margin: 0; text-align: center; font-size: 11px; cursor: pointer; }
#grid canvas { border: 1px solid #bbb; image-rendering: pixelated; }
#grid figure.sel canvas { border: 2px solid #d62728; }
table.heat { border-collapse: collapse; font-size: 11px; }
table.heat td.w { width: 34px; height: 24px; text-align: center; border: 1px solid #fff; cursor: pointer; }
table.heat td.masked { background: repeating-linear-gradient(45deg, #d9d9d9, #d9d9d9 4px, #a6a6a6 4px, #a6a6a6 6px); }
table.heat th { font-weight: normal; white-space: nowrap; padding: 0 4px; }
table.heat th.key { height: 70px; vertical-align: bottom; }
table.heat th.key div { transform: rotate(-60deg); transform-origin: left bottom; width: 24px; }
table.heat th.query { text-align: right; cursor: pointer; }
table.heat th.query:hover { background: #ffe9a8; }
td.lit { outline: 2px solid #ff7f0e; outline-offset: -2px; }
td.picked { outline: 3px solid #d62728; outline-offset: -3px; }
#side { display: inline-block; vertical-align: top; margin-left: 24px; max-width: 420px; font-size: 13px; }
#chain table td { padding: 2px 6px; }
.axis { font-size: 12px; color: #555; }
#bar { width: 260px; height: 14px; border: 1px solid #333; }
</style></head>
<body data-status="loading">
<h1>Attention weights</h1>
<div class="note" id="model"></div>
<div class="note" id="caption"></div>
<div id="controls">layer <select id="layer"></select> head <select id="head"></select>
 &nbsp; colour: 0 <canvas id="bar" width="260" height="14"></canvas> 1 &nbsp;
 <span style="display:inline-block;width:18px;height:14px;vertical-align:middle;background:repeating-linear-gradient(45deg,#d9d9d9,#d9d9d9 4px,#a6a6a6 4px,#a6a6a6 6px)"></span> masked (future, weight 0)</div>
<h2 style="font-size:15px">Model view: every layer (rows) and head (columns); choose one to open it below</h2>
<div id="grid"></div>
<h2 style="font-size:15px" id="bigtitle"></h2>
<div class="axis">rows: query position i &nbsp; | &nbsp; columns: key position j &nbsp; | &nbsp; hover a query token to light up the keys it attends to; choose a cell to see how its weight came to be</div>
<div style="white-space:nowrap">
<div style="display:inline-block;vertical-align:top"><div class="axis" style="text-align:center">key position j (column)</div>
<div style="display:flex;align-items:center"><div class="axis" style="writing-mode:vertical-rl;transform:rotate(180deg)">query position i (row)</div>
<table class="heat" id="heat"></table></div></div>
<div id="side"><div id="hover"></div><div id="chain"></div></div>
</div>
<script>
const DATA = __DATA__;
window.onerror = function (msg) { document.body.dataset.status = 'error: ' + msg; };
(function () {
  const T = DATA.tokens.length, L = DATA.layers.length;
  const heads = DATA.layers[0].heads.length;
  function colour(w) {
    w = Math.max(0, Math.min(1, w));
    return 'rgb(' + Math.round(255 - w * 247) + ',' + Math.round(255 - w * 207) + ',' + Math.round(255 - w * 148) + ')';
  }
  function masked(i, j) { return DATA.causal && j > i; }
  function fixed(units) {
    const s = DATA.scale, whole = Math.floor(units / s), frac = String(units % s).padStart(DATA.decimals, '0');
    return whole + '.' + frac;
  }
  function esc(s) { return s.replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c])); }
  document.getElementById('model').textContent = DATA.model + ' | prompt: ' + DATA.tokens.length + ' tokens';
  document.getElementById('caption').textContent = DATA.caption;
  const bar = document.getElementById('bar').getContext('2d');
  for (let x = 0; x < 260; ++x) { bar.fillStyle = colour(x / 259); bar.fillRect(x, 0, 1, 14); }
  const ls = document.getElementById('layer'), hs = document.getElementById('head');
  DATA.layers.forEach((l, k) => ls.add(new Option(String(l.layer), k)));
  DATA.layers[0].heads.forEach((h, k) => hs.add(new Option(String(h.head), k)));
  let cur = {l: 0, h: 0};
  // Model view.
  const grid = document.getElementById('grid');
  grid.style.gridTemplateColumns = 'repeat(' + heads + ', max-content)';
  const figs = [];
  DATA.layers.forEach((layer, li) => layer.heads.forEach((head, hi) => {
    const fig = document.createElement('figure'), c = document.createElement('canvas');
    const px = Math.max(1, Math.floor(96 / T));
    c.width = c.height = px * T;
    const g = c.getContext('2d');
    for (let i = 0; i < T; ++i) for (let j = 0; j < T; ++j) {
      g.fillStyle = masked(i, j) ? '#bdbdbd' : colour(head.weights[i][j]);
      g.fillRect(j * px, i * px, px, px);
    }
    fig.appendChild(c);
    const cap = document.createElement('figcaption');
    cap.textContent = 'L' + layer.layer + ' H' + head.head;
    fig.appendChild(cap);
    fig.onclick = () => select(li, hi);
    grid.appendChild(fig);
    figs.push({fig, li, hi});
  }));
  const heat = document.getElementById('heat');
  function draw() {
    const head = DATA.layers[cur.l].heads[cur.h];
    document.getElementById('bigtitle').textContent = 'layer ' + DATA.layers[cur.l].layer + ', head ' + head.head;
    figs.forEach(f => f.fig.classList.toggle('sel', f.li === cur.l && f.hi === cur.h));
    let html = '<tr><th></th>';
    for (let j = 0; j < T; ++j) html += '<th class="key"><div>' + j + ' ' + esc(DATA.tokens[j]) + '</div></th>';
    html += '</tr>';
    for (let i = 0; i < T; ++i) {
      html += '<tr><th class="query" data-i="' + i + '">' + esc(DATA.tokens[i]) + ' ' + i + '</th>';
      for (let j = 0; j < T; ++j) {
        const w = head.weights[i][j];
        if (masked(i, j)) html += '<td class="w masked" data-i="' + i + '" data-j="' + j + '"></td>';
        else html += '<td class="w" data-i="' + i + '" data-j="' + j + '" style="background:' + colour(w) +
                     ';color:' + (w > 0.55 ? '#fff' : '#000') + '">' + fixed(head.shown[i][j]) + '</td>';
      }
      html += '</tr>';
    }
    heat.innerHTML = html;
    heat.querySelectorAll('th.query').forEach(th => {
      th.onmouseenter = () => light(+th.dataset.i);
      th.onmouseleave = () => light(-1);
    });
    heat.querySelectorAll('td.w').forEach(td => td.onclick = () => chain(+td.dataset.i, +td.dataset.j));
    document.getElementById('chain').innerHTML = '';
  }
  function light(i) {
    const head = DATA.layers[cur.l].heads[cur.h];
    heat.querySelectorAll('td.lit').forEach(td => td.classList.remove('lit'));
    const box = document.getElementById('hover');
    if (i < 0) { box.innerHTML = ''; return; }
    let list = [];
    for (let j = 0; j < T; ++j) {
      if (head.weights[i][j] > 0) {
        heat.querySelector('td[data-i="' + i + '"][data-j="' + j + '"]').classList.add('lit');
        list.push([head.weights[i][j], j]);
      }
    }
    list.sort((a, b) => b[0] - a[0]);
    box.innerHTML = '<b>query ' + i + ' "' + esc(DATA.tokens[i]) + '" attends to</b><br>' +
      list.slice(0, 12).map(([w, j]) => 'key ' + j + ' "' + esc(DATA.tokens[j]) + '": ' + w.toFixed(4)).join('<br>') +
      (list.length > 12 ? '<br>... ' + (list.length - 12) + ' more' : '');
  }
  function chain(i, j) {
    const head = DATA.layers[cur.l].heads[cur.h];
    heat.querySelectorAll('td.picked').forEach(td => td.classList.remove('picked'));
    heat.querySelector('td[data-i="' + i + '"][data-j="' + j + '"]').classList.add('picked');
    const root = Math.sqrt(DATA.head_size);
    const s = head.scores[i].map(v => v / root);
    let m = -Infinity;
    for (let k = 0; k < T; ++k) if (!masked(i, k)) m = Math.max(m, s[k]);
    let z = 0;
    for (let k = 0; k < T; ++k) if (!masked(i, k)) z += Math.exp(s[k] - m);
    const mk = masked(i, j), w = mk ? 0 : Math.exp(s[j] - m) / z;
    const rows = [
      ['query i', i + ' "' + esc(DATA.tokens[i]) + '"'], ['key j', j + ' "' + esc(DATA.tokens[j]) + '"'],
      ['score q<sub>i</sub> &middot; k<sub>j</sub>', head.scores[i][j].toFixed(5)],
      ['divided by &radic;HS = &radic;' + DATA.head_size + ' = ' + root.toFixed(4), s[j].toFixed(5)],
      ['mask', mk ? 'j &gt; i: the future, set to &minus;&infin;' : 'j &le; i: kept'],
      ['row max m over kept keys', m.toFixed(5)],
      ['Z = &sum;<sub>k</sub> exp(s<sub>ik</sub> &minus; m)', z.toFixed(5)],
      ['softmax exp(s<sub>ij</sub> &minus; m) / Z', mk ? '0 (exp(&minus;&infin;) = 0)' : w.toFixed(6)],
      ['weight stored by the model', head.weights[i][j].toFixed(6)],
      ['shown in the cell', mk ? '(masked)' : fixed(head.shown[i][j])]];
    document.getElementById('chain').innerHTML = '<b>How weight (' + i + ', ' + j + ') came to be</b><table>' +
      rows.map(r => '<tr><td>' + r[0] + '</td><td>' + r[1] + '</td></tr>').join('') + '</table>';
  }
  function select(li, hi) { cur = {l: li, h: hi}; ls.value = li; hs.value = hi; draw(); }
  ls.onchange = () => select(+ls.value, cur.h);
  hs.onchange = () => select(cur.l, +hs.value);
  select(0, 0);
  chain(T - 1, 0);
  document.body.dataset.status = 'ok';
})();
</script>
</body></html>
)HTML";

}  // namespace

std::string attention_html(const AttentionMap& m, const AttentionSelection& sel) {
  nlohmann::ordered_json d;
  d["model"] = m.model;
  char cap[700];
  std::snprintf(cap, sizeof cap,
                "Rows are query positions i, columns are key positions j. Each row is a softmax "
                "over the keys, so each "
                "row of true weights sums to 1; masked (future) cells are exactly 0 and drawn "
                "hatched grey. Numbers are "
                "the weights rounded to %d decimals by largest-remainder rounding, so each row's "
                "shown numbers add up to "
                "exactly 1. Colour encodes the true weight.",
                sel.decimals);
  d["caption"] = cap;
  d["causal"] = m.causal;
  d["tokens"] = m.tokens;
  d["head_size"] = m.head_size;
  d["decimals"] = sel.decimals;
  d["scale"] = static_cast<int64_t>(std::llround(std::pow(10.0, sel.decimals)));
  const int64_t T = m.T();
  std::vector<int64_t> layers = sel.layers, heads = sel.heads;
  if (layers.empty())
    for (int64_t l = 0; l < m.n_layer; ++l) layers.push_back(l);
  if (heads.empty())
    for (int64_t h = 0; h < m.n_head; ++h) heads.push_back(h);
  nlohmann::json lj = nlohmann::json::array();
  for (int64_t l : layers) {
    ATTEND_CHECK(l >= 0 && l < m.n_layer, "attention: --layer ", l, " is out of range [0, ",
                 m.n_layer, ")");
    nlohmann::json hj = nlohmann::json::array();
    for (int64_t h : heads) {
      ATTEND_CHECK(h >= 0 && h < m.n_head, "attention: --head ", h, " is out of range [0, ",
                   m.n_head, ")");
      nlohmann::json w = nlohmann::json::array(), s = nlohmann::json::array(),
                     shown = nlohmann::json::array();
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> row(m.weights[l][h].begin() + i * T,
                                m.weights[l][h].begin() + (i + 1) * T);
        std::vector<double> srow(m.scores[l][h].begin() + i * T,
                                 m.scores[l][h].begin() + (i + 1) * T);
        w.push_back(row);
        s.push_back(srow);
        shown.push_back(round_row(row, sel.decimals));
      }
      hj.push_back({{"head", h}, {"weights", w}, {"scores", s}, {"shown", shown}});
    }
    lj.push_back({{"layer", l}, {"heads", hj}});
  }
  d["layers"] = lj;
  std::string page = kPage;
  std::string data = d.dump();
  // Keep "</script>" out of the embedded data.
  for (size_t p = 0; (p = data.find("</", p)) != std::string::npos; p += 3)
    data.replace(p, 2, "<\\/");
  page.replace(page.find("__DATA__"), 8, data);
  return page;
}

}  // namespace attend::viz
