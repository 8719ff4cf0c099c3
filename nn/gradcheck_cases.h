// gradcheck rows for every module: each builds the module from a seed, converts it to
// f64, and checks the gradients of its output with respect to its input and to every
// parameter (in place, through gradcheck_leaves).
#pragma once

#include <vector>

#include "autograd/gradcheck_cases.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

const std::vector<GradcheckCase>& module_gradcheck_cases();

}  // namespace attend::nn
#pragma GCC visibility pop
