// The `attend` command-line program: one function per subcommand, called from main.
#pragma once

#include <cstdint>
#include <string>

namespace attend::cli {

struct GradcheckArgs {
  std::string only;   // run the cases whose name contains this
  uint64_t seed = 0;  // input values
};
int run_gradcheck(const GradcheckArgs& args);

}  // namespace attend::cli
