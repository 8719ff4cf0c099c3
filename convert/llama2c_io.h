// A Llama out to llama2.c (github.com/karpathy/llama2.c), whose run.c is the smallest
// program that runs one: OUT/model.bin in its legacy format (the one run.c reads) and
// OUT/tokenizer.bin.
//
// model.bin, little-endian:
//   7 int32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
//             vocab_size negative when the head is not tied to the embedding
//   f32       token embedding (V, C); attention RMSNorm weights (L, C); wq (L, C, C);
//             wk, wv (L, KV*HS, C); wo (L, C, C); FFN RMSNorm weights (L, C);
//             w1 = gate (L, H, C); w2 = down (L, C, H); w3 = up (L, H, C);
//             final RMSNorm (C); RoPE's cos then sin tables (seq_len, HS/2 each: run.c
//             skips them, they are written as its format has them); the head (V, C)
//             when untied. Every matrix is (out, in), row-major, as attend's Linear.
// RoPE: run.c turns pairs (2i, 2i+1) of a head by pos * 10000^(-2i/HS), attend's order,
// so q and k rows go out unpermuted. run.c fixes theta at 10000 and RMSNorm's eps at 1e-5
// and has no sliding window: a model with another theta or eps, or a window shorter than
// its context, would run differently there and is refused, naming the value.
//
// tokenizer.bin: int32 max_token_length, then per token: f32 score, int32 length, bytes.
// Tokens are attend's raw bytes; a BPE's merged tokens score -rank (run.c merges the
// highest-scoring pair first, so the earliest merge wins, as in attend), single bytes
// and a char vocabulary's characters score 0. run.c's own encoder is SentencePiece's
// (BOS is id 1, a dummy " " prefix): it decodes attend's ids faithfully, but its prompts
// tokenize differently (docs/llama.md says how to compare from the same start).
#pragma once

#include <filesystem>
#include <string>

#include "convert/format.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

ExportResult export_llama2c(const ExportSource& source, const std::filesystem::path& out);

}  // namespace attend::convert
#pragma GCC visibility pop
