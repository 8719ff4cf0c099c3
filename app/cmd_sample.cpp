// `attend sample`: text from a checkpoint, streamed to stdout as it is drawn.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/model_io.h"
#include "train/sample.h"

namespace attend::cli {

namespace {

struct SampleArgs {
  std::string checkpoint;
  train::SampleOptions options;
};

int run_sample(const SampleArgs& a) {
  train::LoadedModel m = train::load_model(a.checkpoint);
  const train::SampleOptions& o = a.options;
  m.tokenizer->encode(o.prompt);  // a prompt the tokenizer cannot encode fails before any output
  std::fputs(o.prompt.c_str(), stdout);
  train::sample(*m.model, *m.tokenizer, o, [](const std::string& piece) {
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  return 0;
}

}  // namespace

void add_sample(CLI::App& app, int& rc) {
  auto a = std::make_shared<SampleArgs>();
  train::SampleOptions& o = a->options;
  CLI::App* cmd =
      app.add_subcommand("sample", "generate text from a checkpoint, streamed as it is drawn");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  cmd->add_option("--prompt", o.prompt, "text to continue")->capture_default_str();
  cmd->add_option(flag_names("max_new_tokens"), o.max_new_tokens, "tokens to generate")
      ->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "softmax temperature; 0 is greedy")
      ->capture_default_str();
  cmd->add_option(flag_names("top_k"), o.top_k, "keep the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option(flag_names("top_p"), o.top_p, "keep the smallest set reaching this probability")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "same seed, same text")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 63))
      ->capture_default_str();
  cmd->callback([a, &rc] { rc = run_sample(*a); });
}

}  // namespace attend::cli
