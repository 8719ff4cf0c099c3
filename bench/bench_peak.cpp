// The machine's FMA peak, measured: every thread runs independent chains of 8-wide f32
// fused multiply-adds (AVX2/FMA) from registers, no memory traffic. GFLOP/s counts 2 per
// lane per FMA. The MFU figures of bench/bench_vs_torch.sh divide by this number.
//   bench_peak [THREADS]      (default: OpenMP's)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
namespace {

// 12 independent accumulators hide the FMA latency (4-5 cycles, 2 ports).
float fma_chains(int64_t iters, float seed) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];  // used, so the loop is not optimised away
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) omp_set_num_threads(std::atoi(argv[1]));
  const int threads = omp_get_max_threads();
  const int64_t iters = 200'000'000 / 12;
  std::vector<double> rates;
  float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    sink += fma_chains(iters, static_cast<float>(omp_get_thread_num()));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(threads) * static_cast<double>(iters) * 12 * 8 * 2 / s /
                    1e9);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("FMA peak: %.1f GFLOP/s on %d threads (median of 5; best %.1f) [%g]\n", rates[2],
              threads, rates[4], static_cast<double>(sink) * 0);
  return 0;
}
#else
int main() {
  std::printf("bench_peak: built without AVX2/FMA (-DATTEND_NATIVE=ON on an AVX2 machine)\n");
  return 1;
}
#endif
