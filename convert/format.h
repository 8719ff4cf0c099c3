// What every format's import and export share: the options of an import, what it gives
// back (a model and its tokenizer, in memory: writing a run folder is train/'s), and the
// model an export writes (with the name its errors give it, a checkpoint's path).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::convert {

struct ImportOptions {
  std::string from;       // a folder (model.safetensors, config.json) or a .safetensors file
  std::string config;     // config.json, when not beside the file
  std::string tokenizer;  // default: the folder's tokenizer files (each format says which)
};

struct Imported {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  int64_t tensors = 0;  // tensors read
  std::string source;   // what it was read from, for the checkpoint's /meta source
};

struct ExportSource {
  const nn::GPT& model;
  const data::Tokenizer& tokenizer;
  std::string name;  // what errors call it: the checkpoint's path
};

struct ExportResult {
  std::filesystem::path dir;
  int64_t tensors = 0;
};

// Before an import allocates its model: refused, naming `source` and the GiB, when the
// machine has less memory available than the model's f32 weights, the tensors read and a
// fresh AdamW state need (4 copies of the parameters).
void check_import_memory(const std::string& source, const nn::GPTConfig& config);

}  // namespace attend::convert
#pragma GCC visibility pop
