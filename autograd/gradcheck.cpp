#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "autograd/node.h"
#include "tensor/kernels.h"
#include "tensor/random.h"

namespace attend {

std::string GradcheckResult::message() const {
  std::ostringstream os;
  os << (passed ? "passed" : "FAILED") << ": " << checked << " elements, max abs err "
     << max_abs_err << ", max rel err " << max_rel_err;
  os << (full_jacobian ? " (full Jacobian)" : " (random projection)");
  if (input >= 0) {
    os << "; worst: input " << input << " index " << shape_str(index);
    if (full_jacobian) os << " output " << shape_str(output_index);
    os << " numeric " << numeric << " analytic " << analytic;
  }
  return os.str();
}

namespace {

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Up to k distinct flat indices of [0, n), all of them when n <= k (partial Fisher-Yates).
std::vector<int64_t> sample_indices(int64_t n, int64_t k, Generator& gen) {
  std::vector<int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  if (n <= k) return all;
  for (int64_t i = 0; i < k; ++i) {
    PhiloxCounter r = gen.block(gen.advance(1));
    int64_t j = i + static_cast<int64_t>(((static_cast<uint64_t>(r[0]) << 32) | r[1]) % (n - i));
    std::swap(all[i], all[j]);
  }
  all.resize(k);
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  std::vector<Tensor> xs;
  for (const Tensor& in : inputs) {
    Tensor c = kernel::clone(in);
    if (in.requires_grad()) c.requires_grad_(true);
    xs.push_back(c);
  }
  return gradcheck_leaves(f, xs, opt);
}

GradcheckResult gradcheck_leaves(const GradcheckFn& f, const std::vector<Tensor>& xs,
                                 const GradcheckOptions& opt) {
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].requires_grad()) continue;
    ATTEND_CHECK(xs[i].dtype() == DType::F64, "gradcheck: input ", i, " has dtype ",
                 dtype_name(xs[i].dtype()), "; gradcheck needs f64 inputs");
    ATTEND_CHECK(xs[i].is_leaf() && xs[i].is_contiguous(), "gradcheck: input ", i,
                 " must be a contiguous leaf tensor");
    xs[i].zero_grad();
  }

  Generator gen(opt.seed);
  Tensor out = f(xs);
  ATTEND_CHECK(out.dtype() == DType::F64, "gradcheck: the function returned ",
               dtype_name(out.dtype()), "; gradcheck needs an f64 output");
  ATTEND_CHECK(out.requires_grad(),
               "gradcheck: the output does not depend on any input that requires grad");

  // The rows of the Jacobian we compare: every output element (one-hot weights) for
  // small outputs, else one seeded random projection v.
  const bool full = out.numel() <= opt.full_jacobian_max_outputs;
  std::vector<Tensor> weights;
  if (full) {
    for (int64_t o = 0; o < out.numel(); ++o) {
      Tensor w = zeros(out.shape(), DType::F64);
      w.data<double>()[o] = 1.0;
      weights.push_back(w);
    }
  } else {
    weights.push_back(randn(out.shape(), gen, DType::F64));
  }
  // analytic[k][i]: the gradient of sum(weights[k] * f) with respect to input i.
  std::vector<std::vector<Tensor>> analytic(weights.size());
  for (size_t k = 0; k < weights.size(); ++k) {
    for (const Tensor& x : xs) x.zero_grad();
    out.backward(weights[k], /*retain_graph=*/k + 1 < weights.size());
    for (const Tensor& x : xs) {
      analytic[k].push_back(
          !x.requires_grad()
              ? Tensor()
              : (x.grad().defined() ? kernel::clone(x.grad()) : zeros(x.shape(), DType::F64)));
    }
  }
  auto outputs = [&] {
    NoGradGuard no_grad;
    return kernel::contiguous(f(xs)).to_vector<double>();
  };

  GradcheckResult res;
  res.full_jacobian = full;
  double worst_excess = -1;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].requires_grad()) continue;
    double* p = xs[i].data<double>();
    for (int64_t e : sample_indices(xs[i].numel(), opt.max_elements, gen)) {
      const double orig = p[e];
      p[e] = orig + opt.eps;
      const std::vector<double> plus = outputs();
      p[e] = orig - opt.eps;
      const std::vector<double> minus = outputs();
      p[e] = orig;
      for (size_t k = 0; k < weights.size(); ++k) {
        const double* w = weights[k].data<double>();
        double num = 0;
        for (size_t o = 0; o < plus.size(); ++o) num += w[o] * (plus[o] - minus[o]);
        num /= 2 * opt.eps;
        const double ana = analytic[k][i].data<double>()[e];
        const double abs_err = std::abs(num - ana);
        const double rel_err = abs_err / std::max(std::abs(num), 1e-12);
        const double excess = abs_err - (opt.atol + opt.rtol * std::abs(num));
        ++res.checked;
        res.max_abs_err = std::max(res.max_abs_err, abs_err);
        if (std::abs(num) > opt.atol) res.max_rel_err = std::max(res.max_rel_err, rel_err);
        if (!(excess <= 0)) res.passed = false;  // NaN fails too
        if (excess > worst_excess || std::isnan(excess)) {
          worst_excess = std::isnan(excess) ? INFINITY : excess;
          res.input = static_cast<int>(i);
          res.index = unravel(e, xs[i].shape());
          res.output_index =
              full ? unravel(static_cast<int64_t>(k), out.shape()) : std::vector<int64_t>{};
          res.numeric = num;
          res.analytic = ana;
        }
      }
    }
  }
  return res;
}

}  // namespace attend
