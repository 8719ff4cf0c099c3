// gradcheck: analytic gradients (backward) against central finite differences, in f64.
//
// Like torch.autograd.gradcheck: an element fails when
//   |numeric - analytic| > atol + rtol * |numeric|
// and the result names the worst element: input, index, numeric and analytic values.
//
// For a function with a non-scalar output we check the vector-Jacobian product with a
// fixed random vector v (seeded): the scalar L(x) = sum(f(x) * v), whose gradient is
// v^T J. An error anywhere in J shows up unless it is orthogonal to v, which happens with
// probability zero (the idea of PyTorch's fast_mode). Inputs larger than max_elements are
// checked on a seeded random subset of their elements.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace attend {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  int64_t max_elements = 256;  // per input; larger inputs are sampled
  uint64_t seed = 0;
};

struct GradcheckResult {
  bool passed = true;
  int64_t checked = 0;  // elements perturbed, over all inputs
  double max_abs_err = 0, max_rel_err = 0;
  // The worst element (largest excess over the tolerance).
  int input = -1;
  std::vector<int64_t> index;
  double numeric = 0, analytic = 0;
  std::string message() const;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the gradient with respect to every input that requires grad. The inputs are
// copied; the caller's tensors and their grads are left as they were.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// The same on the given leaves themselves, perturbed in place and restored: for a
// module's parameters, which f reads from the module rather than from its argument.
// The leaves' grads are reset.
GradcheckResult gradcheck_leaves(const GradcheckFn& f, const std::vector<Tensor>& leaves,
                                 const GradcheckOptions& options = {});

}  // namespace attend
