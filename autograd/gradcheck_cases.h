// The table of differentiable ops checked by gradcheck: one row per op and form
// (broadcast operands, non-contiguous inputs, a tensor used twice). Tests run every row;
// `attend gradcheck` prints them. Adding an op adds a row here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "tensor/random.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

struct GradcheckCase {
  std::string name;
  std::string shapes;  // what the inputs look like, for the report
  // Builds the inputs (f64) from Generator(seed) and runs gradcheck on them.
  std::function<GradcheckResult(uint64_t seed)> run;
};

// Every differentiable op (autograd/); nn/ has the modules' table.
const std::vector<GradcheckCase>& op_gradcheck_cases();

}  // namespace attend
#pragma GCC visibility pop
