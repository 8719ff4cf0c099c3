// GEMM throughput: the blocked kernel against the naive triple loop, f32 and f64, on the
// shapes a small GPT's training step uses. Prints the configuration, then for each shape
// the median over several runs (ms and GFLOP/s) and the blocked/naive speed ratio
// measured in the same run.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"

using namespace attend;

namespace {

template <typename F>
double median_ms(F f, int runs) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < runs; ++i) {
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  std::printf("attend bench_matmul: threads %d, micro-kernel %s, median of 7 runs (naive: 3)\n",
              omp_get_max_threads(), kernel::gemm_kernel_name(kernel::gemm_kernel()));
  std::printf("%-6s %-22s %10s %10s %10s %10s %8s\n", "dtype", "M x K x N", "ms", "GFLOP/s",
              "naive ms", "naive GF/s", "speedup");
  struct Case {
    int64_t M, K, N;
    const char* what;
  };
  const Case cases[] = {
      {768, 128, 384, "qkv: (B*T=768, C=128) @ (C, 3C)"},
      {768, 512, 128, "mlp c_proj: (768, 4C) @ (4C, C)"},
      {768, 128, 65, "lm_head: (768, C) @ (C, V=65)"},
      {512, 512, 512, "square 512"},
      {1024, 1024, 1024, "square 1024"},
  };
  Generator g(0);
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Case& c : cases) {
      Tensor a = randn({c.M, c.K}, g, dt), b = randn({c.K, c.N}, g, dt);
      const double flop = 2.0 * c.M * c.N * c.K;
      double fast = median_ms([&] { kernel::matmul(a, b); }, 7);
      double naive = median_ms([&] { kernel::matmul_naive(a, b); }, 3);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld", static_cast<long>(c.M),
                    static_cast<long>(c.K), static_cast<long>(c.N));
      std::printf("%-6s %-22s %10.3f %10.1f %10.2f %10.2f %7.1fx   %s\n", dtype_name(dt), shape,
                  fast, flop / fast / 1e6, naive, flop / naive / 1e6, naive / fast, c.what);
    }
  }
  // bf16 products (set_gemm_precision(bf16)): the same f32 tensors, operands rounded to bf16
  // as they are packed, against the f32 product measured beside it.
  std::printf("\nbf16 products (%s), against f32 on the same operands\n",
              kernel::gemm_has_native_bf16() ? "AVX512_BF16" : "emulated: no AVX512_BF16");
  std::printf("%-22s %10s %10s %10s %10s %8s\n", "M x K x N", "f32 ms", "GFLOP/s", "bf16 ms",
              "GFLOP/s", "speedup");
  const Case big[] = {{2048, 768, 2304, "GPT-2 qkv, B*T 2048"}, {2048, 3072, 768, "GPT-2 c_proj"},
                      {256, 768, 50304, "GPT-2 lm_head, B*T 256"}};
  for (const Case* set : {cases, big}) {
    const size_t n = set == cases ? std::size(cases) : std::size(big);
    for (size_t i = 0; i < n; ++i) {
      const Case& c = set[i];
      Tensor a = randn({c.M, c.K}, g), b = randn({c.K, c.N}, g);
      const double flop = 2.0 * c.M * c.N * c.K;
      const double f32 = median_ms([&] { kernel::matmul(a, b); }, 7);
      kernel::set_gemm_precision(kernel::GemmPrecision::bf16);
      const double bf16 = median_ms([&] { kernel::matmul(a, b); }, 7);
      kernel::set_gemm_precision(kernel::GemmPrecision::f32);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%ldx%ldx%ld", static_cast<long>(c.M),
                    static_cast<long>(c.K), static_cast<long>(c.N));
      std::printf("%-22s %10.3f %10.1f %10.3f %10.1f %7.2fx   %s\n", shape, f32, flop / f32 / 1e6,
                  bf16, flop / bf16 / 1e6, f32 / bf16, c.what);
    }
  }
  return 0;
}
