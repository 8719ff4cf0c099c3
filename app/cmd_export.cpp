// `attend export`: a checkpoint in Hugging Face's layout, loadable by from_pretrained: a
// GPT-2 as GPT2LMHeadModel's (convert/gpt2_io.h), a Llama or Mistral as LlamaForCausalLM's or
// MistralForCausalLM's (convert/hf_llama_io.h): model.safetensors (or shards and an index),
// config.json and the tokenizer's files; or, with --format llama2c, a Llama as llama2.c's
// model.bin and tokenizer.bin (convert/llama2c_io.h); or, with --format gguf, one GGUF file
// that llama.cpp runs (convert/gguf_io.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/validators.h"
#include "tensor/error.h"
#include "train/config.h"
#include "convert/gguf_io.h"
#include "convert/gpt2_io.h"
#include "convert/hf_llama_io.h"
#include "convert/llama2c_io.h"
#include "convert/peft_io.h"
#include "nn/lora.h"
#include "train/model_io.h"
#include "train/run_dir.h"

namespace attend::cli {

namespace {
struct ExportArgs {
  std::string checkpoint, out, dtype = "f32", format = "hf";
  int64_t max_shard_mb = 0;
  bool merge = false;
};
}  // namespace

void add_export(CLI::App& app, int& rc) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "a checkpoint in Hugging Face's layout (GPT-2, Llama or Mistral: safetensors + config.json)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint file, or a run folder (its newest)")
      ->required();
  cmd->add_option("--out", a->out, "the folder to write (gguf: the file)")->required();
  cmd->add_option("--format", a->format,
                  "hf: Hugging Face's layout; llama2c: a Llama as llama2.c's model.bin and "
                  "tokenizer.bin; gguf: one GGUF file for llama.cpp (GPT-2, Llama, Mistral); "
                  "peft: a LoRA checkpoint's adapters as Hugging Face PEFT's "
                  "adapter_model.safetensors and adapter_config.json")
      ->check(CLI::IsMember({"hf", "llama2c", "gguf", "peft"}));
  cmd->add_option("--dtype", a->dtype,
                  "hf: a Llama's tensors as f32, bf16 or f16 (GPT-2: f32); gguf: the matrices as "
                  "f32, f16, bf16 or q8_0")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0"}));
  cmd->add_option("--max_shard_mb,--max-shard-mb", a->max_shard_mb,
                  "a Llama: shards of at most this many MiB with model.safetensors.index.json "
                  "(0: one file)")
      ->check(non_negative_int());
  cmd->add_flag("--merge", a->merge,
               "a LoRA checkpoint: write the base with its adapters merged in (W + alpha/R B A), "
               "a plain model in any --format");
  cmd->callback([a, &rc] {
    const train::LoadedModel loaded = train::load_model(a->checkpoint);
    const train::TrainConfig& c = loaded.config;
    const std::string name = loaded.checkpoint.string();
    if (a->format == "peft") {
      ATTEND_CHECK(!a->merge && a->dtype == "f32" && a->max_shard_mb == 0,
                   "export --format peft: the adapters alone, in f32 (no --merge, --dtype or "
                   "--max_shard_mb)");
      const convert::ExportResult r =
          convert::export_peft({*loaded.model, *loaded.tokenizer, name}, a->out,
                               c.init_from.empty() ? name : c.init_from);
      std::printf("wrote %lld tensors to %s (PEFT: adapter_model.safetensors, "
                  "adapter_config.json)\n",
                  static_cast<long long>(r.tensors), r.dir.c_str());
      rc = 0;
      return;
    }
    ATTEND_CHECK(c.model.lora_rank == 0 || a->merge, "export: ", name, " holds LoRA adapters (rank ",
                 c.model.lora_rank, " on ", c.model.lora_targets,
                 "); --merge writes the model with them merged in, --format peft the adapters");
    ATTEND_CHECK(c.model.lora_rank > 0 || !a->merge, "export --merge: ", name,
                 " has no LoRA adapters to merge");
    const std::unique_ptr<nn::GPT> merged = a->merge ? nn::merge_lora(*loaded.model) : nullptr;
    const convert::ExportSource m{merged ? *merged : *loaded.model, *loaded.tokenizer, name};
    convert::ExportResult r;
    if (a->format == "gguf") {
      ATTEND_CHECK(a->max_shard_mb == 0, "export --format gguf: one file (no --max_shard_mb)");
      r = convert::export_gguf(m, {a->out, a->dtype});
      std::printf("wrote %lld tensors to %s (GGUF, %s)\n", static_cast<long long>(r.tensors),
                  r.dir.c_str(), a->dtype.c_str());
      rc = 0;
      return;
    }
    ATTEND_CHECK(a->dtype != "q8_0", "export: --dtype q8_0 is for --format gguf");
    if (a->format == "llama2c") {
      ATTEND_CHECK(a->dtype == "f32" && a->max_shard_mb == 0,
                   "export --format llama2c: llama2.c's model.bin is one file of f32 (no --dtype "
                   "or --max_shard_mb)");
      r = convert::export_llama2c(m, a->out);
      std::printf("wrote %lld tensors to %s (llama2.c: model.bin, tokenizer.bin)\n",
                  static_cast<long long>(r.tensors), r.dir.c_str());
      rc = 0;
      return;
    }
    if (m.model.config.is_llama()) {
      ATTEND_CHECK(a->max_shard_mb <= (int64_t{1} << 30), "export: --max_shard_mb ",
                   a->max_shard_mb, " is too large");
      r = convert::export_hf_llama(m, {a->out, a->dtype, a->max_shard_mb << 20});
    } else {
      ATTEND_CHECK(a->dtype == "f32", "export: --dtype ", a->dtype,
                   ": GPT-2's export writes f32");
      ATTEND_CHECK(a->max_shard_mb == 0, "export: --max_shard_mb: GPT-2's export writes one file");
      r = convert::export_gpt2(m, a->out);
    }
    std::printf("wrote %lld tensors to %s (safetensors, config.json, tokenizer)\n",
                static_cast<long long>(r.tensors), r.dir.c_str());
    rc = 0;
  });
}

}  // namespace attend::cli
