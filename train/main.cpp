// attend: the command-line program. Library code throws; only here are errors caught,
// logged, and turned into an exit code (1 for a user error, 2 for an internal one).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "tensor/error.h"
#include "train/cli.h"
#include "train/version.h"

int main(int argc, char** argv) {
  CLI::App app{"attend: build, train and look inside small GPT models on CPUs"};
  app.set_version_flag("--version", std::string("attend ") + attend::version());
  app.require_subcommand(0, 1);

  attend::cli::GradcheckArgs gc;
  CLI::App* gradcheck = app.add_subcommand(
      "gradcheck", "check every op's backward against central finite differences (f64)");
  gradcheck->add_option("--only", gc.only, "run only the cases whose name contains this");
  gradcheck->add_option("--seed", gc.seed, "seed of the random inputs");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (gradcheck->parsed()) return attend::cli::run_gradcheck(gc);
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const attend::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    return 2;
  }
}
