// `attend summary`: modules, shapes, parameter counts, memory and FLOPs of a model given
// by a preset, a checkpoint, or model flags (the config table's Model fields).
#include <CLI/CLI.hpp>

#include <filesystem>

#include <cstdio>
#include <memory>
#include <vector>

#include "app/commands.h"
#include "app/validators.h"
#include "nn/summary.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "train/config.h"
#include "train/model_io.h"
#include "train/run_dir.h"
#include "viz/diagram.h"
#include "viz/summary_text.h"

namespace attend::cli {

namespace {

struct SummaryArgs {
  std::string preset, checkpoint;
  std::vector<const train::ConfigField*> fields;  // the model flags
  std::vector<std::string> values;
  std::vector<CLI::Option*> options;
  int64_t batch = 1, seq = 0;  // seq 0: block_size
  std::string out;             // diagram: FILE.svg | FILE.html
  std::string prompt;          // diagram: this prompt's activations in the boxes
  int64_t layer = 0;           // diagram: the block shown with activations
};

// The model the flags describe: a preset, a checkpoint's, or GPT-2 small, changed by flags.
nn::GPTConfig model_from_flags(const SummaryArgs& a) {
  ATTEND_CHECK(a.preset.empty() || a.checkpoint.empty(), "give --preset or --checkpoint, not both");
  train::TrainConfig base;
  train::apply_preset(base, "gpt2");  // with neither: GPT-2 small, changed by the flags
  if (!a.checkpoint.empty()) {
    // The config only as far as the stored weights bear it out (a crafted /config could
    // describe any model).
    const train::LoadedCheckpoint ck = train::load_checkpoint_or_run(a.checkpoint);
    base = train::from_values(ck.data.config);
    train::check_config_matches_model(ck, base.model);
  }
  train::SettingsLayer flags{"flags", {}};
  if (!a.preset.empty()) flags.values["preset"] = a.preset;
  for (size_t i = 0; i < a.fields.size(); ++i)
    if (a.options[i]->count())
      flags.values[a.fields[i]->name] =
          train::parse_value(*a.fields[i], a.values[i], std::string("--") + a.fields[i]->name);
  const nn::GPTConfig c = train::resolve_config({flags}, base).config.model;
  c.validate("--");
  return c;
}

int run_summary(const SummaryArgs& a) {
  const nn::GPTConfig c = model_from_flags(a);
  std::fputs(viz::format_summary(nn::summarize(c, a.batch, a.seq)).c_str(), stdout);
  return 0;
}

int run_diagram(const SummaryArgs& a) {
  const std::string ext = std::filesystem::path(a.out).extension().string();
  ATTEND_CHECK(ext == ".svg" || ext == ".html", "diagram: --out ", a.out,
               ": expected a .svg or .html file name");
  const nn::GPTConfig c = model_from_flags(a);
  const std::string title = "GPT: " + std::to_string(c.n_layer) + " layers, " +
                            std::to_string(c.n_head) + " heads (" + std::to_string(c.n_kv_head) +
                            " key/value), C " + std::to_string(c.n_embd) + ", V " +
                            std::to_string(c.vocab_size);
  std::unique_ptr<viz::DiagramActivations> acts;
  if (!a.prompt.empty()) {
    ATTEND_CHECK(!a.checkpoint.empty(), "diagram: --prompt needs --checkpoint (the weights)");
    train::LoadedModel m = train::load_model(a.checkpoint);
    ATTEND_CHECK(m.model->config == c,
                 "diagram: --prompt shows the checkpoint's own model; drop the model flags");
    acts = std::make_unique<viz::DiagramActivations>(
        viz::diagram_activations(*m.model, m.tokenizer->encode(a.prompt), a.layer, a.prompt));
  }
  write_file_atomic(a.out, ext == ".svg" ? viz::model_diagram_svg(c, title, acts.get())
                                         : viz::model_diagram_html(c, title, acts.get()));
  std::printf("wrote %s: %s\n", a.out.c_str(), title.c_str());
  return 0;
}

// The model flags of summary and diagram: --preset, --checkpoint and the config's Model
// fields.
void add_model_flags(CLI::App* cmd, SummaryArgs& a) {
  std::string presets;
  for (const auto& n : nn::gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", a.preset, presets);
  cmd->add_option("--checkpoint", a.checkpoint, "a checkpoint file or run folder");
  for (const train::ConfigField& f : train::config_fields())
    if (f.group == train::Group::Model && std::string(f.name) != "preset") a.fields.push_back(&f);
  a.values.resize(a.fields.size());
  for (size_t i = 0; i < a.fields.size(); ++i)
    a.options.push_back(
        cmd->add_option(flag_names(a.fields[i]->name), a.values[i], a.fields[i]->help)
            ->type_name(a.fields[i]->type_name()));
}

}  // namespace

void add_summary(CLI::App& app, int& rc) {
  auto a = std::make_shared<SummaryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "modules, shapes, parameter counts, memory and FLOPs of a model");
  add_model_flags(cmd, *a);
  cmd->add_option("--batch", a->batch, "batch size B for memory figures")->capture_default_str();
  cmd->add_option("--seq", a->seq, "sequence length T (default: block_size)");
  cmd->callback([a, &rc] { rc = run_summary(*a); });
}

void add_diagram(CLI::App& app, int& rc) {
  auto a = std::make_shared<SummaryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diagram", "the whole model in one figure with its real shapes and parameter counts");
  add_model_flags(cmd, *a);
  cmd->add_option("--out", a->out, "FILE.svg | FILE.html")->required();
  CLI::Option* prompt = cmd->add_option(
      "--prompt", a->prompt,
      "with --checkpoint: this text's activations (shape, mean, std) in every box");
  CLI::Option* layer =
      cmd->add_option("--layer", a->layer, "with --prompt: the block whose activations are shown")
          ->check(non_negative_int())
          ->capture_default_str();
  cmd->callback([a, &rc, layer, prompt] {
    ATTEND_CHECK(prompt->count() == 0 || !a->prompt.empty(),
                 "diagram: --prompt is empty; give at least one character, or leave --prompt out "
                 "for the diagram without activations");
    ATTEND_CHECK(
        layer->count() == 0 || !a->prompt.empty(),
        "diagram: --layer chooses the block whose activations --prompt shows; add --prompt");
    rc = run_diagram(*a);
  });
}

}  // namespace attend::cli
