// `attend prepare`: a text corpus -> DIR/train.bin, DIR/val.bin and DIR's tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

// A file, or every text file under a folder (recursively, sorted by path, hidden entries
// and symlinks skipped), concatenated. A file counts as text when it is valid UTF-8 with
// no NUL byte; others are skipped and listed in `skipped`.
struct Corpus {
  std::string text;
  std::vector<std::filesystem::path> files, skipped;
};
Corpus read_corpus(const std::filesystem::path& path);

struct PrepareOptions {
  std::filesystem::path data;          // file or folder
  std::string tokenizer = "char";      // char | gpt2 | bpe:N (train N tokens) | a saved tokenizer
  std::filesystem::path out;           // folder, created if needed
  double val_fraction = 0.1;           // the last fraction of the tokens
  const TokenizerSpec* use = nullptr;  // when set, this tokenizer (finetuning) instead
  // text: a corpus; alpaca: a JSON file of instruction examples rendered through
  // template_name, with train.examples and val.examples (data/instructions.h); preference:
  // the same with chosen/rejected pairs (DPO), the examples files marking them as pairs
  std::string format = "text";
  std::string template_name = "alpaca";
  std::string system;  // chatml, llama3: a system message before every example's prompt
};

struct PrepareResult {
  int64_t files = 0, bytes = 0, train_tokens = 0, val_tokens = 0, vocab_size = 0;
  int64_t train_examples = 0, val_examples = 0;  // format alpaca (preference: pairs)
  std::vector<std::string> added_tokens;  // the template's special tokens the tokenizer lacked
  std::string tokenizer;
  std::vector<std::filesystem::path> skipped;
};

PrepareResult prepare(const PrepareOptions& options);

// The tokenizer for a prepare spec: char and bpe:N are built from the corpus.
std::unique_ptr<Tokenizer> tokenizer_for_corpus(const std::string& spec, const std::string& corpus);

}  // namespace attend::data
#pragma GCC visibility pop
