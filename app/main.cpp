// attend: the command-line program. It builds the commands, parses, and maps errors to
// exit codes: 0 done, 1 the user's error (attend::Error), 2 an internal error. Diagnostics
// go to stderr; a command's data goes to stdout.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <omp.h>

#include <algorithm>
#include <csignal>
#include <filesystem>

#include "app/commands.h"
#include "tensor/error.h"
#include "tensor/kernels/gemm.h"
#include "tensor/threads.h"
#include "train/dist.h"
#include "io/version.h"

namespace attend::cli {
std::string flag_names(const std::string& name) {
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return "--" + name + (dashed != name ? ",--" + dashed : "");
}

void say_precision(kernel::GemmPrecision p) {
  static bool said = false;
  if (p == kernel::GemmPrecision::bf16 && !said) {
    said = true;
    bool native = false;
    const std::string note = kernel::gemm_bf16_note(&native);
    if (native)
      spdlog::info("{}", note);
    else
      spdlog::warn("{}", note);
  }
}

std::string weights_precision(const std::string& weights, const std::string& precision,
                              const std::string& checkpoint_precision) {
  if (weights == "bf16") {
    ATTEND_CHECK(precision.empty() || precision == "bf16",
                 "--weights bf16 multiplies in bf16 products; it cannot go with --precision ",
                 precision);
    return "bf16";
  }
  return precision.empty() ? checkpoint_precision : precision;
}

void add_weights_option(CLI::App* cmd, std::string& weights) {
  cmd->add_option("--weights", weights,
                  "the weights' format while this runs: f32, bf16 (half the bytes a token reads; "
                  "bf16 products) or q8_0 (blocks of 32 int8 with a scale: a quarter; rounds "
                  "the weights). Default: the products' own (the model's bits)")
      ->check(CLI::IsMember({"f32", "bf16", "q8_0"}));
}

kernel::PrecisionScope use_precision(const std::string& value, const std::string& what) {
  const kernel::GemmPrecision p = kernel::parse_gemm_precision(value, what);
  say_precision(p);
  return kernel::PrecisionScope(p);
}

}  // namespace attend::cli

namespace {

// Under mpirun: MPI started, rank r's log lines marked "rank r", and only rank 0's
// information shown (the others print warnings and errors).
attend::train::Dist* start_world() {
  try {
    attend::train::Dist& d = attend::train::Dist::world();
    if (d.size() > 1) {
      spdlog::set_pattern(
          fmt::format("[%Y-%m-%d %H:%M:%S.%e] [%n] [rank {}] [%^%l%$] %v", d.rank()));
      if (!d.root()) spdlog::set_level(spdlog::level::warn);
    }
    return &d;
  } catch (const attend::Error& e) {
    spdlog::error("{}", e.what());
    return nullptr;
  }
}

// Ends the run: with MPI, a failing rank takes the job down with it (its peers would
// otherwise wait for it); MPI is finalised after a success.
int finish(attend::train::Dist& d, int rc) {
  if (rc != 0 && d.size() > 1) d.abort("stopping every rank (the error is above)", rc);
  attend::train::Dist::finalize();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("attend"));
  attend::train::Dist* world = start_world();
  if (!world) return 1;
  for (const std::string& p : {attend::omp_env_problem(), attend::kernel::gemm_env_problem()}) {
    if (p.empty()) continue;
    spdlog::error("{}", p);
    return finish(*world, 1);
  }
  // Before any parallel region: as many threads as cores not busy with other work (see
  // Note [Threads on a busy machine]); --threads below overrides it.
  attend::machine_threads();
  attend::start_threads_for_load();
  std::signal(SIGXFSZ, SIG_IGN);  // a write past a file-size limit fails with an error instead
  CLI::App app{"attend: build, train and look inside small GPT models on CPUs"};
  app.set_version_flag("--version", std::string("attend ") + attend::version());
  app.require_subcommand(0, 1);
  app.add_option_function<std::string>(
         "--log-level,--log_level",
         [](const std::string& l) { spdlog::set_level(spdlog::level::from_str(l)); },
         "trace, debug, info, warn, error, off")
      ->check(CLI::IsMember(
          {"trace", "debug", "info", "warn", "warning", "err", "error", "critical", "off"}))
      ->default_str("info");
  // Results do not depend on the thread count (fixed-order reductions; tested bit for bit),
  // only the speed does: on a loaded machine fewer threads than cores is often faster.
  app.add_option_function<int>(
      "--threads",
      [](int n) {
        if (n < 1 || n > 4096) throw CLI::ValidationError("--threads", "must be in [1, 4096]");
        attend::fix_threads(n);
      },
      "OpenMP threads, fixed (default: OMP_NUM_THREADS, else at most one per core, adapted to the "
      "load while training)");
  app.add_option_function<double>(
         "--dist-timeout,--dist_timeout",
         [world](double s) {
           if (!(s > 0)) throw CLI::ValidationError("--dist-timeout", "must be > 0 seconds");
           world->timeout_s = s;
         },
         "under mpirun: seconds a rank waits for the others before ending the job")
      ->default_str("600");
  int rc = 0;
  for (auto add : {attend::cli::add_gradcheck, attend::cli::add_tokenize, attend::cli::add_prepare,
                   attend::cli::add_train, attend::cli::add_sample, attend::cli::add_chat,
                   attend::cli::add_eval,
                   attend::cli::add_plot, attend::cli::add_summary, attend::cli::add_attention,
                   attend::cli::add_import, attend::cli::add_export, attend::cli::add_heads,
                   attend::cli::add_diagram})
    add(app, rc);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty() && world->root()) std::fputs(app.help().c_str(), stdout);
    return finish(*world, rc);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; its own codes (104, 105, ...) become the documented 1.
    const int code = app.exit(e);
    return finish(*world, code == 0 ? 0 : 1);
  } catch (const attend::Error& e) {
    spdlog::error("{}", e.what());
    return finish(*world, 1);
  } catch (const std::filesystem::filesystem_error& e) {
    // The file system refused (a full disk, permissions, a vanished folder): the user's
    // environment, not our bug. The message names the path.
    spdlog::error("{}", e.what());
    return finish(*world, 1);
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory (an allocation failed); try a smaller model or batch");
    return finish(*world, 1);
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    return finish(*world, 2);
  }
}
