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

#include "convert/format.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

// The model and its tokenizer (train::write_imported then makes a run folder of them, where
// `sample`, `eval`, `attention`, `summary` and `train --init_from` work on it).
Imported import_gpt2(const ImportOptions& options);

// Writes DIR/model.safetensors, DIR/config.json and the tokenizer's files (a BPE tokenizer
// as vocab.json + merges.txt, HF's names for encoder.json + vocab.bpe).
ExportResult export_gpt2(const ExportSource& source, const std::filesystem::path& dir);

}  // namespace attend::convert
#pragma GCC visibility pop
