// GPT-2 weights in and out, in Hugging Face's layout: a folder with model.safetensors
// (io/safetensors.h) and config.json, as `GPT2LMHeadModel.save_pretrained` writes and
// `from_pretrained` reads.
//
// Names: HF's are ours (nanoGPT kept them), with or without the "transformer." prefix;
// lm_head.weight is tied to wte and not stored; the buffers attn.bias and attn.masked_bias
// are ignored. Layout: HF's Conv1D stores c_attn, c_proj and c_fc weights as (in, out),
// ours Linear (out, in): they are transposed both ways (exactly, so export -> import is
// bit-identical). config.json: n_layer, n_head, n_embd, n_positions (block_size),
// vocab_size; activation_function must be gelu_new and layer_norm_epsilon 1e-5 (GPT-2's),
// n_inner null or 4 n_embd. Only MHA with biases maps onto GPT-2: export refuses GQA, MQA
// and bias-free models, saying why.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "data/tokenizer.h"
#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct ImportOptions {
  std::string from;       // a folder (model.safetensors, config.json) or a .safetensors file
  std::string config;     // config.json, when not beside the file
  std::string tokenizer;  // default: the folder's vocab.json + merges.txt, else gpt2
  std::string out;        // the run folder to create
};
struct ImportResult {
  std::filesystem::path checkpoint;
  nn::GPTConfig model;
  std::string tokenizer;
  int64_t tensors = 0;
};
// Writes OUT/ckpt_00000000.h5: the weights, a fresh AdamW state, the tokenizer; `sample`,
// `eval`, `attention`, `summary` and `train --init_from` then work on it.
ImportResult import_gpt2(const ImportOptions& options);

// RUN/ckpt_00000000.h5 for an imported model (GPT-2's or a Llama): a fresh AdamW state,
// step 0, in a new run folder staged and moved into place whole (--out must be empty).
std::filesystem::path write_imported(const std::string& out, const nn::GPT& model,
                                     const data::TokenizerSpec& tokenizer);

struct ExportResult {
  std::filesystem::path dir;
  int64_t tensors = 0;
};
// Writes DIR/model.safetensors, DIR/config.json and the tokenizer's files (a BPE tokenizer
// as vocab.json + merges.txt, HF's names for encoder.json + vocab.bpe).
ExportResult export_gpt2(const std::string& checkpoint, const std::filesystem::path& dir);

}  // namespace attend::train
#pragma GCC visibility pop
