// The decoding products' speed against their roof (issue #40): y = x W^T for one row of x
// (a token) with W (N, 768) in the format sampling reads it in (f32 or bf16 panels, Q8_0
// blocks), for working sets of W from L2's size to past the last-level cache, at 1 and 2
// threads: the GB/s of W read and the multiply-adds per second, the best of several passes.
// Run it beside bench_bandwidth: where a product is well under the read bandwidth of the
// same working set, the kernel's arithmetic (or its threads) is what waits, not memory.
//
//   build/bench/bench_decode_kernels [MAX_MB (default 256)] [FORMATS (default f32,bf16,q8_0)]
//                                    [K (default 768, GPT-2's width; 3072 its MLP's)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensor/kernels/gemm.h"
#include "tensor/quant.h"
#include "tensor/tensor.h"

namespace {

using namespace attend;

// bytes of W a format stores for n weights
double bytes_per_weight(const std::string& f) {
  return f == "f32" ? 4.0 : f == "bf16" ? 2.0 : 34.0 / 32.0;
}

}  // namespace

int main(int argc, char** argv) {
  const double max_mb = argc > 1 ? std::strtod(argv[1], nullptr) : 256;
  const std::string formats = argc > 2 ? argv[2] : "f32,bf16,q8_0";
  const int64_t K = argc > 3 ? std::strtoll(argv[3], nullptr, 10) : 768;
  if (K < 32 || K % 32 != 0 || K > (1 << 20)) {
    std::fprintf(stderr, "bench_decode_kernels: K %s: a multiple of 32 from 32 to 2^20\n", argv[3]);
    return 1;
  }
  std::printf("decoding products, one row of x, K %lld, kernel %s; GB/s of W read (best of the "
              "passes) and G multiply-adds/s\n",
              static_cast<long long>(K), kernel::gemm_kernel_name(kernel::gemm_kernel()));
  std::printf("%-6s %-10s %-22s %-22s\n", "format", "W MB", "1 thread", "2 threads");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(K);
  for (float& v : x) v = normal(rng);
  for (const std::string f : {"f32", "bf16", "q8_0"}) {
    if (formats.find(f) == std::string::npos) continue;
    for (double mb = 0.5; mb <= max_mb; mb *= 2) {
      const int64_t N =
          std::max<int64_t>(64, static_cast<int64_t>(mb * 1048576 / (K * bytes_per_weight(f))));
      std::vector<float> w(static_cast<size_t>(N * K));
      for (float& v : w) v = normal(rng) * 0.05f;
      // W in a Storage, as a model's weights are held (past 2 MB: huge pages, Storage's
      // mapping), so the TLB sees what decoding sees
      std::shared_ptr<Storage> held;
      std::function<void(float*)> product;
      if (f == "f32") {
        held = std::make_shared<Storage>(w.size() * sizeof(float));
        auto* p32 = static_cast<float*>(held->data);
        kernel::to_decode_panels(w.data(), N, K, p32);
        product = [&, p32](float* y) {
          kernel::gemm_f32_panels(1, N, K, {x.data(), K, 1}, p32, y, N, true);
        };
      } else if (f == "bf16") {
        held = std::make_shared<Storage>(
            static_cast<size_t>(kernel::decode_panels_bf16_words(N, K)) * sizeof(uint32_t));
        auto* p16 = static_cast<uint32_t*>(held->data);
        kernel::to_decode_panels_bf16(w.data(), N, K, p16);
        product = [&, p16](float* y) {
          kernel::gemm_bf16_panels(1, N, K, {x.data(), K, 1}, p16, y, N, true);
        };
      } else {
        std::vector<uint8_t> blocks(static_cast<size_t>(N * K / 32 * 34));
        quant::quantize_q8_0(w.data(), N * K, blocks.data());
        held = std::make_shared<Storage>(blocks.size());
        auto* q = static_cast<uint8_t*>(held->data);
        quant::q8_0_as_read(blocks.data(), N, K, q);
        product = [&, q](float* y) { quant::gemm_q8_0(1, N, K, x.data(), K, q, y, N, true); };
      }
      std::vector<float>().swap(w);
      std::vector<float> y(static_cast<size_t>(N));
      const double bytes = static_cast<double>(N * K) * bytes_per_weight(f);
      std::printf("%-6s %-10.1f", f.c_str(), bytes / 1048576);
      for (int threads = 1; threads <= 2; ++threads) {
        omp_set_num_threads(threads);
        const int reps = std::max(3, static_cast<int>(2e8 / bytes));
        double best = 1e30;
        for (int pass = 0; pass < 5; ++pass) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) product(y.data());
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                                        .count() /
                                    reps);
        }
        std::printf(" %7.1f GB/s %6.1f G/s", bytes / best / 1e9,
                    static_cast<double>(N * K) / best / 1e9);
      }
      std::printf("\n");
    }
  }
  return 0;
}
