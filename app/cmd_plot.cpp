// `attend plot`: redraw RUN_DIR/loss.svg from RUN_DIR/metrics.csv (the trainer's own
// reader and writer, so the picture is the one training draws).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/run_dir.h"

namespace attend::cli {

namespace {

struct PlotArgs {
  std::string run_dir;
  bool log_y = false;
};

int run_plot(const PlotArgs& a) {
  const std::filesystem::path dir(a.run_dir), csv = dir / "metrics.csv";
  std::error_code ec;
  ATTEND_CHECK(std::filesystem::exists(csv, ec), csv.string(),
               ": cannot open (is this a run folder?)");
  train::write_loss_plot(dir, train::read_metrics(csv), a.log_y);
  std::printf("wrote %s\n", (dir / "loss.svg").c_str());
  return 0;
}

}  // namespace

void add_plot(CLI::App& app, int& rc) {
  auto a = std::make_shared<PlotArgs>();
  CLI::App* cmd = app.add_subcommand("plot", "redraw RUN_DIR/loss.svg from RUN_DIR/metrics.csv");
  cmd->add_option("run_dir", a->run_dir, "the run folder")->required();
  cmd->add_flag("--log-y,--log_y", a->log_y, "logarithmic loss axis");
  cmd->callback([a, &rc] { rc = run_plot(*a); });
}

}  // namespace attend::cli
