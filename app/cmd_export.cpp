// `attend export`: a checkpoint as Hugging Face's GPT-2 layout (model.safetensors,
// config.json, the tokenizer's files), loadable by GPT2LMHeadModel.from_pretrained.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/gpt2_io.h"

namespace attend::cli {

namespace {
struct ExportArgs {
  std::string checkpoint, out;
};
}  // namespace

void add_export(CLI::App& app, int& rc) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "a checkpoint as Hugging Face's GPT-2 layout (model.safetensors + config.json)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint file, or a run folder (its newest)")
      ->required();
  cmd->add_option("--out", a->out, "the folder to write")->required();
  cmd->callback([a, &rc] {
    const train::ExportResult r = train::export_gpt2(a->checkpoint, a->out);
    std::printf("wrote %lld tensors to %s (model.safetensors, config.json, tokenizer)\n",
                static_cast<long long>(r.tensors), r.dir.c_str());
    rc = 0;
  });
}

}  // namespace attend::cli
