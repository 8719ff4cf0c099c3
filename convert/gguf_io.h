// A model in and out of GGUF (io/gguf.h), as llama.cpp's loader reads it: architecture
// `llama` for attend's Llama and Mistral, `gpt2` for GPT-2.
//
// Names (attend -> GGUF; a Linear (out, in) is ne = [in, out], no transpose), per layer i:
//   llama                                     gpt2
//   transformer.wte.weight  token_embd.weight  transformer.wte.weight  token_embd.weight
//                                              transformer.wpe.weight  position_embd.weight
//   h.i.ln_1.weight         blk.i.attn_norm    h.i.ln_1.{weight,bias}  blk.i.attn_norm
//   c_attn rows q | k | v   blk.i.attn_q|k|v   c_attn.{weight,bias}    blk.i.attn_qkv (fused)
//   attn.c_proj.weight      blk.i.attn_output  attn.c_proj.{w,b}       blk.i.attn_output
//   h.i.ln_2.weight         blk.i.ffn_norm     h.i.ln_2.{weight,bias}  blk.i.ffn_norm
//   c_fc rows gate | up     blk.i.ffn_gate|up  mlp.c_fc.{w,b}          blk.i.ffn_up
//   mlp.c_proj.weight       blk.i.ffn_down     mlp.c_proj.{w,b}        blk.i.ffn_down
//   transformer.ln_f        output_norm        transformer.ln_f        output_norm
//   lm_head.weight          output (untied only; llama.cpp reuses token_embd when absent)
// A bias-free GPT-2 is written with zero biases (llama.cpp's gpt2 requires them; adding
// zero changes nothing) and `attend.bias = false`, which import reads back.
//
// RoPE: attend turns pairs (2i, 2i+1) of each head (Note [RoPE]); llama.cpp's `llama`
// architecture uses its "normal" RoPE, which turns the same adjacent pairs. So q and k rows
// are written as they are: Hugging Face's converter permutes them only to undo the
// half-split order (i, i + HS/2) of HF checkpoints, which attend never has.
//
// Keys: general.architecture, general.name, general.file_type (0 f32, 1 f16, 7 q8_0,
// 32 bf16), general.quantization_version 2 (q8_0); ARCH.context_length, embedding_length,
// block_count, feed_forward_length, attention.head_count, attention.head_count_kv,
// attention.layer_norm_rms_epsilon (llama) or layer_norm_epsilon (gpt2), rope.dimension_count
// and rope.freq_base (llama), vocab_size. attend.* keys keep what llama.cpp has no key for
// (sliding_window, bias, the tokenizer's kind and name) so import restores the model.
//
// Types: --dtype applies to every matrix (embeddings, projections, the head); norms and
// biases stay F32 (as llama.cpp's own quantizer does). A Q8_0 matrix needs rows (ne[0], the
// input width) that are a multiple of 32; one that is not is written F32, with a warning
// naming it.
//
// Tokenizer: `tokenizer.ggml.model = gpt2` (byte-level BPE) with tokens under GPT-2's
// byte-to-unicode map, token types (1 normal, 3 control for <|endoftext|>-style ends),
// merges "a b", `tokenizer.ggml.pre` gpt-2 (GPT-2's pattern) or llama-bpe (Llama 3's), bos
// and eos ids where the vocabulary has an end token, add_bos_token false. A char vocabulary
// is written byte-level: each character its UTF-8 bytes as one token, merges that join a
// multi-byte character's bytes, so llama.cpp's tokenizer gives the same ids on text made of
// the vocabulary's characters (it cannot encode text outside it).
#pragma once

#include <filesystem>
#include <string>

#include "convert/format.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

struct GgufExportOptions {
  std::filesystem::path out;  // the .gguf file
  std::string dtype = "f32";  // f32 | f16 | bf16 | q8_0: the matrices as stored
};
ExportResult export_gguf(const ExportSource& source, const GgufExportOptions& options);

// A GGUF file of architecture llama or gpt2 with F32, F16, BF16 or Q8_0 tensors (dequantized
// to f32) and a gpt2-style (byte-level BPE) vocabulary. Every other architecture, tensor type
// or tokenizer is refused, naming it. options.from is the file.
Imported import_gguf(const ImportOptions& options);

// Whether a path is a regular file starting with GGUF's magic.
bool is_gguf_file(const std::filesystem::path& path);

}  // namespace attend::convert
#pragma GCC visibility pop
