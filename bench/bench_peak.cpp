// The machine's FMA peak, measured: every thread runs 12 independent chains of fused
// multiply-adds from registers, no memory traffic, at the widest vector width this build
// and CPU have: 16-wide f32 (AVX-512) where the CPU has it, else 8-wide (AVX2/FMA). Zen 5 and
// recent Intel server cores run 512-bit FMAs at twice the 256-bit rate, so a 256-bit
// figure would understate the peak (and overstate MFU) by 2x there; the 256-bit rate is
// printed beside it. GFLOP/s counts 2 per lane per FMA. The MFU figures of
// bench/bench_vs_torch.sh divide by the first number. Where the CPU has AVX512_BF16, the
// same chains of vdpbf16ps give the bf16 peak (the MFU of --precision bf16 divides by it);
// where it has AMX, chains of TDPBF16PS give the AMX bf16 peak (which no kernel uses yet).
//   bench_peak [THREADS]      (default: OpenMP's)
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
namespace {

// 12 accumulators hide the FMA latency (4 cycles, 2 pipes); the empty asm keeps them in
// registers and the loop from being folded. Returns a lane so nothing is optimised away.
#define ATTEND_PEAK_CHAINS(VEC, SET1, FMA, STORE, LANES)                                      \
  VEC c0 = SET1(seed), c1 = SET1(seed + 1), c2 = SET1(seed + 2), c3 = SET1(seed + 3);         \
  VEC c4 = SET1(seed + 4), c5 = SET1(seed + 5), c6 = SET1(seed + 6), c7 = SET1(seed + 7);     \
  VEC c8 = SET1(seed + 8), c9 = SET1(seed + 9), c10 = SET1(seed + 10), c11 = SET1(seed + 11); \
  const VEC a = SET1(0.999999f), b = SET1(1e-7f);                                             \
  for (int64_t k = 0; k < iters; ++k) {                                                       \
    c0 = FMA(c0, a, b), c1 = FMA(c1, a, b), c2 = FMA(c2, a, b), c3 = FMA(c3, a, b);           \
    c4 = FMA(c4, a, b), c5 = FMA(c5, a, b), c6 = FMA(c6, a, b), c7 = FMA(c7, a, b);           \
    c8 = FMA(c8, a, b), c9 = FMA(c9, a, b), c10 = FMA(c10, a, b), c11 = FMA(c11, a, b);       \
    __asm__ volatile(""                                                                       \
                     : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6),  \
                       "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));                   \
  }                                                                                           \
  float out[LANES];                                                                           \
  STORE(out, c0);                                                                             \
  return out[0] + out[LANES - 1];

float chains256(int64_t iters, float seed) {
  ATTEND_PEAK_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps, 8)
}

#if defined(__AVX512F__)
float chains512(int64_t iters, float seed) {
  ATTEND_PEAK_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps, 16)
}
#endif

#if defined(__AVX512BF16__)
// vdpbf16ps: per f32 lane two bf16 products added to the accumulator (4 FLOP per lane).
inline __m512 dp_bf16(__m512 c, __m512 a, __m512 b) {
  return _mm512_dpbf16_ps(c, (__m512bh)_mm512_castps_si512(a), (__m512bh)_mm512_castps_si512(b));
}
// f32 accumulators from set1; a and b as two equal bf16 halves per lane (a pair of 1.0 and
// of 2^-20: the chains grow by 2^-19 a step and never overflow).
inline __m512 set1_acc_or_pair(float x) {
  if (x == 0.999999f) return _mm512_castsi512_ps(_mm512_set1_epi32(0x3f803f80));  // 1.0, 1.0
  if (x == 1e-7f) return _mm512_castsi512_ps(_mm512_set1_epi32(0x35803580));     // 2^-20 twice
  return _mm512_set1_ps(x);
}
// Twice the chains: vdpbf16ps's latency is longer than the FMA's, and 12 chains reach only
// about 92% of its rate on Zen 5 (16 reach all of it; measured 2026-12-07). So 24 chains,
// iters / 2 steps: the same 12 x iters instructions the caller counts.
float chains_bf16(int64_t iters, float seed) {
  __m512 c[24];
  for (int i = 0; i < 24; ++i) c[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = set1_acc_or_pair(0.999999f), b = set1_acc_or_pair(1e-7f);
  for (int64_t k = 0; k < iters / 2; ++k) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) c[i] = dp_bf16(c[i], a, b);
  }
  // Every chain feeds the result, so none is optimised away (and nothing is stored a step).
  __m512 s = c[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, c[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#define ATTEND_PEAK_AMX 1
// AMX (Intel Xeon 4th generation and later): TDPBF16PS multiplies a 16 x 32 bf16 tile by a
// 32 x 16 one into 16 x 16 f32 sums, 16384 FLOP an instruction. Four independent
// accumulator tiles, A and B loaded once; the kernel must first grant the process the
// tile state (arch_prctl ARCH_REQ_XCOMP_PERM), and each thread configures its tiles.
bool amx_permitted() {
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}
float chains_amx(int64_t iters, float) {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int t = 0; t < 6; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ab[16 * 32];
  std::fill(ab, ab + 16 * 32, uint16_t{0x3580});  // 2^-20: the sums stay small
  alignas(64) float c[16 * 16] = {};
  _tile_zero(0);  // tile numbers are immediates: no loop
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  for (int64_t k = 0; k < iters; ++k) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

// Median and best of 5 runs on every thread, GFLOP/s.
struct Rate {
  double median, best;
};
// lanes 32: the bf16 dot-product chains (16 f32 lanes, two products each); lanes 8192: AMX
// (4 tiles of 16384 FLOP a step, counted as 12 chains of 8192 lanes x 2 over 3 steps).
Rate measure(int lanes, int threads, float& sink) {
  const int64_t iters = lanes == 8192 ? 400'000'000 / 1024 : 400'000'000 / 12 / lanes;
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
    {
      const auto seed = static_cast<float>(omp_get_thread_num());
#if defined(ATTEND_PEAK_AMX)
      if (lanes == 8192) sink += chains_amx(iters, seed);
      else
#endif
#if defined(__AVX512BF16__)
      sink += lanes == 32   ? chains_bf16(iters, seed)
              : lanes == 16 ? chains512(iters, seed)
                            : chains256(iters, seed);
#elif defined(__AVX512F__)
      sink += lanes == 16 ? chains512(iters, seed) : chains256(iters, seed);
#else
      sink += chains256(iters, seed);
#endif
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flop = lanes == 8192 ? 4.0 * 16384 : 12.0 * lanes * 2;  // a loop step
    rates.push_back(static_cast<double>(threads) * static_cast<double>(iters) * flop / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return {rates[2], rates[4]};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) omp_set_num_threads(std::atoi(argv[1]));
  const int threads = omp_get_max_threads();
  float sink = 0;
  const Rate r256 = measure(8, threads, sink);
  Rate peak = r256;
  const char* width = "AVX2, 256-bit";
#if defined(__AVX512F__)
  if (__builtin_cpu_supports("avx512f")) {
    peak = measure(16, threads, sink);
    width = "AVX-512, 512-bit";
  }
#endif
  std::printf("FMA peak: %.1f GFLOP/s on %d threads (median of 5; best %.1f) [%s; 256-bit: %.1f]\n",
              peak.median, threads, peak.best, width, r256.median);
#if defined(__AVX512BF16__)
  if (__builtin_cpu_supports("avx512bf16")) {
    const Rate bf16 = measure(32, threads, sink);
    std::printf("bf16 peak: %.1f GFLOP/s on %d threads (median of 5; best %.1f) [AVX512_BF16 "
                "vdpbf16ps, %.2fx the f32 FMA peak]\n",
                bf16.median, threads, bf16.best, bf16.median / peak.median);
  }
#endif
#if defined(ATTEND_PEAK_AMX)
  if (__builtin_cpu_supports("amx-bf16") && amx_permitted()) {
    const Rate amx = measure(8192, threads, sink);
    std::printf("AMX bf16 peak: %.1f GFLOP/s on %d threads (median of 5; best %.1f) [TDPBF16PS, "
                "%.2fx the f32 FMA peak; attend's kernels do not use AMX yet]\n",
                amx.median, threads, amx.best, amx.median / peak.median);
  }
#endif
  if (sink != sink) std::printf("(the chains overflowed)\n");  // uses sink
  return 0;
}
#else
int main() {
  std::printf("bench_peak: built without AVX2/FMA (-DATTEND_NATIVE=ON on an AVX2 machine)\n");
  return 1;
}
#endif
