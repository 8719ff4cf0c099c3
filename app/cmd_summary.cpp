// `attend summary`: modules, shapes, parameter counts, memory and FLOPs of a model given
// by a preset, a checkpoint, or model flags (the config table's Model fields).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include "app/commands.h"
#include "nn/summary.h"
#include "tensor/error.h"
#include "train/config.h"
#include "train/run_dir.h"
#include "viz/summary_text.h"

namespace attend::cli {

namespace {

struct SummaryArgs {
  std::string preset, checkpoint;
  std::vector<const train::ConfigField*> fields;  // the model flags
  std::vector<std::string> values;
  std::vector<CLI::Option*> options;
  int64_t batch = 1, seq = 0;  // seq 0: block_size
};

int run_summary(const SummaryArgs& a) {
  ATTEND_CHECK(a.preset.empty() || a.checkpoint.empty(),
               "summary: give --preset or --checkpoint, not both");
  train::TrainConfig base;
  train::apply_preset(base, "gpt2");  // with neither: GPT-2 small, changed by the flags
  if (!a.checkpoint.empty())
    base = train::from_values(train::load_checkpoint_or_run(a.checkpoint).data.config);
  train::SettingsLayer flags{"flags", {}};
  if (!a.preset.empty()) flags.values["preset"] = a.preset;
  for (size_t i = 0; i < a.fields.size(); ++i)
    if (a.options[i]->count())
      flags.values[a.fields[i]->name] =
          train::parse_value(*a.fields[i], a.values[i], std::string("--") + a.fields[i]->name);
  const nn::GPTConfig c = train::resolve_config({flags}, base).config.model;
  c.validate("--");
  std::fputs(viz::format_summary(nn::summarize(c, a.batch, a.seq)).c_str(), stdout);
  return 0;
}

}  // namespace

void add_summary(CLI::App& app, int& rc) {
  auto a = std::make_shared<SummaryArgs>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "modules, shapes, parameter counts, memory and FLOPs of a model");
  std::string presets;
  for (const auto& n : nn::gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", a->preset, presets);
  cmd->add_option("--checkpoint", a->checkpoint, "a checkpoint file or run folder");
  for (const train::ConfigField& f : train::config_fields())
    if (f.group == train::Group::Model && std::string(f.name) != "preset") a->fields.push_back(&f);
  a->values.resize(a->fields.size());
  for (size_t i = 0; i < a->fields.size(); ++i)
    a->options.push_back(
        cmd->add_option(flag_names(a->fields[i]->name), a->values[i], a->fields[i]->help)
            ->type_name(a->fields[i]->type_name()));
  cmd->add_option("--batch", a->batch, "batch size B for memory figures")->capture_default_str();
  cmd->add_option("--seq", a->seq, "sequence length T (default: block_size)");
  cmd->callback([a, &rc] { rc = run_summary(*a); });
}

}  // namespace attend::cli
