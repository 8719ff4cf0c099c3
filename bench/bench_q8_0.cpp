// The Q8_0 product's speed against its roof (issue #40): y = x W^T for one row of x (a
// token) with W (N, 768) as Q8_0 blocks, for working sets of W from L2's size to past the
// last-level cache, at 1 and 2 threads: the GB/s of W read (34 bytes per 32 weights) and
// the multiply-adds per second, the best of several passes. Run it beside bench_bandwidth:
// where the product is well under the read bandwidth of the same working set, the kernel's
// arithmetic is what waits, not memory.
//
//   build/bench/bench_q8_0 [MAX_MB (default 256)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tensor/kernels/gemm.h"
#include "tensor/quant.h"

int main(int argc, char** argv) {
  using namespace attend;
  const double max_mb = argc > 1 ? std::strtod(argv[1], nullptr) : 256;
  const int64_t K = 768;
  std::printf("Q8_0 product, one row of x, K %lld, kernel %s; GB/s of W read (best of the "
              "passes) and G multiply-adds/s\n",
              static_cast<long long>(K), kernel::gemm_kernel_name(kernel::gemm_kernel()));
  std::printf("%-10s %-22s %-22s\n", "W MB", "1 thread", "2 threads");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(K);
  for (float& v : x) v = normal(rng);
  for (double mb = 0.5; mb <= max_mb; mb *= 2) {
    const int64_t N = std::max<int64_t>(64, static_cast<int64_t>(mb * 1048576 / (K / 32 * 34)));
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = normal(rng) * 0.05f;
    std::vector<uint8_t> q(static_cast<size_t>(N * K / 32 * 34));
    quant::quantize_q8_0(w.data(), N * K, q.data());
    std::vector<float> y(static_cast<size_t>(N));
    const double bytes = static_cast<double>(q.size());
    std::printf("%-10.1f", bytes / 1048576);
    for (int threads = 1; threads <= 2; ++threads) {
      omp_set_num_threads(threads);
      const int reps = std::max(3, static_cast<int>(2e8 / bytes));
      double best = 1e30;
      for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
          quant::gemm_q8_0(1, N, K, x.data(), K, q.data(), y.data(), N, true);
        best = std::min(best,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                            reps);
      }
      std::printf(" %7.1f GB/s %6.1f G/s", bytes / best / 1e9,
                  static_cast<double>(N * K) / best / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
