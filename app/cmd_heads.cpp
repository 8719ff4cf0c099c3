// `attend heads`: which attention heads matter. The validation loss with each head
// ablated (zeroed, and replaced by its mean output), as a layer x head table on stdout,
// the heads whose removal costs least, and optionally a CSV and an SVG heatmap.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <sstream>

#include "app/commands.h"
#include "tensor/util.h"
#include "train/heads.h"
#include "train/model_io.h"
#include "viz/plot.h"

namespace attend::cli {

namespace {

struct HeadsArgs {
  std::string checkpoint, data, csv, svg;
  int64_t batches = 20, batch_size = 8;
};

void print_table(const train::HeadAblation& r, const std::vector<double>& loss, const char* what) {
  std::printf("\nloss increase with each head %s (rows: layers, columns: heads)\n", what);
  std::printf("%8s", "");
  for (int64_t h = 0; h < r.n_head; ++h) std::printf(" %9s", ("head " + std::to_string(h)).c_str());
  std::printf("\n");
  for (int64_t l = 0; l < r.n_layer; ++l) {
    std::printf("layer %-2lld", static_cast<long long>(l));
    for (int64_t h = 0; h < r.n_head; ++h)
      std::printf(" %+9.4f", loss[static_cast<size_t>(l * r.n_head + h)] - r.base_loss);
    std::printf("\n");
  }
}

std::string csv_text(const train::HeadAblation& r) {
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

// Two heatmaps side by side (zero, mean): white = no change, red = the loss rises.
std::string svg_text(const train::HeadAblation& r) {
  const int cell = 36, left = 70, top = 50, gap = 50;
  const int panel = static_cast<int>(r.n_head) * cell;
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
    << viz::xml_escape(std::to_string(r.base_loss)) << " (" << r.tokens
    << " tokens)</text>\n</svg>\n";
  return o.str();
}

int run_heads(const HeadsArgs& a) {
  train::LoadedModel m = train::load_model(a.checkpoint);
  train::check_made_by(data::TokenFile(a.data), m.tokenizer->spec());
  const data::TokenDataset ds(a.data, m.model->config.block_size);
  const train::HeadAblation r = train::ablate_heads(*m.model, ds, a.batches, a.batch_size);
  std::printf("base loss %.6f over %lld batches of %lld x %lld tokens\n", r.base_loss,
              static_cast<long long>(r.batches), static_cast<long long>(a.batch_size),
              static_cast<long long>(m.model->config.block_size));
  print_table(r, r.zero, "zeroed");
  print_table(r, r.mean, "replaced by its mean output");
  std::vector<size_t> order(r.zero.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return r.mean[x] < r.mean[y]; });
  std::printf("\ncheapest to remove (mean ablation):");
  for (size_t k = 0; k < std::min<size_t>(order.size(), 8); ++k)
    std::printf(" L%lldH%lld %+.4f", static_cast<long long>(order[k] / r.n_head),
                static_cast<long long>(order[k] % r.n_head), r.mean[order[k]] - r.base_loss);
  std::printf("\n");
  if (!a.csv.empty()) write_file_atomic(a.csv, csv_text(r));
  if (!a.svg.empty()) write_file_atomic(a.svg, svg_text(r));
  return 0;
}

}  // namespace

void add_heads(CLI::App& app, int& rc) {
  auto a = std::make_shared<HeadsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "heads", "which attention heads matter: the loss with each head ablated (zero and mean)");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  cmd->add_option("--data", a->data, "a token file (.bin), e.g. the run's data/val.bin")
      ->required();
  cmd->add_option("--batches", a->batches, "random batches scored per head")->default_str("20");
  cmd->add_option("--batch_size,--batch-size", a->batch_size, "sequences per batch")
      ->default_str("8");
  cmd->add_option("--csv", a->csv, "also write the table as CSV");
  cmd->add_option("--svg", a->svg, "also write the table as two heatmaps (SVG)");
  cmd->callback([a, &rc] { rc = run_heads(*a); });
}

}  // namespace attend::cli
