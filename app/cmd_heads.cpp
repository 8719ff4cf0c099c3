// `attend heads`: which attention heads matter. The validation loss with each head
// ablated (zeroed, and replaced by its mean output), as a layer x head table on stdout,
// the heads whose removal costs least, and optionally a CSV and an SVG heatmap.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/util.h"
#include "viz/head_ablation.h"
#include "train/model_io.h"
#include "viz/heads_view.h"

namespace attend::cli {

namespace {

struct HeadsArgs {
  std::string checkpoint, data, csv, svg, html;
  int64_t batches = 20, batch_size = 8;
};

int run_heads(const HeadsArgs& a) {
  train::LoadedModel m = train::load_model_merged(a.checkpoint);
  train::check_made_by(data::TokenFile(a.data), m.tokenizer->spec());
  const data::TokenDataset ds(a.data, m.model->config.block_size);
  const viz::HeadAblation r = viz::ablate_heads(*m.model, ds, a.batches, a.batch_size);
  std::printf("base loss %.6f over %lld batches of %lld x %lld tokens\n", r.base_loss,
              static_cast<long long>(r.batches), static_cast<long long>(a.batch_size),
              static_cast<long long>(m.model->config.block_size));
  const viz::AblationTable t{r.n_layer, r.n_head, r.tokens, r.base_loss, r.zero, r.mean};
  std::fputs(viz::ablation_text(t).c_str(), stdout);
  if (!a.csv.empty()) write_file_atomic(a.csv, viz::ablation_csv(t));
  if (!a.svg.empty()) write_file_atomic(a.svg, viz::ablation_svg(t));
  if (!a.html.empty()) write_file_atomic(a.html, viz::ablation_html(t));
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
  cmd->add_option("--html", a->html,
                  "also write one page: both heatmaps and a table of every head, sortable");
  cmd->callback([a, &rc] { rc = run_heads(*a); });
}

}  // namespace attend::cli
