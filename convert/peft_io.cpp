#include "convert/peft_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "convert/hf_llama_io.h"
#include "io/safetensors.h"
#include "nn/gpt.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::convert {

namespace fs = std::filesystem;

namespace {

bool peft_owns(const std::string& name) {
  return name == "adapter_model.safetensors" || name == "adapter_config.json";
}

// The Hugging Face module an adapter of `target` on block l sits on, and the suffix
// target_modules names it by.
struct Site {
  std::string module, suffix;
};
Site site(const nn::GPTConfig& c, int64_t l, const std::string& target) {
  const std::string n = std::to_string(l);
  if (c.gated_mlp()) {
    static const std::map<std::string, std::string> llama = {
        {"q", "self_attn.q_proj"}, {"k", "self_attn.k_proj"}, {"v", "self_attn.v_proj"},
        {"o", "self_attn.o_proj"}, {"gate", "mlp.gate_proj"}, {"up", "mlp.up_proj"},
        {"down", "mlp.down_proj"}};
    const std::string& m = llama.at(target);
    return {"model.layers." + n + "." + m, m.substr(m.find('.') + 1)};
  }
  static const std::map<std::string, std::string> gpt2 = {
      {"q", "attn.c_attn"}, {"k", "attn.c_attn"}, {"v", "attn.c_attn"},
      {"o", "attn.c_proj"}, {"fc", "mlp.c_fc"},   {"proj", "mlp.c_proj"}};
  const std::string& m = gpt2.at(target);
  return {"transformer.h." + n + "." + m, m};
}

// An adapter and the target it is on.
struct Found {
  std::string target;
  const nn::LoraAdapter* a;
};

}  // namespace

ExportResult export_peft(const ExportSource& m, const fs::path& out, const std::string& base) {
  const nn::GPTConfig& c = m.model.config;
  ATTEND_CHECK(c.lora_rank > 0, "export --format peft: ", m.name,
               " has no LoRA adapters (train with --lora_rank)");
  const int64_t R = c.lora_rank, HS = c.n_embd / c.n_head;
  const double alpha = c.lora_alpha;
  // Adapters grouped by the Hugging Face module they go on, in the model's order; each
  // found by its parameter name (transformer.h.N.<linear>.lora_<target>).
  std::map<std::string, std::vector<Found>> by_module;
  std::vector<std::string> order, suffixes;
  std::vector<std::string> targets = nn::parse_lora_targets(c, c.lora_targets);
  // The LM head's adapter (an untied head only) is PEFT's LoRA on the module lm_head.
  const bool head = std::erase(targets, std::string("head")) > 0;
  ATTEND_CHECK(c.lora_new_tokens == 0, "export --format peft: ", m.name, " trains the rows of ",
               c.lora_new_tokens, " added tokens (lora_new_tokens), which attend does not write "
               "as PEFT (its trainable_token_indices) yet; export --merge writes the merged model");
  std::map<std::string, const nn::LoraAdapter*> adapters;
  for (auto& [name, mod] : const_cast<nn::GPT&>(m.model).named_modules())
    if (auto* a = dynamic_cast<nn::LoraAdapter*>(mod)) adapters[name] = a;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (const std::string& t : targets) {
      const Site s = site(c, l, t);
      std::string ours;
      for (const auto& [name, a] : adapters) {
        const std::string tail = ".lora_" + t;
        if (name.rfind("transformer.h." + std::to_string(l) + ".", 0) == 0 &&
            name.size() >= tail.size() &&
            name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
          ours = name;
      }
      ATTEND_INTERNAL_CHECK(!ours.empty(), "export --format peft: no adapter for ", t, " on block ",
                            l);
      if (!by_module.count(s.module)) order.push_back(s.module);
      by_module[s.module].push_back({t, adapters.at(ours)});
      if (std::find(suffixes.begin(), suffixes.end(), s.suffix) == suffixes.end())
        suffixes.push_back(s.suffix);
    }
  }
  if (head) {
    ATTEND_INTERNAL_CHECK(adapters.count("lm_head.lora_head"), "export --format peft: no head "
                          "adapter");
    order.push_back("lm_head");
    by_module["lm_head"].push_back({"head", adapters.at("lm_head.lora_head")});
    suffixes.push_back("lm_head");
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  nlohmann::ordered_json rank_pattern = nlohmann::ordered_json::object(),
                         alpha_pattern = nlohmann::ordered_json::object();
  for (const std::string& module : order) {
    const std::vector<Found>& f = by_module.at(module);
    const std::string key = "base_model.model." + module;
    const int64_t rows =
        f[0].target == "q" || f[0].target == "k" || f[0].target == "v"
            ? (c.gated_mlp() ? f[0].a->hi - f[0].a->lo : c.n_embd + 2 * c.n_kv_head * HS)
            : f[0].a->hi - f[0].a->lo;
    if (f.size() == 1 && f[0].a->hi - f[0].a->lo == rows) {  // the module's whole output
      Tensor B = kernel::contiguous(f[0].a->B);
      if (c.rotary() && (f[0].target == "q" || f[0].target == "k"))
        B = permute_rope_rows(B, f[0].target == "q" ? c.n_head : c.n_kv_head, HS, true);
      tensors.emplace_back(key + ".lora_A.weight", kernel::contiguous(f[0].a->A));
      tensors.emplace_back(key + ".lora_B.weight", B);
      continue;
    }
    // GPT-2's fused c_attn with adapters on some of q, k, v: one of rank n R on all its rows.
    const int64_t n = static_cast<int64_t>(f.size());
    Tensor A = empty({n * R, c.n_embd}), B = zeros({rows, n * R});
    for (int64_t i = 0; i < n; ++i) {
      const nn::LoraAdapter& a = *f[static_cast<size_t>(i)].a;
      const Tensor ai = kernel::contiguous(a.A), bi = kernel::contiguous(a.B);
      std::copy_n(ai.data<float>(), R * c.n_embd, A.data<float>() + i * R * c.n_embd);
      for (int64_t r = 0; r < a.hi - a.lo; ++r)
        std::copy_n(bi.data<float>() + r * R, R, B.data<float>() + (a.lo + r) * n * R + i * R);
    }
    tensors.emplace_back(key + ".lora_A.weight", A);
    tensors.emplace_back(key + ".lora_B.weight", B);
    // PEFT matches a pattern's key as a suffix of the module's name (a regex ending in $).
    const std::string pattern = module.substr(module.find('.') + 1);  // h.N.attn.c_attn
    if (n > 1) {
      rank_pattern[pattern] = n * R;
      alpha_pattern[pattern] = alpha * static_cast<double>(n);
    }
  }
  nlohmann::ordered_json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base},
      {"r", R},
      {"lora_alpha", alpha},
      {"lora_dropout", c.lora_dropout},
      {"target_modules", suffixes},
      {"fan_in_fan_out", !c.gated_mlp()},
      {"bias", "none"},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"modules_to_save", nullptr},
      {"rank_pattern", rank_pattern},
      {"alpha_pattern", alpha_pattern},
  };
  StagedFolder stage(out, "export", peft_owns);
  io::write_safetensors(stage.path() / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(stage.path() / "adapter_config.json", cfg.dump(2) + "\n");
  stage.commit();
  return {out, static_cast<int64_t>(tensors.size())};
}

namespace {

// A PEFT module name as (block, the targets it carries), or block -1 if it is none of ours.
constexpr int64_t kHead = -2;  // targets_of's "layer" for the LM head (not on a block)
std::pair<int64_t, std::vector<std::string>> targets_of(const nn::GPTConfig& c,
                                                        const std::string& module) {
  if (module == "lm_head" && !c.tied_head()) return {kHead, {"head"}};
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (const std::string& t : nn::lora_target_names(c)) {
      if (t == "head") continue;  // lm_head, above
      const Site s = site(c, l, t);
      if (s.module != module) continue;
      if (!c.gated_mlp() && s.suffix == "attn.c_attn") return {l, {"q", "k", "v"}};
      return {l, {t}};
    }
  return {-1, {}};
}

// rank_pattern / alpha_pattern: the value of the first key that is the module's name or a
// dot-separated suffix of it, else `fallback`.
double pattern(const nlohmann::json& patterns, const std::string& module, double fallback) {
  if (!patterns.is_object()) return fallback;
  for (const auto& [key, value] : patterns.items())
    if ((module == key || (module.size() > key.size() &&
                           module.compare(module.size() - key.size(), key.size(), key) == 0 &&
                           module[module.size() - key.size() - 1] == '.')) &&
        value.is_number())
      return value.get<double>();
  return fallback;
}

}  // namespace

std::unique_ptr<nn::GPT> import_peft(const nn::GPT& base, const fs::path& dir) {
  const nn::GPTConfig& bc = base.config;
  ATTEND_CHECK(bc.lora_rank == 0, "import --adapter: the base already has LoRA adapters");
  const fs::path cfg_path = dir / "adapter_config.json",
                 st_path = dir / "adapter_model.safetensors";
  const std::string cp = cfg_path.string();
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_file(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("import --adapter: ", cp, ": not JSON (", e.what(), ")"));
  }
  ATTEND_CHECK(cfg.is_object(), "import --adapter: ", cp, ": expected a JSON object");
  auto field = [&](const char* k) -> const nlohmann::json* {
    auto it = cfg.find(k);
    return it == cfg.end() || it->is_null() ? nullptr : &*it;
  };
  const nlohmann::json* type = field("peft_type");
  ATTEND_CHECK(type && type->is_string() && *type == "LORA", "import --adapter: ", cp,
               ": peft_type is ", type ? type->dump() : "missing", "; attend reads LORA adapters");
  for (const char* k : {"use_dora", "use_rslora"}) {
    const nlohmann::json* v = field(k);
    ATTEND_CHECK(!v || *v == false, "import --adapter: ", cp, ": ", k, " is ", v ? v->dump() : "",
                 "; attend's LoRA is the plain formula (alpha / r) B A");
  }
  const nlohmann::json* bias = field("bias");
  ATTEND_CHECK(!bias || *bias == "none", "import --adapter: ", cp, ": bias is ", bias->dump(),
               "; attend's adapters have no biases");
  const nlohmann::json* save = field("modules_to_save");
  ATTEND_CHECK(!save || (save->is_array() && save->empty()), "import --adapter: ", cp,
               ": modules_to_save ", save ? save->dump() : "",
               " (whole trained modules) is not read by attend");
  const nlohmann::json *r0 = field("r"), *a0 = field("lora_alpha"), *d0 = field("lora_dropout");
  ATTEND_CHECK(r0 && r0->is_number_integer() && *r0 >= 1 && *r0 <= (int64_t{1} << 20) && a0 &&
                   a0->is_number() && a0->get<double>() > 0,
               "import --adapter: ", cp,
               ": expected an integer r >= 1 and a number lora_alpha > 0");
  const double dropout = d0 && d0->is_number() ? d0->get<double>() : 0.0;
  const nlohmann::json empty_object = nlohmann::json::object();
  const nlohmann::json* ranks = field("rank_pattern");
  const nlohmann::json* alphas = field("alpha_pattern");

  const io::SafetensorsFile f(st_path);
  const std::string sp = st_path.string();
  const std::string prefix = "base_model.model.";
  struct Module {
    int64_t layer;
    std::vector<std::string> targets;
    std::string a_key, b_key;
    int64_t rank;
  };
  std::map<std::string, Module> modules;
  for (const auto& [key, e] : f.entries()) {
    const bool is_a =
        key.size() > prefix.size() + 14 && key.compare(key.size() - 14, 14, ".lora_A.weight") == 0;
    const bool is_b =
        key.size() > prefix.size() + 14 && key.compare(key.size() - 14, 14, ".lora_B.weight") == 0;
    ATTEND_CHECK(key.rfind(prefix, 0) == 0 && (is_a || is_b), "import --adapter: ", sp, ": '",
                 printable(key, 80), "' is not base_model.model.<module>.lora_A/lora_B.weight");
    const std::string module = key.substr(prefix.size(), key.size() - prefix.size() - 14);
    auto [layer, targets] = targets_of(bc, module);
    ATTEND_CHECK(layer >= 0 || layer == kHead, "import --adapter: ", sp, ": '",
                 printable(module, 80), "' is not a module attend puts adapters on (",
                 describe(bc), bc.tied_head() ? "; its LM head is tied to the embedding" : "",
                 ")");
    Module& m = modules[module];
    m.layer = layer, m.targets = targets;
    (is_a ? m.a_key : m.b_key) = key;
  }
  ATTEND_CHECK(!modules.empty(), "import --adapter: ", sp, " holds no adapters");
  // Shapes, one rank, one scale, the same targets on every block: before anything is read.
  std::map<int64_t, std::vector<std::string>> per_layer;
  int64_t R = -1;
  double scale = 0;
  for (auto& [module, m] : modules) {
    ATTEND_CHECK(!m.a_key.empty() && !m.b_key.empty(), "import --adapter: ", sp, ": ", module,
                 " has ", m.a_key.empty() ? "no lora_A" : "no lora_B");
    const Shape& a = f.entries().at(m.a_key).shape;
    const Shape& b = f.entries().at(m.b_key).shape;
    // The module's inputs and output rows: C or H in; q, o, down, proj C out, k, v KVH HS,
    // gate, up, fc H, GPT-2's whole c_attn C + 2 KVH HS.
    const int64_t C = bc.n_embd, kv = bc.n_kv_head * (C / bc.n_head), H = bc.mlp_hidden();
    const std::string& t = m.targets[0];
    const int64_t in = t == "down" || t == "proj" ? H : C;
    const int64_t rows = m.targets.size() == 3                                ? C + 2 * kv
                         : t == "q" || t == "o" || t == "down" || t == "proj" ? C
                         : t == "k" || t == "v"                               ? kv
                         : t == "head"                                        ? bc.vocab_size
                                                                              : H;
    ATTEND_CHECK(
        a.size() == 2 && b.size() == 2 && a[1] == in && b[0] == rows && a[0] == b[1] && a[0] >= 1,
        "import --adapter: ", sp, ": ", module, ": lora_A ", shape_str(a), " and lora_B ",
        shape_str(b), " do not fit the base (A (r, ", in, "), B (", rows, ", r))");
    m.rank = a[0];
    const double r_m = pattern(ranks ? *ranks : empty_object, module, r0->get<double>());
    const double alpha_m = pattern(alphas ? *alphas : empty_object, module, a0->get<double>());
    ATTEND_CHECK(r_m == static_cast<double>(m.rank), "import --adapter: ", sp, ": ", module,
                 " has rank ", m.rank, " but adapter_config.json says ", r_m);
    if (R < 0) scale = alpha_m / r_m;
    R = std::max(R, m.rank);
    ATTEND_CHECK(std::abs(alpha_m / r_m - scale) <= 1e-12 * scale, "import --adapter: ", cp, ": ",
                 module, " has scale lora_alpha / r = ", alpha_m / r_m, ", others ", scale,
                 "; attend's adapters share one scale");
    if (m.layer == kHead) continue;  // the head: once, not on every block
    for (const std::string& t : m.targets) per_layer[m.layer].push_back(t);
  }
  const bool head = modules.count("lm_head") > 0;
  ATTEND_CHECK(R <= bc.n_embd, "import --adapter: ", cp, ": rank ", R, " exceeds n_embd ",
               bc.n_embd);
  std::vector<std::string> targets;  // in the family's order (the head last)
  if (!per_layer.empty())
    for (const std::string& t : nn::lora_target_names(bc))
      if (std::find(per_layer.begin()->second.begin(), per_layer.begin()->second.end(), t) !=
          per_layer.begin()->second.end())
        targets.push_back(t);
  for (int64_t l = 0; l < bc.n_layer; ++l) {
    std::vector<std::string> got =
        per_layer.count(l) ? per_layer.at(l) : std::vector<std::string>{};
    std::sort(got.begin(), got.end());
    std::vector<std::string> want = targets;
    std::sort(want.begin(), want.end());
    ATTEND_CHECK(got == want, "import --adapter: ", sp, ": block ", l,
                 " has adapters on other modules than block ", per_layer.begin()->first,
                 "'s; attend puts the same targets on every block");
  }
  if (head) targets.push_back("head");
  nn::GPTConfig c = bc;
  c.lora_rank = R, c.lora_alpha = scale * static_cast<double>(R), c.lora_dropout = dropout;
  c.lora_targets.clear();
  for (const std::string& t : targets) c.lora_targets += (c.lora_targets.empty() ? "" : ",") + t;
  c.validate();
  auto model = std::make_unique<nn::GPT>(c, 0, false);
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : base.state_dict()) state[name] = t;
  const int64_t HS = c.n_embd / c.n_head;
  for (const auto& [module, m] : modules) {
    // A rank below R is padded with zero rows of A and zero columns of B: the same update
    // (and a zero pair gets no gradient, so it stays zero if trained on).
    Tensor A = f.read(m.a_key), B = f.read(m.b_key);
    if (m.rank < R) {
      Tensor a = zeros({R, A.size(1)}), b = zeros({B.size(0), R});
      std::copy_n(A.data<float>(), A.numel(), a.data<float>());
      for (int64_t r = 0; r < B.size(0); ++r)
        std::copy_n(B.data<float>() + r * m.rank, m.rank, b.data<float>() + r * R);
      A = a, B = b;
    }
    for (const std::string& t : m.targets) {
      if (t == "head") {
        state["lm_head.lora_head.A"] = A;
        state["lm_head.lora_head.B"] = B;
        continue;
      }
      std::string ours;  // the adapter's parameter prefix in attend's names
      for (const auto& [name, _] : model->named_parameters()) {
        const std::string tail = ".lora_" + t + ".A";
        if (name.rfind("transformer.h." + std::to_string(m.layer) + ".", 0) == 0 &&
            name.size() > tail.size() &&
            name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
          ours = name.substr(0, name.size() - 2);
      }
      ATTEND_INTERNAL_CHECK(!ours.empty(), "import --adapter: no adapter ", t, " on block ",
                            m.layer);
      state[ours + ".A"] = A;
      Tensor b = B;
      if (m.targets.size() == 3) {  // GPT-2's c_attn: this target's rows
        const int64_t C = c.n_embd, kv = c.n_kv_head * HS;
        const int64_t lo = t == "q" ? 0 : t == "k" ? C : C + kv, n = t == "q" ? C : kv;
        b = kernel::contiguous(kernel::narrow(B, 0, lo, n));
      } else if (c.rotary() && (t == "q" || t == "k")) {
        b = permute_rope_rows(B, t == "q" ? c.n_head : c.n_kv_head, HS, false);
      }
      state[ours + ".B"] = b;
    }
  }
  model->load_state_dict(state);
  return model;
}

}  // namespace attend::convert
