// Llama's layers alone, forward + backward, each fused op against the composition of
// primitives it replaces (the composed twins of tests/autograd/test_fused.cpp): rms_norm,
// swiglu, rotary (on the packed q | k | v, as nn::Attention applies it), and attention with a
// sliding window against full causal attention. Shapes of bench configs D (llama-char:
// B 12, T 64, C 128, H 352) and E (stories15m: B 4, T 256, C 288, H 768). Prints the
// median ms of each path, measured alternately in one run.
//
//   bench_llama_ops [RUNS]      (threads: OMP_NUM_THREADS)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "tensor/random.h"

using namespace attend;

namespace {

double ms_since(std::chrono::steady_clock::time_point s) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
}

Tensor rms_composed(const Tensor& x, const Tensor& w) {
  return mul(div(x, sqrt(add(mean(mul(x, x), {-1}, true), 1e-5))), w);
}

Tensor swiglu_composed(const Tensor& x) {
  const int64_t H = x.size(-1) / 2;
  Tensor a = narrow(x, -1, 0, H), b = narrow(x, -1, H, H);
  return mul(div(a, add(exp(neg(a)), 1.0)), b);
}

// q and k of packed (B, T, D) turned pair by pair with cos/sin tables (constants).
Tensor rotary_composed(const Tensor& x, int64_t rotated, const Tensor& cs, const Tensor& sn) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  Tensor qk = reshape(narrow(x, 2, 0, rotated), {B, T, rotated / 2, 2});
  Tensor xe = select(qk, 3, 0), xo = select(qk, 3, 1);
  Tensor ye = sub(mul(xe, cs), mul(xo, sn)), yo = add(mul(xe, sn), mul(xo, cs));
  Tensor turned = reshape(stack({ye, yo}, 3), {B, T, rotated});
  return cat({turned, narrow(x, 2, rotated, D - rotated)}, 2);
}

// Median ms of forward + backward of f on fresh leaves of `inputs`, alternating with g.
void compare(const char* name, const std::vector<Tensor>& inputs,
             const std::function<Tensor(const std::vector<Tensor>&)>& fused,
             const std::function<Tensor(const std::vector<Tensor>&)>& composed, int runs) {
  std::vector<double> t[2];
  for (int r = 0; r < runs + 2; ++r)
    for (int path = 0; path < 2; ++path) {
      std::vector<Tensor> in;
      for (const Tensor& x : inputs) in.push_back(x.detach().requires_grad_());
      const auto s = std::chrono::steady_clock::now();
      Tensor y = path == 0 ? fused(in) : composed(in);
      sum(y).backward();
      if (r >= 2) t[path].push_back(ms_since(s));
    }
  for (auto& v : t) std::sort(v.begin(), v.end());
  const double a = t[0][t[0].size() / 2], b = t[1][t[1].size() / 2];
  std::printf("%-46s %10.3f %12.3f %8.2fx\n", name, a, b, b / a);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 20;
  std::printf("attend bench_llama_ops: threads %d, median of %d runs, forward + backward\n",
              omp_get_max_threads(), runs);
  std::printf("%-46s %10s %12s %9s\n", "op (shape)", "fused ms", "composed ms", "speed-up");
  struct Shape2 {
    const char* cfg;
    int64_t B, T, C, H, NH;
  };
  for (const Shape2& s : {Shape2{"D", 12, 64, 128, 352, 4}, Shape2{"E", 4, 256, 288, 768, 6}}) {
    Generator g(1);
    const int64_t HS = s.C / s.NH, D = 3 * s.C;
    char name[96];
    std::snprintf(name, sizeof name, "%s rms_norm (%lld,%lld,%lld)", s.cfg, (long long)s.B,
                  (long long)s.T, (long long)s.C);
    compare(name, {randn({s.B, s.T, s.C}, g), randn({s.C}, g)},
            [](const std::vector<Tensor>& x) { return rms_norm(x[0], x[1], 1e-5); },
            [](const std::vector<Tensor>& x) { return rms_composed(x[0], x[1]); }, runs);
    std::snprintf(name, sizeof name, "%s swiglu (%lld,%lld,2x%lld)", s.cfg, (long long)s.B,
                  (long long)s.T, (long long)s.H);
    compare(name, {randn({s.B, s.T, 2 * s.H}, g)},
            [](const std::vector<Tensor>& x) { return swiglu(x[0]); },
            [](const std::vector<Tensor>& x) { return swiglu_composed(x[0]); }, runs);
    // cos/sin tables of the composed path, (T, rotated/2), made once outside the timing.
    const int64_t rot = 2 * s.C;
    Tensor cs = empty({s.T, rot / 2}), sn = empty({s.T, rot / 2});
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t p = 0; p < rot / 2; ++p) {
        const int64_t i = (2 * p % HS) / 2;
        const double a = static_cast<double>(t) * std::pow(10000.0, -2.0 * i / HS);
        cs.set({t, p}, std::cos(a));
        sn.set({t, p}, std::sin(a));
      }
    std::snprintf(name, sizeof name, "%s rotary on q|k|v (%lld,%lld,%lld)", s.cfg, (long long)s.B,
                  (long long)s.T, (long long)D);
    compare(name, {randn({s.B, s.T, D}, g)},
            [&](const std::vector<Tensor>& x) { return rotary(x[0], HS, rot, 0, 10000.0); },
            [&](const std::vector<Tensor>& x) { return rotary_composed(x[0], rot, cs, sn); },
            runs);
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    const int64_t W = s.T / 4;
    std::snprintf(name, sizeof name, "%s attention window %lld vs full causal", s.cfg,
                  (long long)W);
    compare(name, {randn({s.B, s.T, D}, g)},
            [&](const std::vector<Tensor>& x) {
              return attention_qkv(x[0], s.NH, s.NH, scale, 0, DropoutStream{}, W);
            },
            [&](const std::vector<Tensor>& x) {
              return attention_qkv(x[0], s.NH, s.NH, scale, 0, DropoutStream{}, 0);
            },
            runs);
  }
  return 0;
}
