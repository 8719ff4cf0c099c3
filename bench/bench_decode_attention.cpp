// Attention for one query, as a token's decoding step runs it (issue #40): every layer of a
// model's shape, each over its cache of t keys, through kernel::attention_one_query. Layouts
// of the cache, a block per layer's keys and one per its values, the values a row per
// position (heads side by side): the keys as rows too (the decoder's before 2026-12-07
// 17:30), or as columns (each head's HS rows of the keys' i-th elements, `capacity` = 2t
// apart as the decoder's grow: its layout now); under bf16 products also the columns as
// bf16 bits (the decoder's under bf16). Per layer: microseconds, G multiply-adds/s (scores
// and values), GB/s of keys and values read; the best of the passes. `cold`: a 64 MB read
// between passes puts the cache out of L2 and L3, as a token's weights do while decoding.
// The cache is in a Storage (huge pages past 2 MB), as the decoder's is. Threads as the
// kernel takes them (OMP_NUM_THREADS=1 for one): over the heads, for long rows of keys only.
//
//   build/bench/bench_decode_attention [MAX_KEYS (default 1024)] [f32|bf16 (the products'
//   precision, as `sample --weights` sets it; default f32)] [warm|cold (default warm)]
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
  const bool cold = argc > 3 && std::string(argv[3]) == "cold";
  if (max_keys < 16 || max_keys > (int64_t{1} << 16) ||
      (argc > 2 && !bf16 && std::string(argv[2]) != "f32") ||
      (argc > 3 && !cold && std::string(argv[3]) != "warm")) {
    std::fprintf(stderr,
                 "usage: bench_decode_attention [MAX_KEYS 16..65536] [f32|bf16] [warm|cold]\n");
    return 1;
  }
  kernel::set_gemm_precision(bf16 ? kernel::GemmPrecision::bf16 : kernel::GemmPrecision::f32);
  std::printf("attention for one query, every layer; %d thread(s), %s products, cache %s\n",
              omp_get_max_threads(), bf16 ? "bf16" : "f32", cold ? "cold" : "warm");
  std::printf("%-10s %-14s %6s %10s %8s %8s\n", "shape", "cache", "keys", "us/layer", "GMAC/s",
              "GB/s");
  std::vector<float> evict(cold ? (int64_t{64} << 20) / 4 : 0, 1.0f);
  volatile float sink = 0;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const ModelShape s :
       {ModelShape{"stories15m", 6, 6, 6, 48}, ModelShape{"gpt2", 12, 12, 12, 64}}) {
    const int64_t kv = s.kv_heads * s.head_size, C = s.heads * s.head_size;
    std::vector<float> q(static_cast<size_t>(C)), out(q.size());
    for (float& v : q) v = normal(rng);
    for (int64_t t = 16; t <= max_keys; t *= 4) {
      const int64_t cap = 2 * t, block = cap * kv;  // a layer's keys (or values)
      const Tensor cache = empty({2 * s.layers * block});
      float* base = cache.data<float>();
      for (int64_t i = 0; i < cache.numel(); ++i) base[i] = normal(rng);
      const Tensor bits_cache = bf16 ? empty({cache.numel()}, DType::BF16) : Tensor();
      uint16_t* bits = bf16 ? bits_cache.data<uint16_t>() : nullptr;
      if (bf16) kernel::to_bf16_bits(base, bits, cache.numel());
      for (const int layout : {0, 1, 2}) {  // key rows, key columns, key columns in bits
        if (layout == 2 && !bf16) continue;
        double best = 1e30;
        for (int pass = 0; pass < (cold ? 10 : 30); ++pass) {
          if (cold) {
            float acc = 0;
            for (size_t i = 0; i < evict.size(); i += 16) acc += evict[i];
            sink = sink + acc;
          }
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t l = 0; l < s.layers; ++l) {
            const int64_t k0 = 2 * l * block, v0 = k0 + block;
            const int64_t kh = layout == 0 ? s.head_size : s.head_size * cap,
                          kk = layout == 0 ? kv : 1, kd = layout == 0 ? 1 : cap;
            if (layout == 2)
              kernel::attention_one_query(
                  q.data(), s.heads, s.head_size, s.kv_heads, t,
                  kernel::OneQueryKV<uint16_t>{bits + k0, bits + v0, kh, kk, kd, s.head_size, kv},
                  0.125, 0, out.data());
            else
              kernel::attention_one_query(
                  q.data(), s.heads, s.head_size, s.kv_heads, t,
                  kernel::OneQueryKV<float>{base + k0, base + v0, kh, kk, kd, s.head_size, kv},
                  0.125, 0, out.data());
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() /
              static_cast<double>(s.layers);
          best = std::min(best, us);
        }
        const double macs = 2.0 * static_cast<double>(s.heads * t * s.head_size);
        const double bytes = 2.0 * static_cast<double>(t * kv) * (layout == 2 ? 2 : 4);
        std::printf("%-10s %-14s %6lld %10.2f %8.2f %8.1f\n", s.name,
                    layout == 0   ? "key rows"
                    : layout == 1 ? "key columns"
                                  : "columns bf16",
                    static_cast<long long>(t), best, macs / best / 1e3, bytes / best / 1e3);
      }
    }
  }
}
