// `attend train`, `attend sample`, `attend eval`, `attend plot`.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "data/token_file.h"
#include "data/tokenizer.h"
#include "train/cli.h"
#include "train/plot.h"
#include "train/sample.h"
#include "train/trainer.h"

namespace attend::cli {

namespace fs = std::filesystem;

void add_train_options(CLI::App* cmd, TrainCli& t) {
  t.values.resize(train::config_fields().size());
  for (size_t i = 0; i < train::config_fields().size(); ++i) {
    const train::ConfigField& f = train::config_fields()[i];
    std::string dashed = f.name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    std::string names = "--" + std::string(f.name);
    if (dashed != f.name) names += ",--" + dashed;
    const std::string def = train::get_field(train::TrainConfig{}, f);
    t.options.push_back(
        cmd->add_option(names, t.values[i], std::string(f.help) + " [default: " + def + "]"));
  }
  cmd->add_option("--out", t.out, "the run folder: checkpoints, metrics.csv, loss.svg");
  cmd->add_option("--resume", t.resume,
                  "continue a run: its folder (newest valid checkpoint) or a checkpoint file");
  cmd->add_option("--config", t.config_file, "a JSON file of settings (flags win over it)");
}

int run_train(const TrainCli& t) {
  train::TrainRequest req;
  std::map<std::string, std::string> file = t.config_file.empty()
                                                ? std::map<std::string, std::string>{}
                                                : train::read_config_file(t.config_file);
  // Precedence: defaults < preset < config file < flags.
  std::string preset;
  if (file.count("preset")) preset = file["preset"];
  for (size_t i = 0; i < t.options.size(); ++i)
    if (t.options[i]->count() && std::string(train::config_fields()[i].name) == "preset")
      preset = t.values[i];
  if (!preset.empty()) train::apply_preset(req.config, preset);
  for (const auto& [name, value] : file) {
    train::set_field(req.config, *train::find_field(name), value, t.config_file + ": " + name);
    req.explicit_fields.insert(name);
  }
  for (size_t i = 0; i < t.options.size(); ++i) {
    if (!t.options[i]->count()) continue;
    const train::ConfigField& f = train::config_fields()[i];
    train::set_field(req.config, f, t.values[i], std::string("--") + f.name);
    req.explicit_fields.insert(f.name);
  }
  if (!preset.empty()) {
    // A preset's fields count as given, so that resuming with --preset checks them.
    for (const char* n :
         {"n_layer", "n_head", "n_kv_head", "n_embd", "block_size", "dropout", "bias"})
      req.explicit_fields.insert(n);
  }
  req.run_dir = t.out;
  req.resume = t.resume;
  train::TrainSummary s = train::run_training(req);
  std::printf("trained steps %lld..%lld", static_cast<long long>(s.first_step),
              static_cast<long long>(s.last_step));
  if (s.evaluated)
    std::printf("; final train loss %.4f, val loss %.4f", s.final_train_loss, s.final_val_loss);
  if (!s.last_checkpoint.empty()) std::printf("; checkpoint %s", s.last_checkpoint.c_str());
  std::printf("\n");
  return 0;
}

int run_sample(const SampleCli& a) {
  train::LoadedModel m = train::load_model(train::resolve_checkpoint(a.checkpoint));
  const train::SampleOptions& o = a.options;
  m.tokenizer->encode(o.prompt);  // a prompt the tokenizer cannot encode fails before any output
  std::fputs(o.prompt.c_str(), stdout);
  train::sample(*m.model, *m.tokenizer, o, [](const std::string& piece) {
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  return 0;
}

int run_eval(const EvalCli& a) {
  train::LoadedModel m = train::load_model(train::resolve_checkpoint(a.checkpoint));
  fs::path file = a.data;
  fs::path tmp;
  // A token file is used as it is; anything else is text, tokenized with the
  // checkpoint's own tokenizer.
  bool is_token_file = false;
  {
    std::ifstream in(file, std::ios::binary);
    char magic[8] = {0};
    in.read(magic, 8);
    ATTEND_CHECK(in.gcount() > 0 || std::filesystem::exists(file), a.data, ": no such file");
    is_token_file = in.gcount() == 8 && std::equal(magic, magic + 8, data::kTokenMagic);
  }
  if (!is_token_file) {
    data::TokenIds ids = m.tokenizer->encode(data::read_file(file));
    tmp = fs::temp_directory_path() / ("attend_eval_" + std::to_string(::getpid()) + ".bin");
    data::write_token_file(tmp, ids, m.tokenizer->vocab_size());
    file = tmp;
  }
  double loss = 0;
  try {
    loss = train::evaluate_windows(*m.model, file);
  } catch (...) {
    if (!tmp.empty()) fs::remove(tmp);
    throw;
  }
  if (!tmp.empty()) fs::remove(tmp);
  std::printf("loss %.6f\nperplexity %.6f\n", loss, std::exp(loss));
  return 0;
}

int run_plot(const PlotCli& a) {
  const fs::path csv = fs::path(a.run_dir) / "metrics.csv";
  std::ifstream in(csv);
  ATTEND_CHECK(in.good(), csv.string(), ": cannot open (is this a run folder?)");
  std::string line;
  std::getline(in, line);
  ATTEND_CHECK(line.rfind("step,train_loss,val_loss", 0) == 0, csv.string(),
               ": unexpected header '", line, "'");
  train::Series tr{"train loss (per step)", "#1f77b4", {}, {}, false},
      va{"val loss (evaluation)", "#d62728", {}, {}, true};
  int64_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    ATTEND_CHECK(cells.size() >= 3, csv.string(), ": line ", row, " has ", cells.size(),
                 " fields, expected 7");
    try {
      const double step = std::stod(cells[0]);
      if (!cells[1].empty()) tr.x.push_back(step), tr.y.push_back(std::stod(cells[1]));
      if (!cells[2].empty()) va.x.push_back(step), va.y.push_back(std::stod(cells[2]));
    } catch (const std::exception&) {
      throw Error(str(csv.string(), ": line ", row, " has a field that is not a number"));
    }
  }
  const fs::path out = fs::path(a.run_dir) / "loss.svg";
  std::ofstream(out) << train::line_plot_svg(
      {tr, va}, {"attend: loss", "step", "cross-entropy loss (nats)", a.log_y});
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace attend::cli
