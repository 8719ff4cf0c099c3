// The training configuration: one typed struct with a typical value beside each field,
// holding the model's nn::GPTConfig, and one table of its fields from which the flags
// (`train` and `summary`), the JSON config file, the checkpoint's /config attributes and
// the resume rules are all derived. Names are nanoGPT's.
//
// Values are typed everywhere inside (Value: int, float, bool or text); they cross text
// only at the edges: parse_value for a flag or a JSON string, format_value for messages
// and --help. A double survives the checkpoint and the resume merge bit for bit.
//
// Layers, lowest first: the defaults (which are the cpu-char preset and nanoGPT's CPU
// recipe), the preset named by the file or a flag (its model and, for the char presets,
// its recipe), the config file, the flags. Key/value heads: n_kv_head follows n_head
// unless some layer sets it, so `--preset X --n_head Y` builds the same model as
// `--n_head Y`; a GQA preset given a new n_head without n_kv_head is refused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "nn/gpt.h"
#include "io/checkpoint.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct TrainConfig {
  // data
  std::string data;                // a prepared folder (train.bin, val.bin) or text to prepare
  std::string tokenizer = "char";  // when preparing text: char | gpt2 | bpe:N
  std::string init_from;           // finetuning: the checkpoint the weights came from
  // preference tuning (train/dpo.h): the DPO loss on pairs against a frozen reference
  bool dpo = false;
  std::string ref;       // the reference checkpoint; empty: init_from's weights (LoRA: the base)
  double beta = 0.1;     // DPO's beta: how far from the reference the rewards may pull
  std::string ref_hash;  // the reference's content hash, set by the trainer, checked on resume
  // LoRA: the frozen base's content hash (every weight but the adapters), set by the
  // trainer, checked on resume: a checkpoint whose base changed is refused
  std::string base_hash;
  // LoRA: the frozen base's number format, f32 or bf16 (nn::store_frozen_as_bf16)
  std::string base_weights = "f32";
  // LoRA: checkpoints hold the base too (true: each stands alone), or the adapters only
  // (false), the base read back from init_from and checked by base_hash (complete_lora_base)
  bool save_base = false;
  // model: the cpu-char preset; vocab_size is the tokenizer's
  std::string preset = "cpu-char";
  nn::GPTConfig model = nn::gpt_preset("cpu-char");
  // optimisation (defaults: nanoGPT's CPU recipe)
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
  // f32 | bf16: the matrix products' operands (tensor/kernels/gemm.h); weights, gradients,
  // optimizer state, norms, softmax and the loss stay f32 either way.
  std::string precision = "f32";
  // evaluation, logging, checkpoints
  int64_t eval_interval = 250;
  int64_t eval_iters = 20;
  int64_t log_interval = 10;
  int64_t checkpoint_interval = 250;
  int64_t keep_checkpoints = 3;

  // Throws naming the flag and the value of the first invalid field.
  void validate() const;
  bool operator==(const TrainConfig&) const = default;
};

// How a field may change when a run resumes.
enum class OnResume {
  Refuse,  // model shape and anything exact resumption depends on
  Warn,    // the learning-rate schedule
  Free,    // length, evaluation, logging and checkpoint settings
};

enum class Group { Data, Model, Optim, Run };

using Value = std::variant<int64_t, double, bool, std::string>;

struct ConfigField {
  const char* name;
  const char* help;
  Group group;
  OnResume on_resume;
  std::variant<int64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*,
               std::string TrainConfig::*, int64_t nn::GPTConfig::*, double nn::GPTConfig::*,
               bool nn::GPTConfig::*, std::string nn::GPTConfig::*>
      member;
  bool train_flag = true;  // vocab_size is the tokenizer's: a summary flag only

  Value get(const TrainConfig& c) const;
  // Throws if v's type is not this field's.
  void set(TrainConfig& c, const Value& v) const;
  const char* type_name() const;  // INT, FLOAT, BOOL or TEXT (as --help shows it)
};
const std::vector<ConfigField>& config_fields();
const ConfigField* find_field(const std::string& name);  // dashes and underscores alike
const ConfigField& field(const std::string& name);       // throws for an unknown name

// The text edges. parse_value is strict (the whole text, finite numbers, true/false/1/0)
// and its errors name `source` (a flag, a file and key) and the text.
Value parse_value(const ConfigField& f, const std::string& text, const std::string& source);
std::string format_value(const Value& v);  // doubles: the shortest text that reads back exact

// A named preset: the model, and for the char presets nanoGPT's training recipe.
struct Preset {
  std::string name;
  nn::GPTConfig model;
  bool has_recipe = false;
  int64_t batch_size = 0, max_iters = 0, warmup_iters = 0, lr_decay_iters = 0;
  double learning_rate = 0, min_lr = 0, beta2 = 0;
};
const Preset& find_preset(const std::string& name);  // throws listing the known names
void apply_preset(TrainConfig& c, const std::string& name);

// One layer of settings: where it came from ("--flags", a file name) and its typed values.
struct SettingsLayer {
  std::string source;
  std::map<std::string, Value> values;  // canonical field names
};

// The config a request means, and which fields it set (a named preset's model fields
// count as set, so that resuming with --preset checks them).
struct ResolvedConfig {
  TrainConfig config;
  std::set<std::string> explicit_fields;
};
// Applies base < preset < layers in order; see the header comment for n_kv_head. The base
// is the defaults for `train`; `summary --checkpoint` starts from the checkpoint's config.
ResolvedConfig resolve_config(const std::vector<SettingsLayer>& layers,
                              const TrainConfig& base = TrainConfig{});

// Reads a JSON object of field -> value; unknown fields and wrong types are errors
// naming the file and the key. JSON strings are parsed as the flag would be.
SettingsLayer read_config_file(const std::string& path);

// /config in a checkpoint: every field typed (booleans as 0/1 integers, as HDF5 has no
// boolean attribute). from_values refuses a value of the wrong type, naming it.
io::ConfigValues to_values(const TrainConfig& c);
TrainConfig from_values(const io::ConfigValues& values);

// The config as text for another process (MPI ranks): every field typed, doubles bit for
// bit. config_from_wire reads what config_to_wire wrote.
std::string config_to_wire(const TrainConfig& c);
TrainConfig config_from_wire(const std::string& text);

// On resume: the checkpoint's settings, except explicit fields that differ and may change
// (Warn: logged as breaking exactness; Free: logged). Refused changes throw, listing all.
TrainConfig merge_resume(const ResolvedConfig& requested, const TrainConfig& saved);

}  // namespace attend::train
#pragma GCC visibility pop
