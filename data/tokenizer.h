// Tokenizers: text <-> token ids. Two kinds behind one interface:
//
//   char  the vocabulary is the sorted set of the corpus's characters (code points);
//         tinyshakespeare gives nanoGPT's 65.
//   bpe   byte-level BPE: GPT-2's own (loaded from encoder.json and vocab.bpe) or one
//         trained here from a corpus ("bpe:N"), saved in the same two-file format.
//
// Byte-level BPE: text is cut into pieces by GPT-2's pattern (pretokenize.h); each
// piece starts as its bytes, one token each, and merges apply lowest rank first until
// none applies. decode(encode(s)) == s for every byte string.
//
// Files: DIR/tokenizer.json says which kind, {"format": "attend-tokenizer", "version": 1,
// "kind": "char"|"bpe", "name": ..., "chars": [...] (char only)} (version 2 adds
// "pattern" and "ignore_merges", written only when they are not GPT-2's); a bpe tokenizer keeps
// DIR/encoder.json and DIR/vocab.bpe beside it, GPT-2's formats (token strings under
// GPT-2's byte-to-unicode map).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/util.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

using TokenIds = std::vector<int32_t>;

// A tokenizer as plain data: enough to rebuild it (checkpoints store this).
struct TokenizerSpec {
  std::string kind{};                 // "char" or "bpe"
  std::string name{};                 // "char", "gpt2", "bpe:4096", ...
  std::vector<std::string> tokens{};  // id -> the token's bytes
  std::vector<std::pair<int32_t, int32_t>>
      merges{};  // bpe: rank order; (a, b) -> tokens[a] + tokens[b]
  // bpe only. The pre-tokenizer's pattern (data/regex.h); empty: GPT-2's, run by
  // data/pretokenize.h. Hugging Face tokenizers name theirs (Llama 3's differs).
  std::string pattern{};
  // bpe only: a piece that is itself a token is that token, merges or not (Hugging
  // Face's "ignore_merges", which Llama 3's tokenizer sets).
  bool ignore_merges = false;
};

// Which tokenizer made some ids: FNV-1a 64 over kind, tokens and merges, and the pattern
// and ignore_merges when they are not the defaults (never 0; token files record it, see
// data/token_file.h).
uint64_t tokenizer_hash(const TokenizerSpec& spec);

// A TokenizerSpec as arrays (how a checkpoint's /tokenizer stores it): every token's
// bytes concatenated, V + 1 offsets into them, and the merges as (M, 2) pairs.
struct TokenizerArrays {
  std::string bytes;
  std::vector<int64_t> offsets;  // offsets[0] = 0, non-decreasing, offsets[V] = bytes.size()
  std::vector<int32_t> merges;   // 2 M ids
};
TokenizerArrays to_arrays(const TokenizerSpec& spec);
// Checks every offset (range, order) and merge id (in [0, V)) before using it; errors
// start with `what` (the file and group).
TokenizerSpec from_arrays(const std::string& kind, const std::string& name,
                          const TokenizerArrays& arrays, const std::string& what);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual TokenIds encode(std::string_view text) const = 0;
  // The tokens' bytes, concatenated (the same for every kind). Throws on an id outside
  // [0, vocab_size).
  std::string decode(const TokenIds& ids) const;
  int64_t vocab_size() const { return static_cast<int64_t>(spec().tokens.size()); }
  virtual const TokenizerSpec& spec() const = 0;
  void save(const std::filesystem::path& dir) const;
};

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);
// Throws (the regex engine's message: the construct and its byte offset) unless `pattern`
// compiles as a pre-tokenizer pattern.
void check_pattern(const std::string& pattern);
// A bpe tokenizer's two GPT-2-format files as text: encoder.json (= Hugging Face's
// vocab.json) and vocab.bpe (= merges.txt).
std::string encoder_json_text(const TokenizerSpec& spec);
std::string vocab_bpe_text(const TokenizerSpec& spec);
// Reads DIR/tokenizer.json, attend's or Hugging Face's (and, for attend's bpe, encoder.json and vocab.bpe beside it).
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);
// GPT-2's files. Errors name the file, and the line or byte, of malformed input.
std::unique_ptr<Tokenizer> load_bpe_files(const std::filesystem::path& encoder_json,
                                          const std::filesystem::path& vocab_bpe,
                                          const std::string& name);

// The char vocabulary of a corpus (must be valid UTF-8).
std::unique_ptr<Tokenizer> build_char_tokenizer(std::string_view corpus);
// Byte-level BPE trained on a corpus up to vocab_size tokens (>= 256), incrementally:
// pair counts are updated for the words a merge touches, never recounted. Each step
// merges the most frequent adjacent pair; ties go to the pair with the smaller first
// token id, then the smaller second id. Deterministic.
std::unique_ptr<Tokenizer> train_bpe_tokenizer(std::string_view corpus, int64_t vocab_size);

// The cache folder scripts/get-gpt2-tokenizer.sh fills: $XDG_CACHE_HOME/attend/gpt2, else
// $HOME/.cache/attend/gpt2.
std::filesystem::path gpt2_cache_dir();

// Where GPT-2's files are: $ATTEND_GPT2_DIR if set (and only there), else the first of
// gpt2_cache_dir(), ../shared/data/gpt2 from the current folder, and the same from the
// folder above the executable's. Throws naming the places looked at and how to get them.
std::filesystem::path find_gpt2_dir();

// GPT-2's tokenizer from find_gpt2_dir(), after checking both files' hashes against the
// published ones (a different or damaged file is refused, naming it).
std::unique_ptr<Tokenizer> load_gpt2_tokenizer();
// Whether a file holds exactly OpenAI's GPT-2 encoder.json (= Hugging Face's vocab.json)
// or vocab.bpe (= merges.txt), byte for byte.
bool is_gpt2_encoder_file(const std::filesystem::path& file);
bool is_gpt2_merges_file(const std::filesystem::path& file);

// A tokenizer from a command-line spec:
//   char:PATH  a saved tokenizer folder (or its tokenizer.json), or else a text file whose
//              characters make the vocabulary
//   gpt2       GPT-2's tokenizer (load_gpt2_tokenizer)
//   bpe:PATH   a saved bpe tokenizer folder
//   hf:PATH    Hugging Face's tokenizer.json, or a folder holding one (data/hf_tokenizer.h)
//   PATH       any saved tokenizer folder (its tokenizer.json attend's or Hugging Face's)
std::unique_ptr<Tokenizer> tokenizer_from_arg(const std::string& arg);

// GPT-2's byte <-> printable-unicode map (bytes that print as themselves keep their code
// point; the other 68 go to U+0100 onwards, in byte order). The inverse is false for a
// string with a character outside the map.
std::string bytes_to_unicode_string(std::string_view bytes);
bool unicode_string_to_bytes(std::string_view s, std::string& out);

// Whole files are read with attend::read_file (tensor/util.h).
using attend::read_file;

}  // namespace attend::data
#pragma GCC visibility pop
