// Hugging Face's tokenizer.json for byte-level BPE tokenizers (GPT-2's, Llama 3's, and
// those attend trains), read and written.
//
// Read: "model" must be BPE over GPT-2's byte-to-unicode map (no byte_fallback, dropout,
// subword prefix or word suffix), "normalizer" null, and "pre_tokenizer" either
// ByteLevel with use_regex (GPT-2's pattern) or a Sequence of one Split on a regex
// (behavior Isolated, not inverted) and a ByteLevel without use_regex: the regex is kept
// as TokenizerSpec::pattern (data/regex.h). model.ignore_merges is kept. Tokens from
// "added_tokens" that the vocab lacks join it with their text as bytes: they decode, but
// encoding never produces them (attend tokenizes text as ordinary text, as nanoGPT's
// encode_ordinary does; the post_processor's BOS is not added either). Every other kind
// (SentencePiece's tokenizer.model, Unigram, WordPiece, a byte-fallback BPE such as
// Llama 2's) is refused naming it. Ids must be 0..V-1, each once, V at most 2^21, checked
// before anything is sized from them.
//
// Written: the same shape (ByteLevel pre-tokenizer, or Sequence[Split, ByteLevel] when
// the spec has a pattern), "merges" as "a b" strings (every tokenizers version reads them).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "data/tokenizer.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

// GPT-2's pattern as Hugging Face's files spell it (pretokenize.h runs it by hand).
extern const char* const kGpt2Pattern;

// Reads a tokenizer.json file; errors name the file and the field.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& file);

// A bpe spec as Hugging Face's tokenizer.json text. Throws for a char tokenizer (Hugging
// Face has no byte-level form of it) and for two ids with the same bytes.
std::string hf_tokenizer_json(const TokenizerSpec& spec);

}  // namespace attend::data
#pragma GCC visibility pop
