#include "convert/peft_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "convert/hf_llama_io.h"
#include "io/safetensors.h"
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
        {"q", "self_attn.q_proj"},  {"k", "self_attn.k_proj"}, {"v", "self_attn.v_proj"},
        {"o", "self_attn.o_proj"},  {"gate", "mlp.gate_proj"}, {"up", "mlp.up_proj"},
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
  const std::vector<std::string> targets = nn::parse_lora_targets(c, c.lora_targets);
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
            name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
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
  std::vector<std::pair<std::string, Tensor>> tensors;
  nlohmann::ordered_json rank_pattern = nlohmann::ordered_json::object(),
                         alpha_pattern = nlohmann::ordered_json::object();
  for (const std::string& module : order) {
    const std::vector<Found>& f = by_module.at(module);
    const std::string key = "base_model.model." + module;
    if (f.size() == 1) {
      Tensor B = kernel::contiguous(f[0].a->B);
      if (c.rotary() && (f[0].target == "q" || f[0].target == "k"))
        B = permute_rope_rows(B, f[0].target == "q" ? c.n_head : c.n_kv_head, HS, true);
      tensors.emplace_back(key + ".lora_A.weight", kernel::contiguous(f[0].a->A));
      tensors.emplace_back(key + ".lora_B.weight", B);
      continue;
    }
    // GPT-2's fused c_attn with adapters on several of q, k, v: one of rank n R.
    const int64_t n = static_cast<int64_t>(f.size()), rows = c.n_embd + 2 * c.n_kv_head * HS;
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
    // PEFT matches a pattern's key as a suffix of the module's name (a regex ending in $)
    const std::string pattern = module.substr(module.find('.') + 1);  // h.N.attn.c_attn
    rank_pattern[pattern] = n * R;
    alpha_pattern[pattern] = alpha * static_cast<double>(n);
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

}  // namespace attend::convert
