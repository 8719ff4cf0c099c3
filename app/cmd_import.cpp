// `attend import`: weights in Hugging Face's layout (model.safetensors or shards,
// config.json) into a run folder with one checkpoint: GPT-2 (convert/gpt2_io.h), or a Llama
// or Mistral when config.json's model_type says so (convert/hf_llama_io.h); or a GGUF file
// (convert/gguf_io.h), told by its magic.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "tensor/error.h"
#include "convert/gguf_io.h"
#include "convert/gpt2_io.h"
#include "convert/hf_llama_io.h"
#include "convert/peft_io.h"
#include "train/model_io.h"

namespace attend::cli {

namespace {
struct ImportArgs : convert::ImportOptions {
  std::string out;      // the run folder to create
  std::string adapter;  // a PEFT LoRA adapter folder read onto the imported model
};
}  // namespace

void add_import(CLI::App& app, int& rc) {
  auto o = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import",
      "weights from Hugging Face's layout (GPT-2, Llama or Mistral: safetensors + config.json)");
  cmd->add_option("--from", o->from, "a folder with model.safetensors and config.json, the .safetensors file, or a "
                  ".gguf file")
      ->required();
  cmd->add_option("--config", o->config, "config.json, when it is not beside the weights");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "default: the folder's tokenizer.json (Hugging Face's or attend's), or GPT-2's "
                  "vocab.json + merges.txt, else gpt2 | char:PATH | hf:PATH | a saved tokenizer "
                  "folder");
  cmd->add_option("--out", o->out, "the run folder to create")->required();
  cmd->add_option("--adapter", o->adapter,
                  "a Hugging Face PEFT LoRA folder (adapter_config.json, "
                  "adapter_model.safetensors) read onto the imported model");
  cmd->callback([o, &rc] {
    std::error_code ec;
    const std::filesystem::path config =
        !o->config.empty() ? std::filesystem::path(o->config)
        : std::filesystem::is_directory(o->from, ec)
            ? std::filesystem::path(o->from) / "config.json"
            : std::filesystem::path(o->from).parent_path() / "config.json";
    ATTEND_CHECK(!o->out.empty(), "import: --out is required (the run folder to create)");
    convert::Imported m = convert::is_gguf_file(o->from)        ? convert::import_gguf(*o)
                          : convert::is_hf_llama_folder(config) ? convert::import_hf_llama(*o)
                                                                : convert::import_gpt2(*o);
    if (!o->adapter.empty()) {
      m.model = convert::import_peft(*m.model, o->adapter);
      m.source = (m.source.empty() ? std::filesystem::absolute(o->from).string() : m.source) +
                 " with the PEFT adapter " + std::filesystem::absolute(o->adapter).string();
    }
    const std::filesystem::path checkpoint =
        train::write_imported(o->out, *m.model, m.tokenizer->spec(),
                              m.source.empty() ? std::filesystem::absolute(o->from).string() : m.source);
    const nn::GPTConfig& c = m.model->config;
    std::printf(
        "imported %lld tensors: %lld layers, %lld heads, C %lld, T %lld, V %lld; "
        "tokenizer %s; checkpoint %s\n",
        static_cast<long long>(m.tensors), static_cast<long long>(c.n_layer),
        static_cast<long long>(c.n_head), static_cast<long long>(c.n_embd),
        static_cast<long long>(c.block_size), static_cast<long long>(c.vocab_size),
        m.tokenizer->spec().name.c_str(), checkpoint.c_str());
    rc = 0;
  });
}

}  // namespace attend::cli
