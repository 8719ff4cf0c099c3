// Read bandwidth as the decoding roof measures it (bench_bandwidth, bench_decode_step): each
// thread sums its own contiguous part of a buffer, as the decoding products split W. A plain
// reduction the compiler vectorizes (64 independent lanes: four AVX-512 or eight AVX2 sums),
// no stores; or the same with software prefetch 8 KB ahead (as the decoding products do).
#pragma once

#include <omp.h>

#include <chrono>
#include <cstddef>

namespace attend::bench {

template <bool prefetch>
float sum_range(const float* p, size_t n) {
  float s[64] = {};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if constexpr (prefetch) {
      __builtin_prefetch(p + i + 2048);
      __builtin_prefetch(p + i + 2048 + 16);
      __builtin_prefetch(p + i + 2048 + 32);
      __builtin_prefetch(p + i + 2048 + 48);
    }
    for (int k = 0; k < 64; ++k) s[k] += p[i + k];
  }
  float t = 0;
  for (float v : s) t += v;
  return t;
}

// GB/s of `passes` reads of buf's n floats by `threads` threads, each over its own part.
inline double read_gbs(const float* buf, size_t n, int threads, bool prefetch, int passes) {
  static volatile float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0;
  for (int p = 0; p < passes; ++p) {
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const float* part = buf + n * t / threads;
      total += prefetch ? sum_range<true>(part, n / threads) : sum_range<false>(part, n / threads);
    }
  }
  sink = sink + total;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) * 4 * passes / s / 1e9;
}

}  // namespace attend::bench
