// `attend sample`: text from a checkpoint, streamed to stdout as it is drawn.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <chrono>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "train/model_io.h"
#include "infer/sample.h"

namespace attend::cli {

namespace {

struct SampleArgs {
  std::string checkpoint, prompt_file, precision, weights;
  infer::SampleOptions options;
};

int run_sample(const SampleArgs& a, bool prompt_given) {
  infer::SampleOptions o = a.options;
  ATTEND_CHECK(a.prompt_file.empty() || !prompt_given,
               "sample: give --prompt or --prompt_file, not both");
  if (!a.prompt_file.empty()) o.prompt = read_file(a.prompt_file);
  ATTEND_CHECK(o.num_samples >= 1 && o.num_samples <= 1000000,
               "sample: --num_samples must be in [1, 10^6], got ", o.num_samples);
  train::LoadedModel m = train::load_model(a.checkpoint);
  const kernel::PrecisionScope precision = use_precision(
      weights_precision(a.weights, a.precision, m.config.precision), "--precision");
  if (!a.weights.empty()) o.weights = parse_weight_format(a.weights, "--weights");
  m.tokenizer->encode(o.prompt);  // a prompt the tokenizer cannot encode fails before any output
  const auto t0 = std::chrono::steady_clock::now();
  int64_t drawn = 0;
  infer::SampleTiming timing;
  for (int64_t k = 0; k < o.num_samples; ++k) {
    if (k > 0) std::fputs("\n---------------\n", stdout);  // nanoGPT's separator
    std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
    drawn += static_cast<int64_t>(infer::sample(
        *m.model, *m.tokenizer, o,
        [](const std::string& piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        static_cast<uint32_t>(k), &timing).size());
  }
  std::printf("\n");
  std::fflush(stdout);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Debug level: the timing differs run to run (attend --log-level debug sample ...).
  spdlog::debug("sampled {} tokens in {:.3f} s: {:.1f} tokens/s (prompt included in the time)",
               drawn, s, s > 0 ? static_cast<double>(drawn) / s : 0.0);
  // The last sample's: its prompt's forward, and its new tokens after the first draw.
  spdlog::debug("prompt {} tokens in {:.4f} s: {:.1f} tokens/s; generated {} tokens in {:.4f} "
                "s: {:.1f} tokens/s; {} bytes of weights a token",
                timing.prompt_tokens, timing.prompt_seconds,
                timing.prompt_seconds > 0 ? timing.prompt_tokens / timing.prompt_seconds : 0.0,
                timing.new_tokens, timing.new_seconds,
                timing.new_seconds > 0 ? (timing.new_tokens - 1) / timing.new_seconds : 0.0,
                timing.weight_bytes);
  return 0;
}

}  // namespace

void add_sample(CLI::App& app, int& rc) {
  auto a = std::make_shared<SampleArgs>();
  infer::SampleOptions& o = a->options;
  CLI::App* cmd =
      app.add_subcommand("sample", "generate text from a checkpoint, streamed as it is drawn");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  CLI::Option* prompt =
      cmd->add_option("--prompt", o.prompt, "text to continue")->capture_default_str();
  cmd->add_option(flag_names("prompt_file"), a->prompt_file, "read the prompt from this file");
  cmd->add_option(flag_names("num_samples"), o.num_samples,
                  "samples to draw, each with its own random numbers")
      ->capture_default_str();
  cmd->add_option("--precision", a->precision,
                  "f32 | bf16 matrix products (default: the checkpoint's training precision)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  add_weights_option(cmd, a->weights);
  cmd->add_option("--stop", o.stop, "end a sample once its text contains this (kept)");
  cmd->add_option(flag_names("max_new_tokens"), o.max_new_tokens, "tokens to generate")
      ->capture_default_str();
  add_draw_options(cmd, o);
  cmd->callback([a, prompt, &rc] { rc = run_sample(*a, prompt->count() > 0); });
}

void add_draw_options(CLI::App* cmd, infer::SampleOptions& o) {
  cmd->add_option("--temperature", o.temperature, "softmax temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option(flag_names("top_k"), o.top_k, "keep the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option(flag_names("top_p"), o.top_p, "keep the smallest set reaching this probability")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "same seed, same text")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 63))
      ->capture_default_str();
}

}  // namespace attend::cli
