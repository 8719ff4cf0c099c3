// gradcheck: analytic gradients (backward) against central finite differences, in f64.
//
// Like torch.autograd.gradcheck: an element fails when
//   |numeric - analytic| > atol + rtol * |numeric|
// and the result names the worst element: input, index, numeric and analytic values.
//
// Outputs of up to full_jacobian_max_outputs elements get the full Jacobian compared, as
// torch.autograd.gradcheck does: one backward per output element against central
// differences of every output. Larger outputs get the vector-Jacobian product with one
// seeded random vector v (the gradient of sum(f(x) * v), i.e. v^T J): an error anywhere
// in J shows unless it is orthogonal to v, which has probability zero (the idea of
// PyTorch's fast_mode). Inputs larger than max_elements are checked on a seeded random
// subset of their elements.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  int64_t max_elements = 256;              // per input; larger inputs are sampled
  int64_t full_jacobian_max_outputs = 64;  // larger outputs: a random projection
  uint64_t seed = 0;
};

struct GradcheckResult {
  bool passed = true;
  int64_t checked = 0;  // Jacobian entries (or projected rows) compared
  bool full_jacobian = false;
  double max_abs_err = 0, max_rel_err = 0;
  // The worst element (largest excess over the tolerance).
  int input = -1;
  std::vector<int64_t> index;
  std::vector<int64_t> output_index;  // with the full Jacobian
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
#pragma GCC visibility pop
