// The machine's read bandwidth, the roof a token's decoding runs under (issue #40): every
// weight is read once per token, so tokens/s <= bandwidth / bytes of weights. For working
// sets from L2's size to well past the last-level cache, at 1 and 2 threads (each thread
// sums its own contiguous half, as the decoding products split W), the best of several
// passes: GB/s read. A plain reduction the compiler vectorizes (64 independent lanes:
// four AVX-512 or eight AVX2 sums), no stores.
//
//   build/bench/bench_bandwidth [MAX_MB (default 1024)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

float sum_range(const float* p, size_t n) {
  float s[64] = {};
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 64; ++k) s[k] += p[i + k];
  float t = 0;
  for (float v : s) t += v;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  std::vector<float> buf(max_mb * (1u << 20) / 4, 1.0f);
  std::printf("read bandwidth, GB/s (best of the passes); %d cores\n", omp_get_num_procs());
  std::printf("%-10s %-10s %-10s\n", "MB", "1 thread", "2 threads");
  volatile float sink = 0;
  for (size_t kb = 256; kb <= max_mb * 1024; kb *= 2) {
    const size_t n = kb * 1024 / 4;
    double best[2] = {0, 0};
    for (int threads = 1; threads <= 2; ++threads) {
      const int passes = std::max<int>(3, static_cast<int>((size_t{1} << 32) / (n * 4)));
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        float total = 0;
        for (int p = 0; p < passes; ++p) {
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
          for (int t = 0; t < threads; ++t)
            total += sum_range(buf.data() + n * t / threads, n / threads);
        }
        sink = sink + total;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[threads - 1] = std::max(best[threads - 1], static_cast<double>(n) * 4 * passes / s / 1e9);
      }
    }
    std::printf("%-10.2f %-10.1f %-10.1f\n", static_cast<double>(kb) / 1024, best[0], best[1]);
  }
  return 0;
}
