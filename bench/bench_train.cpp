// Training-step speed: ms per step (forward, backward, clipping, AdamW) and tokens/s for
// a few model sizes, medians over several steps after warm-up. Prints each config.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "nn/gpt.h"
#include "tensor/random.h"
#include "train/optim.h"

using namespace attend;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  struct Case {
    const char* name;
    nn::GPTConfig cfg;
    int64_t B;
  };
  const Case cases[] = {
      {"cpu-char (nanoGPT CPU recipe)", nn::gpt_preset("cpu-char"), 12},
      {"cpu-char, GQA kv_head 2", {65, 64, 4, 4, 2, 128, 0.0, true}, 12},
      {"shakespeare-char baby GPT, B 4", {65, 256, 6, 6, 6, 384, 0.2, true}, 4},
      {"gpt2-vocab tiny: V 50257, 4 layers, C 128", {50257, 64, 4, 4, 4, 128, 0.0, true}, 8},
  };
  std::printf("attend bench_train: threads %d, %d timed steps after 2 warm-up, median\n",
              omp_get_max_threads(), steps);
  std::printf("%-44s %12s %8s %8s %10s %12s\n", "config", "params", "B", "T", "ms/step",
              "tokens/s");
  for (const Case& c : cases) {
    nn::GPT model(c.cfg, 1);
    model.train();
    const auto named = model.named_parameters();
    std::vector<Tensor> params;
    for (auto& [_, p] : named) params.push_back(p);
    train::AdamW opt(named, {0.9, 0.99, 1e-8, 0.1});
    Generator g(2);
    std::vector<double> ms;
    for (int s = 0; s < steps + 2; ++s) {
      Tensor x = randint({c.B, c.cfg.block_size}, 0, c.cfg.vocab_size, g);
      Tensor y = randint({c.B, c.cfg.block_size}, 0, c.cfg.vocab_size, g);
      const auto t0 = std::chrono::steady_clock::now();
      for (auto& p : params) p.zero_grad();
      model.dropout_context->step = s;
      model.forward(x, y).loss.backward();
      train::clip_grad_norm(params, 1.0);
      {
        NoGradGuard ng;
        opt.step(1e-3);
      }
      const double dt =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= 2) ms.push_back(dt);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("%-44s %12lld %8lld %8lld %10.1f %12.0f\n", c.name,
                static_cast<long long>(model.num_parameters()), static_cast<long long>(c.B),
                static_cast<long long>(c.cfg.block_size), med,
                static_cast<double>(c.B * c.cfg.block_size) / (med / 1000.0));
  }
  return 0;
}
