// `attend train`: its flags are the config table's (train/config.h), so a new field is a
// new flag, a config-file key and a /config attribute at once.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/dist.h"
#include "train/trainer.h"

namespace attend::cli {

namespace {

struct TrainArgs {
  std::vector<std::string> values;  // one per config field
  std::vector<CLI::Option*> options;
  std::string out, resume, config_file;
};

int run_train(const TrainArgs& t) {
  std::vector<train::SettingsLayer> layers;
  if (!t.config_file.empty()) layers.push_back(train::read_config_file(t.config_file));
  train::SettingsLayer flags{"flags", {}};
  for (size_t i = 0; i < t.options.size(); ++i) {
    if (!t.options[i] || !t.options[i]->count()) continue;
    const train::ConfigField& f = train::config_fields()[i];
    // A boolean flag alone (--dpo) means true; --decay_lr false still says false.
    const bool bare = t.values[i].empty() && std::string(f.type_name()) == "BOOL";
    flags.values[f.name] =
        train::parse_value(f, bare ? "true" : t.values[i], std::string("--") + f.name);
  }
  layers.push_back(flags);
  ATTEND_CHECK(t.out.empty() || t.resume.empty(), "train: --out ", t.out, " with --resume ",
               t.resume, ": a resumed run continues in its own folder; give one of the two");
  train::TrainRequest req{train::resolve_config(layers), t.out, t.resume, {}};
  req.on_start = [](const train::TrainConfig& c) {
    say_precision(kernel::parse_gemm_precision(c.precision, "--precision"));
  };
  const train::TrainOutcome s = train::run_training(req);
  if (!train::Dist::world().root()) return 0;  // rank 0 reports
  std::printf("trained steps %lld..%lld", static_cast<long long>(s.first_step),
              static_cast<long long>(s.last_step));
  if (s.evaluated)
    std::printf("; final train loss %.4f, val loss %.4f", s.final_train_loss, s.final_val_loss);
  if (!s.last_checkpoint.empty()) std::printf("; checkpoint %s", s.last_checkpoint.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

void add_train(CLI::App& app, int& rc) {
  auto t = std::make_shared<TrainArgs>();
  CLI::App* cmd =
      app.add_subcommand("train", "train a GPT on a corpus (defaults: nanoGPT's CPU recipe)");
  const auto& fields = train::config_fields();
  t->values.resize(fields.size());
  t->options.resize(fields.size(), nullptr);
  const train::TrainConfig defaults;
  for (size_t i = 0; i < fields.size(); ++i) {
    const train::ConfigField& f = fields[i];
    if (!f.train_flag) continue;
    const std::string def = train::format_value(f.get(defaults));
    if (std::string(f.type_name()) == "BOOL") {
      // Without a value, CLI11 hands over the default text: leave it empty, say it in the help.
      t->options[i] = cmd->add_option(flag_names(f.name), t->values[i],
                                      std::string(f.help) + " (default " + def +
                                          "; the flag alone means true)")
                          ->type_name(f.type_name())
                          ->expected(0, 1);
      continue;
    }
    t->options[i] = cmd->add_option(flag_names(f.name), t->values[i], f.help)
                        ->type_name(f.type_name())
                        ->default_str(def);
  }
  cmd->add_option("--out", t->out, "the run folder: checkpoints, metrics.csv, loss.svg");
  cmd->add_option("--resume", t->resume,
                  "continue a run: its folder (newest valid checkpoint) or a checkpoint file");
  cmd->add_option("--config", t->config_file, "a JSON file of settings (flags win over it)");
  cmd->callback([t, &rc] { rc = run_train(*t); });
}

}  // namespace attend::cli
