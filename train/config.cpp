#include "train/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/tokenizer.h"

namespace attend::train {

namespace {

std::string normalize(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  while (!s.empty() && s[0] == '_') s.erase(0, 1);
  return s;
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  using C = TrainConfig;
  using R = OnResume;
  static const std::vector<ConfigField> fields = {
      {"data", "prepared folder (train.bin, val.bin), or a text file or folder to prepare", R::Free,
       &C::data},
      {"tokenizer", "tokenizer when preparing text: char | gpt2 | bpe:N", R::Refuse, &C::tokenizer},
      {"preset", "model preset: cpu-char, shakespeare-char, gpt2, ... (sets the model fields)",
       R::Free, &C::preset},
      {"n_layer", "transformer blocks", R::Refuse, &C::n_layer},
      {"n_head", "query heads NH", R::Refuse, &C::n_head},
      {"n_kv_head", "key/value heads KVH (0: n_head, MHA; 1: MQA)", R::Refuse, &C::n_kv_head},
      {"n_embd", "channels C", R::Refuse, &C::n_embd},
      {"block_size", "context length T", R::Refuse, &C::block_size},
      {"dropout", "dropout probability", R::Refuse, &C::dropout},
      {"bias", "biases in Linear layers and LayerNorms (true/false)", R::Refuse, &C::bias},
      {"optimizer", "adamw | sgd", R::Refuse, &C::optimizer},
      {"batch_size", "sequences per micro-step B", R::Refuse, &C::batch_size},
      {"gradient_accumulation_steps", "micro-steps per optimizer step", R::Refuse,
       &C::gradient_accumulation_steps},
      {"max_iters", "optimizer steps in all", R::Free, &C::max_iters},
      {"learning_rate", "peak learning rate", R::Warn, &C::learning_rate},
      {"decay_lr", "warmup then cosine decay (true) or constant (false)", R::Warn, &C::decay_lr},
      {"warmup_iters", "linear warmup steps", R::Warn, &C::warmup_iters},
      {"lr_decay_iters", "step where the cosine reaches min_lr", R::Warn, &C::lr_decay_iters},
      {"min_lr", "learning rate at and after lr_decay_iters", R::Warn, &C::min_lr},
      {"beta1", "AdamW beta1", R::Refuse, &C::beta1},
      {"beta2", "AdamW beta2", R::Refuse, &C::beta2},
      {"weight_decay", "decoupled weight decay (matrices and embeddings only)", R::Refuse,
       &C::weight_decay},
      {"momentum", "SGD momentum", R::Refuse, &C::momentum},
      {"grad_clip", "clip the global gradient norm to this (0: off)", R::Refuse, &C::grad_clip},
      {"seed", "seed of initialisation, batches and dropout", R::Refuse, &C::seed},
      {"eval_interval", "evaluate every this many steps", R::Free, &C::eval_interval},
      {"eval_iters", "batches per split in an evaluation", R::Free, &C::eval_iters},
      {"log_interval", "print and record every this many steps", R::Free, &C::log_interval},
      {"checkpoint_interval", "write a checkpoint every this many steps", R::Free,
       &C::checkpoint_interval},
      {"keep_checkpoints", "newest checkpoints kept (the best-val one is kept too)", R::Free,
       &C::keep_checkpoints},
  };
  return fields;
}

const ConfigField* find_field(const std::string& name) {
  const std::string n = normalize(name);
  for (const ConfigField& f : config_fields())
    if (n == f.name) return &f;
  return nullptr;
}

void set_field(TrainConfig& c, const ConfigField& f, const std::string& value,
               const std::string& source) {
  auto bad = [&](const char* what) {
    throw Error(str(source, ": expected ", what, ", got '", value, "'"));
  };
  std::visit(
      [&](auto member) {
        using V = std::remove_cvref_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<V, int64_t>) {
          size_t used = 0;
          long long v = 0;
          try {
            v = std::stoll(value, &used);
          } catch (const std::exception&) {
            bad("an integer");
          }
          if (used != value.size()) bad("an integer");
          c.*member = v;
        } else if constexpr (std::is_same_v<V, double>) {
          size_t used = 0;
          double v = 0;
          try {
            v = std::stod(value, &used);
          } catch (const std::exception&) {
            bad("a number");
          }
          if (used != value.size() || !std::isfinite(v)) bad("a finite number");
          c.*member = v;
        } else if constexpr (std::is_same_v<V, bool>) {
          if (value == "true" || value == "1") {
            c.*member = true;
          } else if (value == "false" || value == "0") {
            c.*member = false;
          } else {
            bad("true or false");
          }
        } else {
          c.*member = value;
        }
      },
      f.member);
}

std::string get_field(const TrainConfig& c, const ConfigField& f) {
  return std::visit(
      [&](auto member) -> std::string {
        using V = std::remove_cvref_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<V, bool>) {
          return c.*member ? "true" : "false";
        } else if constexpr (std::is_same_v<V, std::string>) {
          return c.*member;
        } else {
          std::ostringstream os;
          os << c.*member;
          return os.str();
        }
      },
      f.member);
}

void TrainConfig::validate() const {
  auto check = [](bool ok, const char* flag, const auto& value, const char* want) {
    ATTEND_CHECK(ok, "--", flag, ": ", want, ", got ", value);
  };
  check(n_layer > 0, "n_layer", n_layer, "must be positive");
  check(n_head > 0, "n_head", n_head, "must be positive");
  check(n_kv_head >= 0, "n_kv_head", n_kv_head, "must be 0 (= n_head) or positive");
  check(n_embd > 0, "n_embd", n_embd, "must be positive");
  ATTEND_CHECK(n_embd % n_head == 0, "--n_embd ", n_embd, " must be divisible by --n_head ",
               n_head);
  const int64_t kvh = n_kv_head == 0 ? n_head : n_kv_head;
  ATTEND_CHECK(n_head % kvh == 0, "--n_head ", n_head, " must be divisible by --n_kv_head ", kvh);
  check(block_size > 0, "block_size", block_size, "must be positive");
  check(dropout >= 0 && dropout < 1, "dropout", dropout, "must be in [0, 1)");
  check(optimizer == "adamw" || optimizer == "sgd", "optimizer", optimizer, "must be adamw or sgd");
  check(batch_size > 0, "batch_size", batch_size, "must be positive");
  check(gradient_accumulation_steps > 0 && gradient_accumulation_steps <= 65535,
        "gradient_accumulation_steps", gradient_accumulation_steps, "must be in [1, 65535]");
  check(max_iters >= 0, "max_iters", max_iters, "must be >= 0");
  check(learning_rate > 0, "learning_rate", learning_rate, "must be positive");
  check(min_lr >= 0, "min_lr", min_lr, "must be >= 0");
  check(warmup_iters >= 0, "warmup_iters", warmup_iters, "must be >= 0");
  check(lr_decay_iters >= warmup_iters, "lr_decay_iters", lr_decay_iters,
        "must be >= warmup_iters");
  check(beta1 >= 0 && beta1 < 1, "beta1", beta1, "must be in [0, 1)");
  check(beta2 >= 0 && beta2 < 1, "beta2", beta2, "must be in [0, 1)");
  check(weight_decay >= 0, "weight_decay", weight_decay, "must be >= 0");
  check(momentum >= 0 && momentum < 1, "momentum", momentum, "must be in [0, 1)");
  check(grad_clip >= 0, "grad_clip", grad_clip, "must be >= 0 (0: off)");
  check(seed >= 0, "seed", seed, "must be >= 0");
  check(eval_interval > 0, "eval_interval", eval_interval, "must be positive");
  check(eval_iters > 0, "eval_iters", eval_iters, "must be positive");
  check(log_interval > 0, "log_interval", log_interval, "must be positive");
  check(checkpoint_interval > 0, "checkpoint_interval", checkpoint_interval, "must be positive");
  check(keep_checkpoints > 0, "keep_checkpoints", keep_checkpoints, "must be positive");
}

nn::GPTConfig TrainConfig::model(int64_t vocab_size) const {
  return nn::GPTConfig{vocab_size, block_size, n_layer, n_head, n_kv_head == 0 ? n_head : n_kv_head,
                       n_embd,     dropout,    bias};
}

void apply_preset(TrainConfig& c, const std::string& name) {
  nn::GPTConfig p = nn::gpt_preset(name);
  c.preset = name;
  c.n_layer = p.n_layer;
  c.n_head = p.n_head;
  c.n_kv_head = p.n_kv_head;
  c.n_embd = p.n_embd;
  c.block_size = p.block_size;
  c.dropout = p.dropout;
  c.bias = p.bias;
  if (name == "cpu-char") {  // nanoGPT's README CPU recipe
    c.batch_size = 12, c.learning_rate = 1e-3, c.max_iters = 2000, c.warmup_iters = 100;
    c.lr_decay_iters = 2000, c.min_lr = 1e-4, c.beta2 = 0.99;
  } else if (name == "shakespeare-char") {  // nanoGPT's train_shakespeare_char.py
    c.batch_size = 64, c.learning_rate = 1e-3, c.max_iters = 5000, c.warmup_iters = 100;
    c.lr_decay_iters = 5000, c.min_lr = 1e-4, c.beta2 = 0.99;
  }
}

std::map<std::string, std::string> read_config_file(const std::string& path) {
  const std::string text = data::read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(str(path, ": invalid JSON at byte ", e.byte));
  }
  ATTEND_CHECK(j.is_object(), path, ": expected a JSON object of flag -> value");
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const ConfigField* f = find_field(it.key());
    ATTEND_CHECK(f, path, ": unknown setting '", it.key(), "'");
    const auto& v = it.value();
    std::string s;
    if (v.is_string()) {
      s = v.get<std::string>();
    } else if (v.is_boolean()) {
      s = v.get<bool>() ? "true" : "false";
    } else if (v.is_number_integer()) {
      s = std::to_string(v.get<int64_t>());
    } else if (v.is_number()) {
      std::ostringstream os;
      os.precision(17);
      os << v.get<double>();
      s = os.str();
    } else {
      throw Error(str(path, ": setting '", it.key(), "' must be a string, number or boolean"));
    }
    out[f->name] = s;
  }
  return out;
}

ConfigValues to_values(const TrainConfig& c, int64_t vocab_size) {
  ConfigValues v;
  const nn::GPTConfig m = c.model(vocab_size);
  v.emplace_back("vocab_size", m.vocab_size);
  for (const ConfigField& f : config_fields()) {
    std::visit(
        [&](auto member) {
          using V = std::remove_cvref_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<V, bool>) {
            v.emplace_back(f.name, static_cast<int64_t>(c.*member));
          } else {
            v.emplace_back(f.name, c.*member);
          }
        },
        f.member);
  }
  // The resolved head count, as GPTConfig has it.
  for (auto& [name, value] : v)
    if (name == "n_kv_head") value = m.n_kv_head;
  return v;
}

TrainConfig from_values(const ConfigValues& values) {
  TrainConfig c;
  for (const auto& [name, value] : values) {
    const ConfigField* f = find_field(name);
    if (!f) continue;  // vocab_size, and fields of other versions
    std::string s = std::visit(
        [](const auto& x) -> std::string {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
            return x;
          } else {
            std::ostringstream os;
            os.precision(17);
            os << x;
            return os.str();
          }
        },
        value);
    if (std::holds_alternative<bool TrainConfig::*>(f->member)) s = s == "0" ? "false" : "true";
    set_field(c, *f, s, std::string("checkpoint /config ") + name);
  }
  return c;
}

}  // namespace attend::train
