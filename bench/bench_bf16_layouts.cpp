// bf16 against f32 products on GPT-2's shapes, with B as a Linear's forward reads it (W^T,
// through strides) and row-major (backward's dX = dY W, attention's V): the best of N runs
// of each, alternating nothing (run it several times, and beside its previous build, on a
// noisy machine). What packing costs shows here: the micro-kernels are the same speed in
// both precisions on a CPU without AVX512_BF16 (the emulation), so the ratio is what the
// bf16 panels' packing and rounding cost on top.
// Then one token's products (M 1, sampling's) against a decoding copy of the weight
// (infer::DecodingWeights): f32 W^T, the same rounded to bf16 as it is read, and W^T kept as
// bf16 bits (kernel::gemm_bf16_weight): ms and the weight's bytes read per second.
//   bench_bf16_layouts [REPS]      (default 9; threads from OMP_NUM_THREADS)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"

using namespace attend;
namespace k = attend::kernel;

namespace {

template <typename F>
double best_ms_of(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  if (reps < 1) {
    std::fprintf(stderr, "bench_bf16_layouts: REPS must be >= 1, got '%s'\n", argv[1]);
    return 2;
  }
  std::printf("attend bench_bf16_layouts: threads %d, bf16 %s, best of %d\n", omp_get_max_threads(),
              k::gemm_has_native_bf16() ? "native" : "emulated", reps);
  std::printf("%-12s %-5s %10s %10s %12s\n", "product", "B", "f32 ms", "bf16 ms", "bf16 speed");
  struct Shape {
    int64_t M, K, N;
    const char* name;
  };
  const Shape shapes[] = {{2048, 768, 2304, "qkv"},
                          {2048, 3072, 768, "c_proj"},
                          {256, 768, 50304, "lm_head"},
                          {768, 128, 384, "small qkv"}};
  Generator g(1);
  for (const Shape& s : shapes) {
    const Tensor a = randn({s.M, s.K}, g), w = randn({s.N, s.K}, g);
    const Tensor row_major = k::contiguous(k::transpose(w, 0, 1));
    for (int layout = 0; layout < 2; ++layout) {
      const Tensor b = layout == 0 ? k::transpose(w, 0, 1) : row_major;
      const k::GemmPrecision before = k::set_gemm_precision(k::GemmPrecision::f32);
      const double f = best_ms_of(reps, [&] { k::matmul(a, b); });
      k::set_gemm_precision(k::GemmPrecision::bf16);
      const double h = best_ms_of(reps, [&] { k::matmul(a, b); });
      k::set_gemm_precision(before);
      std::printf("%-12s %-5s %10.3f %10.3f %11.2fx\n", s.name, layout == 0 ? "W^T" : "rows", f, h,
                  f / h);
    }
  }

  // One token: (1, K) @ W^T (K, N) row-major, as sampling multiplies by its decoding copies.
  std::printf("\n%-12s %14s %14s %14s   (ms, and GB/s of weight read)\n", "one token", "f32",
              "bf16 rounded", "bf16 bits");
  const Shape tokens[] = {
      {1, 768, 2304, "qkv"}, {1, 3072, 768, "c_proj"}, {1, 768, 50304, "lm_head"}};
  for (const Shape& s : tokens) {
    const Tensor a = randn({1, s.K}, g), bt = randn({s.K, s.N}, g);
    std::vector<uint32_t> bits(static_cast<size_t>(k::decode_panels_bf16_words(s.N, s.K)));
    const Tensor w = k::contiguous(k::transpose(bt, 0, 1));  // W (N, K): its decoding panels
    k::to_decode_panels_bf16(w.data<float>(), s.N, s.K, bits.data());
    std::vector<float> c(static_cast<size_t>(s.N));
    const k::MatrixRef<float> A{a.data<float>(), s.K, 1}, B{bt.data<float>(), s.N, 1};
    const k::GemmPrecision before = k::set_gemm_precision(k::GemmPrecision::f32);
    const double f =
        best_ms_of(reps, [&] { k::gemm<float>(1, s.N, s.K, A, B, c.data(), s.N, true); });
    k::set_gemm_precision(k::GemmPrecision::bf16);
    const double r =
        best_ms_of(reps, [&] { k::gemm<float>(1, s.N, s.K, A, B, c.data(), s.N, true); });
    double h = 0;
    if (k::gemm_panels_apply(1, s.N, s.K))
      h = best_ms_of(reps, [&] {
        k::gemm_bf16_panels(1, s.N, s.K, A, bits.data(), c.data(), s.N, true);
      });
    k::set_gemm_precision(before);
    const double bytes = static_cast<double>(s.K * s.N);
    std::printf("%-12s %7.3f %5.1f  %7.3f %5.1f  %7.3f %5.1f\n", s.name, f, 4 * bytes / f / 1e6, r,
                4 * bytes / r / 1e6, h, h > 0 ? 2 * bytes / h / 1e6 : 0.0);
  }
}
