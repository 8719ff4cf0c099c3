// Training-step speed: ms per step and tokens/s of train::train_step (the trainer's own
// step: micro-steps, backward, clipping, AdamW) for a few model sizes, medians over
// several steps after warm-up. Prints each config. Data: a random token file made here.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"
#include "tensor/threads.h"
#include "train/config.h"
#include "train/progress.h"
#include "train/step.h"

using namespace attend;
namespace fs = std::filesystem;

// Training FLOPs of one step (PaLM's count, as nanoGPT's estimate_mfu): per token
// 6 x (the weights of the matmuls: the blocks' attention and MLP matrices, 12 L C^2 for
// GPT-2's, and the LM head V C) + 12 L T C for attention.
double step_flops(const nn::GPTConfig& c, int64_t tokens) {
  const nn::ParameterCount p = nn::count_parameters(c);
  const double L = static_cast<double>(c.n_layer), C = static_cast<double>(c.n_embd),
               T = static_cast<double>(c.block_size), V = static_cast<double>(c.vocab_size);
  const double matrices = static_cast<double>(p.attention_matrices()) +
                          L * static_cast<double>(p.mlp_gate + p.mlp_fc + p.mlp_proj);
  return static_cast<double>(tokens) * (6.0 * (matrices + V * C) + 12.0 * L * T * C);
}

nn::GPTConfig gpt(int64_t V, int64_t T, int64_t L, int64_t H, int64_t KVH, int64_t C,
                  double dropout) {
  nn::GPTConfig c;
  c.vocab_size = V, c.block_size = T, c.n_layer = L, c.n_head = H, c.n_kv_head = KVH;
  c.n_embd = C, c.dropout = dropout;
  return c;
}

// stories15m (llama2.c's smallest) with a 4096-token vocabulary, as llama2.c trains its
// own tokenizers.
nn::GPTConfig stories_4096() {
  nn::GPTConfig c = nn::gpt_preset("stories15m");
  c.vocab_size = 4096;
  return c;
}

int main(int argc, char** argv) {
  // bench_train [STEPS] [A|B|C|D|E|all]: A, B, C are issue #14's configs, D and E issue
  // #24's Llamas, shared with bench/torch_twin.py; "all" (default) also runs the others.
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const std::string only = argc > 2 ? argv[2] : "all";
  // "auto": the trainer's ThreadTuner picks the thread count (probing every 4 steps).
  const bool tune = argc > 3 && std::string(argv[3]) == "auto";
  // ATTEND_PRECISION=bf16: the matrix products in bf16 (as --precision bf16).
  const char* precision = std::getenv("ATTEND_PRECISION");
  const attend::kernel::PrecisionScope scope(
      attend::kernel::parse_gemm_precision(precision ? precision : "f32", "ATTEND_PRECISION"));
  struct Case {
    const char* name;
    nn::GPTConfig cfg;
    int64_t B;
  };
  const Case cases[] = {
      {"C", gpt(65, 64, 2, 4, 4, 128, 0.0), 16},
      {"A", gpt(65, 256, 6, 6, 6, 384, 0.2), 8},
      {"B", gpt(50304, 64, 12, 12, 12, 768, 0.0), 4},
      {"D", nn::gpt_preset("llama-char"), 12},
      {"E", stories_4096(), 4},
      {"cpu-char (nanoGPT CPU recipe)", nn::gpt_preset("cpu-char"), 12},
      {"cpu-char, GQA kv_head 2", gpt(65, 64, 4, 4, 2, 128, 0.0), 12},
      {"llama-char, GQA kv_head 2", [] {
         nn::GPTConfig c = nn::gpt_preset("llama-char");
         c.n_kv_head = 2;
         return c;
       }(), 12},
      {"shakespeare-char baby GPT, B 4", gpt(65, 256, 6, 6, 6, 384, 0.2), 4},
      {"gpt2-vocab tiny: V 50257, 4 layers, C 128", gpt(50257, 64, 4, 4, 4, 128, 0.0), 8},
  };
  std::printf("attend bench_train: threads %d, %d timed steps after 2 warm-up, median, %s products\n",
              omp_get_max_threads(), steps, precision ? precision : "f32");
  // peak MB: the most tensor storage held at once during the timed steps (weights,
  // gradients, AdamW's state, the activations kept for backward), tensor/tensor.h's
  // storage_stats; not what the allocator caches or the process's RSS.
  std::printf("%-44s %12s %8s %8s %10s %12s %10s %9s\n", "config", "params", "B", "T", "ms/step",
              "tokens/s", "GFLOP/s", "peak MB");
  const fs::path dir = fs::temp_directory_path() / ("attend_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const Case& c : cases) {
    const bool named = std::string(c.name).size() == 1;
    if (only == "all" ? named : only != c.name) continue;
    Generator g(2);
    const std::vector<int64_t> ids = randint({100000}, 0, c.cfg.vocab_size, g).to_vector<int64_t>();
    const fs::path file = dir / "tokens.bin";
    data::write_token_file(file, data::TokenIds(ids.begin(), ids.end()), c.cfg.vocab_size);
    data::TokenDataset ds(file, c.cfg.block_size);
    train::TrainConfig tc;
    tc.model = c.cfg;
    tc.batch_size = c.B;
    nn::GPT model(c.cfg, 1);
    model.train();
    auto opt = train::make_optimizer(tc, model);
    std::vector<double> ms;
    ThreadTuner tuner(omp_get_max_threads(), 4);
    for (int s = 0; s < steps + 2; ++s) {
      if (s == 2) reset_storage_peak();
      const auto t0 = std::chrono::steady_clock::now();
      if (tune) tuner.begin_step();
      train::train_step(model, *opt, ds, tc, s, 1e-3);
      const double dt =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (tune) tuner.end_step(dt / 1000.0);
      if (s >= 2) ms.push_back(dt);
    }
    if (tune)
      std::printf("(thread tuner: %d threads at the end, %d changes)\n", tuner.current(),
                  tuner.switches());
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("%-44s %12lld %8lld %8lld %10.1f %12.0f %10.1f %9.1f\n", c.name,
                static_cast<long long>(model.num_parameters()), static_cast<long long>(c.B),
                static_cast<long long>(c.cfg.block_size), med,
                static_cast<double>(c.B * c.cfg.block_size) / (med / 1000.0),
                step_flops(c.cfg, c.B * c.cfg.block_size) / (med / 1000.0) / 1e9,
                static_cast<double>(storage_stats().peak) / 1e6);
    std::fflush(stdout);
  }
  fs::remove_all(dir);
  return 0;
}
