// The training configuration: one typed struct with a typical value beside each field,
// and one table of its fields from which the flags, the config file, the checkpoint's
// /config attributes and the resume checks are all derived. Names are nanoGPT's.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace attend::train {

struct TrainConfig {
  // data
  std::string data;                // a prepared folder (train.bin, val.bin) or text to prepare
  std::string tokenizer = "char";  // when preparing text: char | gpt2 | bpe:N
  // model (defaults: nanoGPT's CPU recipe, preset cpu-char)
  std::string preset = "cpu-char";
  int64_t n_layer = 4;
  int64_t n_head = 4;       // NH
  int64_t n_kv_head = 0;    // KVH; 0 means n_head (MHA)
  int64_t n_embd = 128;     // C
  int64_t block_size = 64;  // T
  double dropout = 0.0;
  bool bias = true;
  // optimisation
  std::string optimizer = "adamw";  // adamw | sgd
  int64_t batch_size = 12;          // B
  int64_t gradient_accumulation_steps = 1;
  int64_t max_iters = 2000;
  double learning_rate = 1e-3;
  bool decay_lr = true;  // warmup + cosine (nanoGPT); false: constant
  int64_t warmup_iters = 100;
  int64_t lr_decay_iters = 2000;
  double min_lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.1;
  double momentum = 0.9;   // sgd
  double grad_clip = 1.0;  // 0: no clipping
  int64_t seed = 1337;
  // evaluation, logging, checkpoints
  int64_t eval_interval = 250;
  int64_t eval_iters = 20;
  int64_t log_interval = 10;
  int64_t checkpoint_interval = 250;
  int64_t keep_checkpoints = 3;

  // Throws naming the flag and the value of the first invalid field.
  void validate() const;
  nn::GPTConfig model(int64_t vocab_size) const;
};

// How a field may change when a run resumes.
enum class OnResume {
  Refuse,  // model shape and anything exact resumption depends on
  Warn,    // the learning-rate schedule
  Free,    // length, evaluation, logging and checkpoint settings
};

struct ConfigField {
  const char* name;
  const char* help;
  OnResume on_resume;
  std::variant<int64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*,
               std::string TrainConfig::*>
      member;
};
const std::vector<ConfigField>& config_fields();
const ConfigField* find_field(const std::string& name);  // dashes and underscores alike

// Sets a field from its text form; errors name the flag and the value.
void set_field(TrainConfig& c, const ConfigField& f, const std::string& value,
               const std::string& source);
std::string get_field(const TrainConfig& c, const ConfigField& f);

// Applies a preset's model fields (and, for cpu-char, nanoGPT's training recipe).
void apply_preset(TrainConfig& c, const std::string& name);
// Reads a JSON object of field -> value; unknown fields are errors naming the file.
std::map<std::string, std::string> read_config_file(const std::string& path);

ConfigValues to_values(const TrainConfig& c, int64_t vocab_size);
TrainConfig from_values(const ConfigValues& values);

}  // namespace attend::train
