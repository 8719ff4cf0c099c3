// Attention for one query, as a token's decoding step runs it (issue #40): every layer of a
// model's shape, each over its cache of t keys, through kernel::attention_one_query_f32. Two
// layouts of the cache: the decoder's (a block per layer's keys and one per its values, a
// row per position) and a position's row holding every layer's keys and values (the layout
// tried first), so the cost of reading rows far apart shows; under bf16 products a third,
// the decoder's: its layer blocks as bf16 bits (attention_one_query_bf16). Per layer: microseconds,
// G multiply-adds/s (scores and values), GB/s of keys and values read; the best of the passes. The
// cache is in a Storage (huge pages past 2 MB), as the decoder's is. Threads as the kernel takes
// them (OMP_NUM_THREADS=1 for one): over the heads, for long rows of keys only.
//
//   build/bench/bench_decode_attention [MAX_KEYS (default 1024)] [f32|bf16 (the products'
//   precision, as `sample --weights` sets it; default f32)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/tensor.h"

namespace {

using namespace attend;

struct ModelShape {
  const char* name;
  int64_t layers, heads, kv_heads, head_size;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_keys = argc > 1 ? std::atoll(argv[1]) : 1024;
  const bool bf16 = argc > 2 && std::string(argv[2]) == "bf16";
  kernel::set_gemm_precision(bf16 ? kernel::GemmPrecision::bf16 : kernel::GemmPrecision::f32);
  std::printf("attention for one query, every layer; %d thread(s), %s products\n",
              omp_get_max_threads(), bf16 ? "bf16" : "f32");
  std::printf("%-10s %-14s %6s %10s %8s %8s\n", "shape", "cache", "keys", "us/layer", "GMAC/s",
              "GB/s");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const ModelShape s :
       {ModelShape{"stories15m", 6, 6, 6, 48}, ModelShape{"gpt2", 12, 12, 12, 64}}) {
    const int64_t kv = s.kv_heads * s.head_size, C = s.heads * s.head_size;
    std::vector<float> q(static_cast<size_t>(C)), out(q.size());
    for (float& v : q) v = normal(rng);
    for (int64_t t = 16; t <= max_keys; t *= 4) {
      const Tensor cache = empty({2 * s.layers * t * kv});  // both layouts' size
      float* base = cache.data<float>();
      for (int64_t i = 0; i < cache.numel(); ++i) base[i] = normal(rng);
      std::vector<uint16_t> bits;
      if (bf16) {
        bits.resize(static_cast<size_t>(cache.numel()));
        kernel::to_bf16_bits(base, bits.data(), cache.numel());
      }
      for (const int layout : {0, 1, 2}) {
        const bool blocks = layout != 1, in_bits = layout == 2;
        if (in_bits && !bf16) continue;
        double best = 1e30;
        for (int pass = 0; pass < 30; ++pass) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t l = 0; l < s.layers; ++l) {
            // blocks: keys of layer l at block 2l, values at 2l + 1, rows kv apart;
            // position rows: [k_0 | v_0 | k_1 | ...], rows 2 L kv apart
            const int64_t k0 = blocks ? 2 * l * t * kv : 2 * l * kv, v0 = blocks ? t * kv : kv;
            const int64_t row = blocks ? kv : 2 * s.layers * kv;
            if (in_bits)
              kernel::attention_one_query_bf16(q.data(), s.heads, s.head_size, &bits[k0],
                                               &bits[k0 + v0], s.kv_heads, t, s.head_size, row,
                                               0.125, 0, out.data());
            else
              kernel::attention_one_query_f32(q.data(), s.heads, s.head_size, base + k0,
                                              base + k0 + v0, s.kv_heads, t, s.head_size, row,
                                              0.125, 0, out.data());
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() /
              static_cast<double>(s.layers);
          best = std::min(best, us);
        }
        const double macs = 2.0 * static_cast<double>(s.heads * t * s.head_size);
        const double bytes = 2.0 * static_cast<double>(t * kv) * (in_bits ? 2 : 4);
        std::printf("%-10s %-14s %6lld %10.2f %8.2f %8.1f\n", s.name,
                    in_bits  ? "bf16 blocks"
                    : blocks ? "layer blocks"
                             : "position rows",
                    static_cast<long long>(t), best, macs / best / 1e3, bytes / best / 1e3);
      }
    }
  }
}
