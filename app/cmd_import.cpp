// `attend import`: GPT-2 weights in Hugging Face's layout (model.safetensors, config.json)
// into a run folder with one checkpoint (train/gpt2_io.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/gpt2_io.h"

namespace attend::cli {

void add_import(CLI::App& app, int& rc) {
  auto o = std::make_shared<train::ImportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "import", "GPT-2 weights from Hugging Face's layout (model.safetensors + config.json)");
  cmd->add_option("--from", o->from, "a folder with model.safetensors and config.json, or the file")
      ->required();
  cmd->add_option("--config", o->config, "config.json, when it is not beside the weights");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "default: the folder's vocab.json + merges.txt, else gpt2 | char:PATH | a "
                  "saved tokenizer folder");
  cmd->add_option("--out", o->out, "the run folder to create")->required();
  cmd->callback([o, &rc] {
    const train::ImportResult r = train::import_gpt2(*o);
    std::printf(
        "imported %lld tensors: %lld layers, %lld heads, C %lld, T %lld, V %lld; "
        "tokenizer %s; checkpoint %s\n",
        static_cast<long long>(r.tensors), static_cast<long long>(r.model.n_layer),
        static_cast<long long>(r.model.n_head), static_cast<long long>(r.model.n_embd),
        static_cast<long long>(r.model.block_size), static_cast<long long>(r.model.vocab_size),
        r.tokenizer.c_str(), r.checkpoint.c_str());
    rc = 0;
  });
}

}  // namespace attend::cli
