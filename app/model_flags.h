// The model flags `summary` and `diagram` share: --preset, --checkpoint and the config
// table's Model fields, and the model they describe.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "train/config.h"

namespace attend::cli {

struct ModelArgs {
  std::string preset, checkpoint;
  std::vector<const train::ConfigField*> fields;  // the model flags
  std::vector<std::string> values;
  std::vector<CLI::Option*> options;
  int64_t batch = 1, seq = 0;  // seq 0: block_size
  std::string out;             // diagram: FILE.svg | FILE.html
  std::string prompt;          // diagram: this prompt's activations in the boxes
  int64_t layer = 0;           // diagram: the block shown with activations
};

// The model the flags describe: a preset, a checkpoint's (checked against its weights),
// or GPT-2 small, changed by flags.
nn::GPTConfig model_from_flags(const ModelArgs& a);

// Registers --preset, --checkpoint and the Model fields on cmd.
void add_model_flags(CLI::App* cmd, ModelArgs& a);

}  // namespace attend::cli
