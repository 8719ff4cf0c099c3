// `attend attention`: the attention weights of a prompt as an HTML explorer, SVG
// heatmaps, CSV or JSON (viz/explorer.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "train/model_io.h"
#include "viz/explorer.h"
#include "viz/head_sum.h"

namespace attend::cli {

namespace {

struct AttentionArgs {
  std::string checkpoint, prompt, out;
  int64_t layer = -1, head = -1;  // -1: all
  int64_t position = -1;          // --position: what each head adds there (needs --layer)
  int decimals = 2;
  std::string convention = "row";
  bool scores = false;
};

// --position: each head's change to the residual stream, their sum, and concat -> c_proj.
int run_head_sum(const AttentionArgs& a) {
  ATTEND_CHECK(a.layer >= 0, "attention: --position needs --layer (the layer to look at)");
  train::LoadedModel m = train::load_model(a.checkpoint);
  std::fputs(
      viz::head_sum_text(viz::head_sum(*m.model, *m.tokenizer, a.prompt, a.layer, a.position))
          .c_str(),
      stdout);
  return 0;
}

int run_attention(const AttentionArgs& a) {
  if (a.position >= 0 && a.out.empty()) return run_head_sum(a);
  ATTEND_CHECK(!a.out.empty(), "attention: --out is required (or --position with --layer)");
  if (a.position >= 0) run_head_sum(a);
  const std::string ext = std::filesystem::path(a.out).extension().string();
  ATTEND_CHECK(ext == ".html" || ext == ".svg" || ext == ".csv" || ext == ".json",
               "attention: --out ", a.out, ": expected a .html, .svg, .csv or .json file name");
  ATTEND_CHECK(a.decimals >= 1 && a.decimals <= 6, "attention: --decimals must be in [1, 6], got ",
               a.decimals);
  train::LoadedModel m = train::load_model(a.checkpoint);
  viz::AttentionMap map = viz::compute_attention(*m.model, *m.tokenizer, a.prompt);
  viz::AttentionSelection sel;
  if (a.layer >= 0) sel.layers = {a.layer};
  if (a.head >= 0) sel.heads = {a.head};
  sel.decimals = a.decimals;
  sel.scores = a.scores;
  sel.convention = a.convention;
  const std::string text = ext == ".html"  ? viz::attention_html(map, sel)
                           : ext == ".svg" ? viz::attention_svg(map, sel)
                           : ext == ".csv" ? viz::attention_csv(map, sel)
                                           : viz::attention_json(map, sel);
  write_file_atomic(a.out, text);
  std::printf("wrote %s: %lld tokens, %zu layer(s) x %zu head(s)\n", a.out.c_str(),
              static_cast<long long>(map.T()),
              sel.layers.empty() ? static_cast<size_t>(map.n_layer) : 1,
              sel.heads.empty() ? static_cast<size_t>(map.n_head) : 1);
  return 0;
}

}  // namespace

void add_attention(CLI::App& app, int& rc) {
  auto a = std::make_shared<AttentionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "attention weights of a prompt: .html explorer, .svg heatmaps, .csv or .json data");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint file or run folder")->required();
  cmd->add_option("--prompt", a->prompt, "the text whose attention to show")->required();
  cmd->add_option("--layer", a->layer, "one layer (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--head", a->head, "one head (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", a->out, "FILE.html | FILE.svg | FILE.csv | FILE.json");
  cmd->add_option("--position", a->position,
                  "with --layer: what each head adds at this token position, their sum, and "
                  "concat -> c_proj (printed)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--decimals", a->decimals, "decimals of the numbers shown in cells")
      ->capture_default_str();
  cmd->add_option(
         "--convention", a->convention,
         "row: queries as rows, softmax(QK^T)V (books, code); column: keys as rows, "
         "queries as columns, V softmax(K^T Q) (3Blue1Brown); the .html page also has a toggle")
      ->check(CLI::IsMember({"row", "column"}))
      ->capture_default_str();
  cmd->add_flag("--scores", a->scores,
                "CSV/JSON: also the scores q.k/sqrt(HS) before the mask and softmax");
  cmd->callback([a, &rc] { rc = run_attention(*a); });
}

}  // namespace attend::cli
