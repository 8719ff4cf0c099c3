// `attend summary` and `attend attention`.
#include <cstdio>
#include <fstream>

#include "nn/summary.h"
#include "train/checkpoint.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/explorer.h"
#include "train/trainer.h"

namespace attend::cli {

namespace fs = std::filesystem;

int run_summary(const SummaryCli& a) {
  nn::GPTConfig c;
  const int sources = (!a.preset.empty()) + (!a.checkpoint.empty());
  ATTEND_CHECK(sources <= 1, "summary: give --preset or --checkpoint, not both");
  if (!a.preset.empty()) {
    c = nn::gpt_preset(a.preset);
  } else if (!a.checkpoint.empty()) {
    train::CheckpointData d = train::load_checkpoint(train::resolve_checkpoint(a.checkpoint));
    int64_t vocab = 0;
    for (auto& [n, v] : d.config)
      if (n == "vocab_size") vocab = std::get<int64_t>(v);
    c = train::from_values(d.config).model(vocab);
  }
  // Model flags override (or, alone, describe) the model.
  for (const auto& [name, value] : a.overrides) {
    if (name == "vocab_size") c.vocab_size = std::stoll(value);
    if (name == "block_size") c.block_size = std::stoll(value);
    if (name == "n_layer") c.n_layer = std::stoll(value);
    if (name == "n_head") c.n_head = std::stoll(value);
    if (name == "n_kv_head") c.n_kv_head = std::stoll(value);
    if (name == "n_embd") c.n_embd = std::stoll(value);
    if (name == "dropout") c.dropout = std::stod(value);
    if (name == "bias") c.bias = value == "true" || value == "1";
  }
  if (!a.overrides.count("n_kv_head") && a.overrides.count("n_head") && a.preset.empty() &&
      a.checkpoint.empty())
    c.n_kv_head = c.n_head;
  std::fputs(nn::format_summary(nn::summarize(c, a.batch, a.seq)).c_str(), stdout);
  return 0;
}

int run_attention(const AttentionCli& a) {
  const std::string ext = fs::path(a.out).extension().string();
  ATTEND_CHECK(ext == ".html" || ext == ".svg" || ext == ".csv" || ext == ".json",
               "attention: --out ", a.out, ": expected a .html, .svg, .csv or .json file name");
  train::LoadedModel m = train::load_model(train::resolve_checkpoint(a.checkpoint));
  train::AttentionMap map = train::compute_attention(*m.model, *m.tokenizer, a.prompt);
  train::AttentionSelection sel;
  if (a.layer >= 0) sel.layers = {a.layer};
  if (a.head >= 0) sel.heads = {a.head};
  sel.decimals = a.decimals;
  sel.scores = a.scores;
  ATTEND_CHECK(a.decimals >= 1 && a.decimals <= 6, "attention: --decimals must be in [1, 6], got ",
               a.decimals);
  std::string text;
  if (ext == ".html") {
    text = train::attention_html(map, sel);
  } else if (ext == ".svg") {
    text = train::attention_svg(map, sel);
  } else if (ext == ".csv") {
    text = train::attention_csv(map, sel);
  } else if (ext == ".json") {
    text = train::attention_json(map, sel);
  } else {
    throw Error(
        str("attention: --out ", a.out, ": expected a .html, .svg, .csv or .json file name"));
  }
  std::ofstream out(a.out, std::ios::binary | std::ios::trunc);
  ATTEND_CHECK(out.good(), a.out, ": cannot open for writing");
  out << text;
  out.close();
  ATTEND_CHECK(out.good(), a.out, ": write failed");
  std::printf("wrote %s: %lld tokens, %zu layer(s) x %zu head(s)\n", a.out.c_str(),
              static_cast<long long>(map.T()),
              sel.layers.empty() ? static_cast<size_t>(map.n_layer) : 1,
              sel.heads.empty() ? static_cast<size_t>(map.n_head) : 1);
  return 0;
}

}  // namespace attend::cli
