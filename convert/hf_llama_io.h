// Llama and Mistral weights in and out, in Hugging Face's layout: a folder with
// model.safetensors (or shards model-0000i-of-0000n.safetensors with
// model.safetensors.index.json) and config.json, as LlamaForCausalLM and
// MistralForCausalLM save and load them.
//
// Names (attend -> Hugging Face):
//   transformer.wte.weight           model.embed_tokens.weight
//   transformer.h.{i}.ln_1.weight    model.layers.{i}.input_layernorm.weight
//   ...attn.c_attn.weight rows       ...self_attn.{q_proj, k_proj, v_proj}.weight
//   ...attn.c_proj.weight            ...self_attn.o_proj.weight
//   transformer.h.{i}.ln_2.weight    model.layers.{i}.post_attention_layernorm.weight
//   ...mlp.c_fc.weight rows          ...mlp.{gate_proj, up_proj}.weight
//   ...mlp.c_proj.weight             ...mlp.down_proj.weight
//   transformer.ln_f.weight          model.norm.weight
//   lm_head.weight                   lm_head.weight (not stored when tied)
// RoPE: attend turns pairs (2i, 2i+1) of a head, Hugging Face pairs (i, i + HS/2) (Note
// [RoPE], tensor/kernels/rope.cpp): q_proj's and k_proj's rows are permuted within each
// head on the way out (attend row 2i + r -> Hugging Face row r HS/2 + i) and back on the
// way in, so both compute the same scores. Every Linear is (out, in) on both sides.
//
// config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, rms_norm_eps, rope_theta, max_position_embeddings, vocab_size,
// tie_word_embeddings, sliding_window (Mistral; null when off), torch_dtype, hidden_act
// "silu"; model_type llama or mistral. Read back with the same keys; rope_scaling,
// attention_bias and mlp_bias must be absent, null or false (attend has neither).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "convert/format.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

struct LlamaExportOptions {
  std::filesystem::path out;
  std::string dtype = "f32";  // f32 | bf16 | f16: the tensors as stored
  int64_t shard_bytes = 0;    // > 0: shards of at most this many bytes, with an index
};
// Refuses a GPT-2 model (export_gpt2 writes those). The tokenizer is written as attend's
// own tokenizer.json (and encoder.json, vocab.bpe for a BPE).
ExportResult export_hf_llama(const ExportSource& source, const LlamaExportOptions& options);

// A Hugging Face Llama/Mistral folder (single file or sharded, F32, BF16 or F16 tensors)
// into a run folder with one checkpoint. The memory the model needs is computed from the
// headers before anything is read and refused, with the number, past what the machine has.
Imported import_hf_llama(const ImportOptions& options);

// config.json's model_type is llama or mistral (what `attend import` asks to choose); false
// for gpt2, no model_type, or a file that is not JSON (the GPT-2 import then says why);
// any other model_type is refused, naming it and the three supported.
bool is_hf_llama_folder(const std::filesystem::path& config_json);

// Rows of one projection (heads of HS rows) from attend's RoPE pair order to Hugging Face's
// (to_hf) or back: within each head, attend row 2i + r is Hugging Face row r HS/2 + i
// (Note [RoPE]). Any number of columns: a weight, or a LoRA adapter's B.
Tensor permute_rope_rows(const Tensor& w, int64_t heads, int64_t HS, bool to_hf);

}  // namespace attend::convert
#pragma GCC visibility pop
