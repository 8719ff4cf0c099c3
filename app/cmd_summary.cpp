// `attend summary`: modules, shapes, parameter counts, memory and FLOPs of a model given
// by a preset, a checkpoint, or model flags (the config table's Model fields).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/model_flags.h"
#include "nn/summary.h"
#include "viz/summary_text.h"

namespace attend::cli {

namespace {

int run_summary(const ModelArgs& a) {
  const nn::GPTConfig c = model_from_flags(a);
  std::fputs(viz::format_summary(nn::summarize(c, a.batch, a.seq)).c_str(), stdout);
  return 0;
}

}  // namespace

void add_summary(CLI::App& app, int& rc) {
  auto a = std::make_shared<ModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "modules, shapes, parameter counts, memory and FLOPs of a model");
  add_model_flags(cmd, *a);
  cmd->add_option("--batch", a->batch, "batch size B for memory figures")->capture_default_str();
  cmd->add_option("--seq", a->seq, "sequence length T (default: block_size)");
  cmd->callback([a, &rc] { rc = run_summary(*a); });
}

}  // namespace attend::cli
