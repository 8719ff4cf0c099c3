#include "app/model_flags.h"

#include "app/commands.h"

#include "tensor/error.h"
#include "train/model_io.h"
#include "train/run_dir.h"

namespace attend::cli {

nn::GPTConfig model_from_flags(const ModelArgs& a) {
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

void add_model_flags(CLI::App* cmd, ModelArgs& a) {
  std::string presets;
  for (const auto& n : nn::gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", a.preset, presets)->check([](const std::string& s) {
    return s.empty() ? std::string("an empty name; expected one of the presets --help lists")
                     : std::string();
  });
  cmd->add_option("--checkpoint", a.checkpoint, "a checkpoint file or run folder");
  for (const train::ConfigField& f : train::config_fields())
    if (f.group == train::Group::Model && std::string(f.name) != "preset") a.fields.push_back(&f);
  a.values.resize(a.fields.size());
  for (size_t i = 0; i < a.fields.size(); ++i)
    a.options.push_back(
        cmd->add_option(flag_names(a.fields[i]->name), a.values[i], a.fields[i]->help)
            ->type_name(a.fields[i]->type_name()));
}

}  // namespace attend::cli
