// `attend gradcheck`: every differentiable op and module through gradcheck (f64), one row
// each; exit 1 if any fails.
#include <CLI/CLI.hpp>

#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.h"
#include "autograd/gradcheck_cases.h"
#include "nn/gradcheck_cases.h"
#include "tensor/error.h"
#include "tensor/threads.h"

namespace attend::cli {

namespace {

struct GradcheckArgs {
  std::string only;   // run the cases whose name contains this
  uint64_t seed = 0;  // input values
};

int run_gradcheck(const GradcheckArgs& args) {
  // Every case is a handful of tiny f64 ops: one thread is the fastest, idle (0.44 s for
  // all cases, 0.67 s at 2 threads) and more so under a CPU hog (see Note [Threads on a
  // busy machine], bench/bench_commands_load.sh). A count the user fixed stays.
  if (!threads_fixed()) omp_set_num_threads(1);
  int failed = 0, ran = 0;
  std::printf("%-34s %-38s %12s %12s  %s\n", "name", "inputs", "max abs err", "max rel err",
              "result");
  std::vector<GradcheckCase> cases = op_gradcheck_cases();
  for (const GradcheckCase& c : nn::module_gradcheck_cases()) cases.push_back(c);
  for (const GradcheckCase& c : cases) {
    if (!args.only.empty() && c.name.find(args.only) == std::string::npos) continue;
    GradcheckResult r = c.run(args.seed);
    ++ran;
    if (!r.passed) ++failed;
    std::printf("%-34s %-38s %12.3g %12.3g  %s\n", c.name.c_str(), c.shapes.c_str(), r.max_abs_err,
                r.max_rel_err, r.passed ? "pass" : "FAIL");
    if (!r.passed) std::printf("    %s\n", r.message().c_str());
  }
  ATTEND_CHECK(ran > 0, "gradcheck: no case matches --only '", args.only, "'");
  std::printf("%d passed, %d failed\n", ran - failed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

void add_gradcheck(CLI::App& app, int& rc) {
  auto a = std::make_shared<GradcheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gradcheck", "check every op's backward against central finite differences (f64)");
  cmd->add_option("--only", a->only, "run only the cases whose name contains this");
  cmd->add_option("--seed", a->seed, "seed of the random inputs")->capture_default_str();
  cmd->callback([a, &rc] { rc = run_gradcheck(*a); });
}

}  // namespace attend::cli
