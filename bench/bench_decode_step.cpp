// A token's decoding step in one process (issue #40), variants alternated round by round so
// that the VM's drift from minute to minute (10-60% on the 2-core Zen 5) falls on all of them
// alike: GPT-2 124M with random weights in a weight format, infer::Decoder stepping TOKENS
// tokens from a one-token prompt, each round once per variant:
//   old     a region per parallel_for, the cache grown by doubling (before 2026-12-07 19:31)
//   sized   the cache sized once for the tokens to come (Note [The cache sized once])
//   team    one region a token (Note [One region for many loops])
//   both    sized and team: what sampling runs now
// Per variant, the median ms a token over the rounds, and the median of the rounds' own
// ratios first variant (old) / variant. The roof is measured in the same rounds: after each
// run, a read of 512 MB (past the last-level cache, as a token's weights) by the same threads
// (bench/read_bandwidth.h, plain and prefetched, the better), so each run's GB/s is held to
// the bandwidth of its own minute: "of roof" is the median of those fractions. The same logits in
// every variant (checked: the run stops otherwise).
//
// With a VARIANT, only that one: in a fresh process, as `attend sample` decodes, the cache's
// pages are first touched (a process's later rounds reuse pages the earlier ones freed).
//
//   build/bench/bench_decode_step [f32|bf16|q8_0 (default f32)] [TOKENS 2..1023 (default 128)]
//   [ROUNDS 1..1000 (default 9)] [VARIANT]      threads: OMP_NUM_THREADS (default all)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/read_bandwidth.h"
#include "infer/decoder.h"
#include "infer/decoding.h"
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/parallel.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace {

using namespace attend;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string format = argc > 1 ? argv[1] : "f32";
  const int64_t tokens = argc > 2 ? std::atoll(argv[2]) : 128;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 9;
  const std::string only = argc > 4 ? argv[4] : "";
  if ((format != "f32" && format != "bf16" && format != "q8_0") || tokens < 2 || tokens > 1023 ||
      rounds < 1 || rounds > 1000 ||
      (!only.empty() && only != "old" && only != "sized" && only != "team" && only != "both")) {
    std::fprintf(stderr,
                 "usage: bench_decode_step [f32|bf16|q8_0] [TOKENS 2..1023] [ROUNDS 1..1000] "
                 "[old|sized|team|both]\n");
    return 1;
  }
  kernel::set_gemm_precision(format == "bf16" ? kernel::GemmPrecision::bf16
                                              : kernel::GemmPrecision::f32);
  NoGradGuard no_grad;
  nn::GPT m(nn::gpt_preset("gpt2"), 1);
  m.eval();
  const infer::DecodingWeights decoding(
      m, format == "q8_0" ? std::optional(WeightFormat::q8_0) : std::nullopt);
  Generator g(2);
  const Tensor ids = randint({1, tokens + 1}, 0, m.config.vocab_size, g);
  std::vector<nn::KVCache> prompt;
  (void)m.forward(kernel::narrow(ids, 1, 0, 1), Tensor(), nullptr, &prompt);
  struct Variant {
    const char* name;
    bool sized, team;
    std::vector<double> ms, roof;  // a token's ms and the read GB/s after it, each round
  };
  std::vector<Variant> variants = {{"old", false, false, {}, {}},
                                   {"sized", true, false, {}, {}},
                                   {"team", false, true, {}, {}},
                                   {"both", true, true, {}, {}}};
  if (!only.empty())
    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                  [&](const Variant& v) { return v.name != only; }),
                   variants.end());
  const size_t read_n = (size_t{512} << 20) / sizeof(float);
  const Storage read_buffer(read_n * sizeof(float));
  float* const read_data = static_cast<float*>(read_buffer.data);
  std::fill(read_data, read_data + read_n, 1.0f);
  std::vector<float> first;  // the last token's logits of the first run: every run's must match
  std::printf("GPT-2 124M, %s weights (%lld bytes a token), %d thread(s), %lld tokens, %d rounds\n",
              format.c_str(), static_cast<long long>(decoding.bytes()), omp_get_max_threads(),
              static_cast<long long>(tokens), rounds);
  for (int r = 0; r < rounds; ++r)
    for (Variant& v : variants) {
      detail::set_teams(v.team);
      infer::Decoder d(m);
      const auto t0 = std::chrono::steady_clock::now();
      d.start(prompt, v.sized ? tokens : 0);
      const float* logits = nullptr;
      for (int64_t t = 1; t <= tokens; ++t) logits = d.step(ids.data<int64_t>()[t]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      v.ms.push_back(1e3 * s / static_cast<double>(tokens));
      const int threads = omp_get_max_threads();
      v.roof.push_back(std::max(bench::read_gbs(read_data, read_n, threads, false, 4),
                                bench::read_gbs(read_data, read_n, threads, true, 4)));
      const size_t V = static_cast<size_t>(m.config.vocab_size);
      if (first.empty()) first.assign(logits, logits + V);
      if (std::memcmp(first.data(), logits, V * sizeof(float)) != 0) {
        std::fprintf(stderr, "bench_decode_step: %s gave other logits\n", v.name);
        return 1;
      }
    }
  detail::set_teams(true);
  std::printf("%-8s %9s %9s %7s %7s %8s %15s   %s\n", "variant", "ms/token", "tokens/s", "GB/s",
              "roof", "of roof", "first / variant", "ms/token each round");
  const double bytes = static_cast<double>(decoding.bytes());
  for (const Variant& v : variants) {
    std::vector<double> ratio, of_roof;
    for (int r = 0; r < rounds; ++r) {
      ratio.push_back(variants[0].ms[r] / v.ms[r]);
      of_roof.push_back(bytes / (v.ms[r] * 1e-3) / 1e9 / v.roof[r]);
    }
    std::printf("%-8s %9.3f %9.1f %7.1f %7.1f %7.0f%% %14.3fx  ", v.name, median(v.ms),
                1e3 / median(v.ms), bytes / (median(v.ms) * 1e-3) / 1e9, median(v.roof),
                100 * median(of_roof), median(ratio));
    for (double x : v.ms) std::printf(" %.2f", x);
    std::printf("\n");
  }
}
