#include "train/config.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "tensor/kernels/gemm.h"
#include "tensor/util.h"

namespace attend::train {

namespace {

std::string normalize(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  while (!s.empty() && s[0] == '_') s.erase(0, 1);
  return s;
}

// The field a member pointer names, in c or in c.model.
template <typename T>
T& at(TrainConfig& c, T TrainConfig::*m) {
  return c.*m;
}
template <typename T>
T& at(TrainConfig& c, T nn::GPTConfig::*m) {
  return c.model.*m;
}
template <typename T>
const T& at(const TrainConfig& c, T TrainConfig::*m) {
  return c.*m;
}
template <typename T>
const T& at(const TrainConfig& c, T nn::GPTConfig::*m) {
  return c.model.*m;
}

const char* value_type_name(const Value& v) {
  static const char* names[] = {"an integer", "a number", "true or false", "text"};
  return names[v.index()];
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  using C = TrainConfig;
  using M = nn::GPTConfig;
  using R = OnResume;
  using G = Group;
  static const std::vector<ConfigField> fields = {
      {"data", "prepared folder (train.bin, val.bin), or a text file or folder to prepare", G::Data,
       R::Free, &C::data},
      {"tokenizer", "tokenizer when preparing text: char | gpt2 | bpe:N", G::Data, R::Refuse,
       &C::tokenizer},
      {"init_from",
       "finetune: start from this checkpoint's (or run folder's newest) weights, with a fresh "
       "optimizer at step 0 and its tokenizer",
       G::Data, R::Refuse, &C::init_from},
      {"dpo",
       "preference tuning: the DPO loss on the pairs of a prepare --format preference folder, "
       "from --init_from's weights",
       G::Optim, R::Refuse, &C::dpo},
      {"ref",
       "DPO: the frozen reference checkpoint (default: the --init_from weights; with LoRA, the "
       "base under the adapters)",
       G::Data, R::Refuse, &C::ref},
      {"beta", "DPO: beta, the scale of the implicit rewards (higher: stay nearer the reference)",
       G::Optim, R::Refuse, &C::beta},
      {"ref_hash", "DPO: the reference's content hash (set by train, checked on resume)", G::Data,
       R::Refuse, &C::ref_hash, false},
      {"base_hash", "LoRA: the frozen base's content hash (set by train, checked on resume)",
       G::Data, R::Refuse, &C::base_hash, false},
      {"preset",
       "model preset (sets the model fields; cpu-char and shakespeare-char also the recipe)",
       G::Model, R::Free, &C::preset},
      {"vocab_size", "vocabulary V (training: the tokenizer's)", G::Model, R::Refuse,
       &M::vocab_size, false},
      {"n_layer", "transformer blocks", G::Model, R::Refuse, &M::n_layer},
      {"n_head", "query heads NH", G::Model, R::Refuse, &M::n_head},
      {"n_kv_head", "key/value heads KVH (default: n_head, MHA; 1: MQA; between: GQA)", G::Model,
       R::Refuse, &M::n_kv_head},
      {"n_embd", "channels C", G::Model, R::Refuse, &M::n_embd},
      {"block_size", "context length T", G::Model, R::Refuse, &M::block_size},
      {"dropout", "dropout probability", G::Model, R::Refuse, &M::dropout},
      {"bias", "biases in Linear layers and LayerNorms (gpt2; arch llama sets false)", G::Model,
       R::Refuse, &M::bias},
      {"arch", "architecture: gpt2 | llama (RMSNorm, RoPE, SwiGLU, no biases)", G::Model, R::Refuse,
       &M::arch},
      {"norm_eps", "eps of every LayerNorm or RMSNorm", G::Model, R::Refuse, &M::norm_eps},
      {"hidden_dim", "MLP hidden size H (0: 4C for gpt2, Llama's rule for llama)", G::Model,
       R::Refuse, &M::hidden_dim},
      {"multiple_of", "llama: Llama's rule rounds H up to a multiple of this", G::Model, R::Refuse,
       &M::multiple_of},
      {"rope_theta", "llama: RoPE's base theta", G::Model, R::Refuse, &M::rope_theta},
      {"tie_embeddings", "lm_head shares wte's weight (gpt2: always)", G::Model, R::Refuse,
       &M::tie_embeddings},
      {"sliding_window", "llama: attend to the W newest keys only (Mistral; 0: off)", G::Model,
       R::Refuse, &M::sliding_window},
      {"lora_rank",
       "LoRA: adapters of this rank R on --lora_targets, the rest frozen (0: train every "
       "weight)",
       G::Model, R::Refuse, &M::lora_rank},
      {"lora_alpha", "LoRA: the update is scaled by alpha / R", G::Model, R::Refuse,
       &M::lora_alpha},
      {"lora_dropout", "LoRA: dropout on the adapters' input", G::Model, R::Refuse,
       &M::lora_dropout},
      {"lora_targets",
       "LoRA: q,k,v,o (attention) and gate,up,down (llama) or fc,proj (gpt2), comma-separated",
       G::Model, R::Refuse, &M::lora_targets},
      {"lora_new_tokens",
       "LoRA: the last N token rows (a template's added tokens) train as well; train sets it "
       "when the data adds tokens",
       G::Model, R::Refuse, &M::lora_new_tokens, false},
      {"base_weights",
       "LoRA: the frozen base's weights as f32 or bf16 (half the bytes; the products read the "
       "bf16-rounded values)",
       G::Model, R::Refuse, &C::base_weights},
      {"optimizer", "adamw | sgd", G::Optim, R::Refuse, &C::optimizer},
      {"batch_size", "sequences per micro-step B", G::Optim, R::Refuse, &C::batch_size},
      {"gradient_accumulation_steps", "micro-steps per optimizer step", G::Optim, R::Refuse,
       &C::gradient_accumulation_steps},
      {"max_iters", "optimizer steps in all", G::Run, R::Free, &C::max_iters},
      {"learning_rate", "peak learning rate", G::Optim, R::Warn, &C::learning_rate},
      {"decay_lr", "warmup then cosine decay (true) or constant (false)", G::Optim, R::Warn,
       &C::decay_lr},
      {"warmup_iters", "linear warmup steps", G::Optim, R::Warn, &C::warmup_iters},
      {"lr_decay_iters", "step where the cosine reaches min_lr", G::Optim, R::Warn,
       &C::lr_decay_iters},
      {"min_lr", "learning rate at and after lr_decay_iters", G::Optim, R::Warn, &C::min_lr},
      {"beta1", "AdamW beta1", G::Optim, R::Refuse, &C::beta1},
      {"beta2", "AdamW beta2", G::Optim, R::Refuse, &C::beta2},
      {"weight_decay", "decoupled weight decay (matrices and embeddings only)", G::Optim, R::Refuse,
       &C::weight_decay},
      {"momentum", "SGD momentum", G::Optim, R::Refuse, &C::momentum},
      {"grad_clip", "clip the global gradient norm to this (0: off)", G::Optim, R::Refuse,
       &C::grad_clip},
      {"seed", "seed of initialisation, batches and dropout", G::Optim, R::Refuse, &C::seed},
      {"precision",
       "f32 | bf16: matrix products on bf16-rounded operands, summed in f32 (weights, "
       "gradients, optimizer state stay f32)",
       G::Optim, R::Refuse, &C::precision},
      {"eval_interval", "evaluate every this many steps", G::Run, R::Free, &C::eval_interval},
      {"eval_iters", "batches per split in an evaluation", G::Run, R::Free, &C::eval_iters},
      {"log_interval", "print and record every this many steps", G::Run, R::Free, &C::log_interval},
      {"checkpoint_interval", "write a checkpoint every this many steps", G::Run, R::Free,
       &C::checkpoint_interval},
      {"keep_checkpoints", "newest checkpoints kept (the best-val one is kept too)", G::Run,
       R::Free, &C::keep_checkpoints},
      {"save_base",
       "LoRA: checkpoints hold the frozen base too, so each stands alone (false: the adapters "
       "only; the base is read back from --init_from's file and checked by its hash)",
       G::Run, R::Free, &C::save_base},
  };
  return fields;
}

Value ConfigField::get(const TrainConfig& c) const {
  return std::visit([&](auto m) -> Value { return at(c, m); }, member);
}

void ConfigField::set(TrainConfig& c, const Value& v) const {
  std::visit(
      [&](auto m) {
        using T = std::remove_reference_t<decltype(at(c, m))>;
        const T* x = std::get_if<T>(&v);
        ATTEND_CHECK(x, name, ": expected ", value_type_name(Value(T{})), ", got ",
                     value_type_name(v), " ", format_value(v));
        at(c, m) = *x;
      },
      member);
}

const char* ConfigField::type_name() const {
  return std::visit(
      [](auto m) {
        using T = std::remove_reference_t<decltype(at(std::declval<TrainConfig&>(), m))>;
        if constexpr (std::is_same_v<T, int64_t>) return "INT";
        if constexpr (std::is_same_v<T, double>) return "FLOAT";
        if constexpr (std::is_same_v<T, bool>) return "BOOL";
        return "TEXT";
      },
      member);
}

const ConfigField* find_field(const std::string& name) {
  const std::string n = normalize(name);
  for (const ConfigField& f : config_fields())
    if (n == f.name) return &f;
  return nullptr;
}

const ConfigField& field(const std::string& name) {
  const ConfigField* f = find_field(name);
  ATTEND_CHECK(f, "config: unknown setting '", name, "'");
  return *f;
}

Value parse_value(const ConfigField& f, const std::string& text, const std::string& source) {
  const Value typed = f.get(TrainConfig{});
  switch (typed.index()) {
    case 0:
      return parse_int(text, source);
    case 1:
      return parse_double(text, source);
    case 2:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      throw Error(str(source, ": expected true or false, got '", text, "'"));
    default:
      return text;
  }
}

std::string format_value(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return x;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>)
          return fmt::format("{}", x);  // doubles: shortest round-trip text
      },
      v);
}

void TrainConfig::validate() const {
  auto check = [](bool ok, const char* flag, const auto& value, const char* want) {
    ATTEND_CHECK(ok, "--", flag, ": ", want, ", got ", value);
  };
  model.validate("--");
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
  check(std::isfinite(beta) && beta > 0 && beta <= 1e4, "beta", beta, "must be in (0, 1e4]");
  check(dpo || ref.empty(), "ref", ref, "is DPO's reference: give it with --dpo");
  check(precision == "f32" || precision == "bf16", "precision", precision, "must be f32 or bf16");
  check(base_weights == "f32" || base_weights == "bf16", "base_weights", base_weights,
        "must be f32 or bf16");
  check(base_weights == "f32" || model.lora_rank > 0, "base_weights", base_weights,
        "is the format of a frozen base: give it with --lora_rank (a full finetune trains every "
        "weight, in f32)");
  check(eval_interval > 0, "eval_interval", eval_interval, "must be positive");
  // Each is a batch scored at every evaluation (and a slot in a vector): 10^6 is days.
  check(eval_iters > 0 && eval_iters <= 1000000, "eval_iters", eval_iters,
        "must be in [1, 1000000]");
  check(log_interval > 0, "log_interval", log_interval, "must be positive");
  check(checkpoint_interval > 0, "checkpoint_interval", checkpoint_interval, "must be positive");
  check(keep_checkpoints > 0, "keep_checkpoints", keep_checkpoints, "must be positive");
}

const Preset& find_preset(const std::string& name) {
  //                          name    model                       recipe: B, iters, warmup,
  //                          decay iters, lr, min_lr, beta2
  static const std::vector<Preset> presets = [] {
    std::vector<Preset> p;
    for (const std::string& n : nn::gpt_preset_names()) p.push_back({n, nn::gpt_preset(n)});
    for (Preset& x : p) {
      if (x.name == "cpu-char" || x.name == "llama-char")  // nanoGPT's README CPU recipe
        x = {x.name, x.model, true, 12, 2000, 100, 2000, 1e-3, 1e-4, 0.99};
      if (x.name == "shakespeare-char")  // nanoGPT's train_shakespeare_char.py
        x = {x.name, x.model, true, 64, 5000, 100, 5000, 1e-3, 1e-4, 0.99};
    }
    return p;
  }();
  for (const Preset& p : presets)
    if (p.name == name) return p;
  nn::gpt_preset(name);  // throws listing the known names
  throw Error(str("unknown preset '", name, "'"));
}

void apply_preset(TrainConfig& c, const std::string& name) {
  const Preset& p = find_preset(name);
  c.preset = name;
  c.model = p.model;
  if (!p.has_recipe) return;
  c.batch_size = p.batch_size, c.max_iters = p.max_iters, c.warmup_iters = p.warmup_iters;
  c.lr_decay_iters = p.lr_decay_iters, c.learning_rate = p.learning_rate, c.min_lr = p.min_lr;
  c.beta2 = p.beta2;
}

ResolvedConfig resolve_config(const std::vector<SettingsLayer>& layers, const TrainConfig& base) {
  ResolvedConfig r{base, {}};
  std::string preset_source;
  for (const SettingsLayer& l : layers) {
    auto it = l.values.find("preset");
    if (it != l.values.end())
      r.config.preset = std::get<std::string>(it->second), preset_source = l.source;
  }
  if (!preset_source.empty()) apply_preset(r.config, r.config.preset);
  const nn::GPTConfig before = r.config.model;
  std::string head_source;
  for (const SettingsLayer& l : layers) {
    for (const auto& [name, value] : l.values) {
      const ConfigField& f = field(name);
      if (name == "preset") continue;
      try {
        f.set(r.config, value);
      } catch (const Error& e) {
        throw Error(str(l.source, ": ", e.what()));
      }
      r.explicit_fields.insert(f.name);
      if (name == "n_head") head_source = l.source;
    }
  }
  // A Llama has no biases: arch llama set over a gpt2 model turns them off unless bias is
  // given too.
  if (r.explicit_fields.count("arch") && !r.explicit_fields.count("bias") &&
      r.config.model.arch != before.arch)
    r.config.model.bias = !r.config.model.is_llama();
  // n_kv_head follows n_head unless set: an MHA preset stays MHA whatever n_head is.
  if (!head_source.empty() && !r.explicit_fields.count("n_kv_head")) {
    ATTEND_CHECK(before.n_kv_head == before.n_head, head_source, ": n_head ", r.config.model.n_head,
                 " on a model with n_head ", before.n_head, " and n_kv_head ", before.n_kv_head,
                 " (", r.config.preset, "): give n_kv_head too, to say which attention you mean");
    r.config.model.n_kv_head = r.config.model.n_head;
  }
  if (!preset_source.empty()) {
    r.explicit_fields.insert("preset");
    for (const ConfigField& f : config_fields())
      if (f.group == Group::Model && f.train_flag) r.explicit_fields.insert(f.name);
  }
  return r;
}

SettingsLayer read_config_file(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  std::set<std::string> keys;
  std::string duplicate;
  // A key given twice is an error, not "the last one wins" (top level only).
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& v) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !keys.insert(v.get<std::string>()).second && duplicate.empty())
      duplicate = v.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(str(path, ": invalid JSON at byte ", e.byte));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(path, ": invalid JSON: ", e.what()));
  }
  ATTEND_CHECK(duplicate.empty(), path, ": setting '", duplicate, "' is given twice");
  ATTEND_CHECK(j.is_object(), path, ": expected a JSON object of flag -> value");
  SettingsLayer layer{path, {}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const ConfigField* f = find_field(it.key());
    ATTEND_CHECK(f && f->train_flag, path, ": unknown setting '", it.key(), "'");
    const std::string where = str(path, ": ", f->name);
    const auto& v = it.value();
    const Value want = f->get(TrainConfig{});
    Value got;
    if (v.is_string()) {
      got = parse_value(*f, v.get<std::string>(), where);
    } else if (v.is_boolean() && want.index() == 2) {
      got = v.get<bool>();
    } else if (v.is_number_unsigned() && want.index() == 0 &&
               v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw Error(str(where, ": ", v.get<uint64_t>(), " is out of range for an integer setting"));
    } else if (v.is_number_integer() && want.index() == 0) {
      got = v.get<int64_t>();
    } else if (v.is_number() && want.index() == 1) {
      got = v.get<double>();
    } else {
      std::string shown = v.dump();
      if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
      throw Error(str(where, ": expected ", value_type_name(want), ", got ", shown));
    }
    layer.values[f->name] = got;
  }
  return layer;
}

io::ConfigValues to_values(const TrainConfig& c) {
  io::ConfigValues out;
  for (const ConfigField& f : config_fields()) {
    const Value v = f.get(c);
    if (const bool* b = std::get_if<bool>(&v)) {
      out.emplace_back(f.name, static_cast<int64_t>(*b));
    } else {
      std::visit(
          [&](const auto& x) {
            if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, bool>)
              out.emplace_back(f.name, x);
          },
          v);
    }
  }
  return out;
}

TrainConfig from_values(const io::ConfigValues& values) {
  TrainConfig c;
  for (const auto& [name, stored] : values) {
    const ConfigField* f = find_field(name);
    if (!f) continue;  // fields of other versions
    Value v = std::visit([](const auto& x) -> Value { return x; }, stored);
    const bool want_bool = f->get(c).index() == 2;
    if (want_bool) {
      const int64_t* i = std::get_if<int64_t>(&stored);
      ATTEND_CHECK(i && (*i == 0 || *i == 1), "checkpoint /config ", name,
                   ": expected 0 or 1 (a boolean)");
      v = *i == 1;
    }
    try {
      f->set(c, v);
    } catch (const Error& e) {
      throw Error(str("checkpoint /config ", e.what()));
    }
  }
  // Read by eval and sample before anything validates the whole config.
  ATTEND_CHECK(c.precision == "f32" || c.precision == "bf16",
               "checkpoint /config precision: expected f32 or bf16, got '", c.precision, "'");
  return c;
}

std::string config_to_wire(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [name, v] : to_values(c))
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
            // As bytes: a path need not be UTF-8 (a folder named in Latin-1), JSON text must.
            j.push_back({name, v.index(), std::vector<uint8_t>(x.begin(), x.end())});
          } else {
            j.push_back({name, v.index(), x});
          }
        },
        v);
  return j.dump();
}

TrainConfig config_from_wire(const std::string& text) {
  io::ConfigValues values;
  for (const auto& e : nlohmann::json::parse(text)) {
    const std::string name = e[0].get<std::string>();
    const int kind = e[1].get<int>();
    if (kind == 0) values.emplace_back(name, e[2].get<int64_t>());
    if (kind == 1) values.emplace_back(name, e[2].get<double>());
    if (kind == 2) {
      const auto bytes = e[2].get<std::vector<uint8_t>>();
      values.emplace_back(name, std::string(bytes.begin(), bytes.end()));
    }
  }
  return from_values(values);
}

TrainConfig merge_resume(const ResolvedConfig& req, const TrainConfig& saved) {
  TrainConfig c = saved;
  std::vector<std::string> refused;
  for (const ConfigField& f : config_fields()) {
    const Value want = f.get(req.config), had = f.get(saved);
    if (!req.explicit_fields.count(f.name) || want == had) continue;
    const std::string change =
        str(f.name, " (checkpoint ", format_value(had), ", now ", format_value(want), ")");
    if (f.on_resume == OnResume::Refuse) {
      refused.push_back(change);
      continue;
    }
    if (f.on_resume == OnResume::Warn)
      spdlog::warn("resume: {} changes; the run will not match an uninterrupted one", change);
    else
      spdlog::info("resume: {} changes", change);
    f.set(c, want);
  }
  if (!refused.empty()) {
    std::string msg = "resume: these settings differ from the checkpoint's and cannot change:";
    for (const auto& r : refused) msg += "\n  " + r;
    throw Error(msg);
  }
  return c;
}

}  // namespace attend::train
