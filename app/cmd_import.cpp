// `attend import`: weights in Hugging Face's layout (model.safetensors or shards,
// config.json) into a run folder with one checkpoint: GPT-2 (train/gpt2_io.h), or a Llama
// or Mistral when config.json's model_type says so (train/hf_llama_io.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "train/gpt2_io.h"
#include "train/hf_llama_io.h"

namespace attend::cli {

void add_import(CLI::App& app, int& rc) {
  auto o = std::make_shared<train::ImportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "import",
      "weights from Hugging Face's layout (GPT-2, Llama or Mistral: safetensors + config.json)");
  cmd->add_option("--from", o->from, "a folder with model.safetensors and config.json, or the file")
      ->required();
  cmd->add_option("--config", o->config, "config.json, when it is not beside the weights");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "default: the folder's tokenizer.json (Hugging Face's or attend's), or GPT-2's "
                  "vocab.json + merges.txt, else gpt2 | char:PATH | hf:PATH | a saved tokenizer "
                  "folder");
  cmd->add_option("--out", o->out, "the run folder to create")->required();
  cmd->callback([o, &rc] {
    std::error_code ec;
    const std::filesystem::path config =
        !o->config.empty() ? std::filesystem::path(o->config)
        : std::filesystem::is_directory(o->from, ec)
            ? std::filesystem::path(o->from) / "config.json"
            : std::filesystem::path(o->from).parent_path() / "config.json";
    const train::ImportResult r = train::is_hf_llama_folder(config) ? train::import_hf_llama(*o)
                                                                    : train::import_gpt2(*o);
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
