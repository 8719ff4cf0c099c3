// A token's decoding step in one process (issue #40), variants alternated round by round so
// that the VM's drift from minute to minute (10-60% on the 2-core Zen 5) falls on all of them
// alike: GPT-2 124M with random weights, infer::Decoder stepping TOKENS tokens from a
// one-token prompt, each round once per variant. In one weight format, four ways:
//   old     a region per parallel_for, the cache grown by doubling (before 2026-12-07 19:31)
//   sized   the cache sized once for the tokens to come (Note [The cache sized once])
//   team    one region a token (Note [One region for many loops])
//   both    sized and team: what sampling runs now
// or (`formats`) the three weight formats as sampling runs them now, a model each (the same
// weights), each round's formats seconds apart: the goals' ratios bf16 / f32 and q8_0 / f32
// from the same minutes. Per variant, the median ms a token over the rounds, and the median
// of the rounds' own ratios first variant (old, or f32) / variant. The roof is measured in
// the same rounds: after each run, a read of as many bytes as the variant's weights (as
// bench_decode.sh takes the roof at the weights' size) by the same threads (bench/read_bandwidth.h,
// plain and prefetched, the better), so each run's GB/s is held to the bandwidth of its own minute:
// "of roof" is the median of those fractions. Every round gives the same logits, and the four ways
// of a format the same as each other (checked: the run stops otherwise).
//
// With a VARIANT, only that one: in a fresh process, as `attend sample` decodes, the cache's
// pages are first touched (a process's later rounds reuse pages the earlier ones freed).
//
//   build/bench/bench_decode_step [f32|bf16|q8_0 (default f32)] [TOKENS 2..1023 (default 128)]
//   [ROUNDS 1..1000 (default 9)] [old|sized|team|both]
//   build/bench/bench_decode_step formats [TOKENS] [ROUNDS] [f32|bf16|q8_0]
//   threads: OMP_NUM_THREADS (default all)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
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
#include "tensor/stored_weight.h"
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
  const std::string mode = argc > 1 ? argv[1] : "f32";
  const int64_t tokens = argc > 2 ? std::atoll(argv[2]) : 128;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 9;
  const std::string only = argc > 4 ? argv[4] : "";
  const bool formats = mode == "formats";
  const std::vector<std::string> ways = {"old", "sized", "team", "both"},
                                 format_names = {"f32", "bf16", "q8_0"};
  auto known = [](const std::vector<std::string>& names, const std::string& s) {
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  if ((!formats && !known(format_names, mode)) || tokens < 2 || tokens > 1023 || rounds < 1 ||
      rounds > 1000 || (!only.empty() && !known(formats ? format_names : ways, only))) {
    std::fprintf(stderr,
                 "usage: bench_decode_step [f32|bf16|q8_0 [TOKENS 2..1023] [ROUNDS 1..1000] "
                 "[old|sized|team|both]]\n"
                 "       bench_decode_step formats [TOKENS] [ROUNDS] [f32|bf16|q8_0]\n");
    return 1;
  }
  NoGradGuard no_grad;
  // A model per format that runs (the same weights: the same seed), with its decoding weights.
  struct Held {
    std::unique_ptr<nn::GPT> model;
    std::unique_ptr<infer::DecodingWeights> weights;
  };
  std::map<std::string, Held> held;
  auto precision_of = [](const std::string& f) {
    return f == "bf16" ? kernel::GemmPrecision::bf16 : kernel::GemmPrecision::f32;
  };
  struct Variant {
    std::string name, format;
    bool sized, team;
    std::vector<double> ms, roof;  // a token's ms and the read GB/s after it, each round
    std::vector<float> logits;     // the last token's, first round: every round's must match
  };
  std::vector<Variant> variants;
  if (formats) {
    for (const std::string& f : format_names) variants.push_back({f, f, true, true, {}, {}, {}});
  } else {
    for (const std::string& w : ways)
      variants.push_back(
          {w, mode, w == "sized" || w == "both", w == "team" || w == "both", {}, {}, {}});
  }
  if (!only.empty())
    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                  [&](const Variant& v) { return v.name != only; }),
                   variants.end());
  for (const Variant& v : variants) {
    Held& h = held[v.format];
    if (h.model) continue;
    h.model = std::make_unique<nn::GPT>(nn::gpt_preset("gpt2"), 1);
    h.model->eval();
    h.weights =
        std::make_unique<infer::DecodingWeights>(*h.model, parse_weight_format(v.format, "format"));
  }
  const int64_t V = held.begin()->second.model->config.vocab_size;
  Generator g(2);
  const Tensor ids = randint({1, tokens + 1}, 0, V, g);
  std::map<std::string, std::vector<nn::KVCache>> prompt;  // a prompt's caches per format
  for (auto& [f, h] : held) {
    const kernel::PrecisionScope use(precision_of(f));
    (void)h.model->forward(kernel::narrow(ids, 1, 0, 1), Tensor(), nullptr, &prompt[f]);
  }
  const size_t read_n = (size_t{512} << 20) / sizeof(float);
  const Storage read_buffer(read_n * sizeof(float));
  float* const read_data = static_cast<float*>(read_buffer.data);
  std::fill(read_data, read_data + read_n, 1.0f);
  std::printf("GPT-2 124M, %s, %d thread(s), %lld tokens, %d rounds\n",
              formats ? "f32, bf16 and q8_0 weights" : (mode + " weights").c_str(),
              omp_get_max_threads(), static_cast<long long>(tokens), rounds);
  for (int r = 0; r < rounds; ++r)
    for (Variant& v : variants) {
      const kernel::PrecisionScope use(precision_of(v.format));
      detail::set_teams(v.team);
      infer::Decoder d(*held[v.format].model);
      const auto t0 = std::chrono::steady_clock::now();
      d.start(prompt[v.format], v.sized ? tokens : 0);
      const float* logits = nullptr;
      for (int64_t t = 1; t <= tokens; ++t) logits = d.step(ids.data<int64_t>()[t]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      v.ms.push_back(1e3 * s / static_cast<double>(tokens));
      const int threads = omp_get_max_threads();
      const size_t n = std::min(read_n, static_cast<size_t>(held[v.format].weights->bytes()) / 4);
      v.roof.push_back(std::max(bench::read_gbs(read_data, n, threads, false, 4),
                                bench::read_gbs(read_data, n, threads, true, 4)));
      // Every round the same bits; the ways of one format the same bits as each other.
      std::vector<float>& want = formats ? v.logits : variants[0].logits;
      if (want.empty()) want.assign(logits, logits + V);
      if (std::memcmp(want.data(), logits, static_cast<size_t>(V) * sizeof(float)) != 0) {
        std::fprintf(stderr, "bench_decode_step: %s gave other logits in round %d\n",
                     v.name.c_str(), r + 1);
        return 1;
      }
    }
  detail::set_teams(true);
  std::printf("%-8s %9s %9s %7s %7s %8s %15s   %s\n", "variant", "ms/token", "tokens/s", "GB/s",
              "roof", "of roof", "first / variant", "ms/token each round");
  for (const Variant& v : variants) {
    const double bytes = static_cast<double>(held[v.format].weights->bytes());
    std::vector<double> ratio, of_roof;
    for (int r = 0; r < rounds; ++r) {
      ratio.push_back(variants[0].ms[r] / v.ms[r]);
      of_roof.push_back(bytes / (v.ms[r] * 1e-3) / 1e9 / v.roof[r]);
    }
    std::printf("%-8s %9.3f %9.1f %7.1f %7.1f %7.0f%% %14.3fx  ", v.name.c_str(), median(v.ms),
                1e3 / median(v.ms), bytes / (median(v.ms) * 1e-3) / 1e9, median(v.roof),
                100 * median(of_roof), median(ratio));
    for (double x : v.ms) std::printf(" %.2f", x);
    std::printf("\n");
  }
}
