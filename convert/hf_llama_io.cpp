#include "convert/hf_llama_io.h"

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <set>

#include "data/hf_tokenizer.h"
#include "io/safetensors.h"
#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::convert {

namespace fs = std::filesystem;

Tensor permute_rope_rows(const Tensor& w, int64_t heads, int64_t HS, bool to_hf) {
  const Tensor c = kernel::contiguous(w);
  const int64_t cols = c.size(1);
  Tensor out = empty(c.shape(), c.dtype());
  const float* src = c.data<float>();
  float* dst = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < HS / 2; ++i)
      for (int64_t r = 0; r < 2; ++r) {
        const int64_t ours = h * HS + 2 * i + r, theirs = h * HS + r * (HS / 2) + i;
        const int64_t from = to_hf ? ours : theirs, to = to_hf ? theirs : ours;
        std::copy(src + from * cols, src + (from + 1) * cols, dst + to * cols);
      }
  return out;
}

namespace {

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

// Note [Llama's names]: one row per Hugging Face tensor, in Hugging Face's order, read by
// export, import and the checks alike: its name and shape, the attend parameter it is
// (or the rows of it, for the fused q/k/v and gate/up weights), and whether its rows are
// RoPE-permuted within each of `rope_heads` heads (q_proj, k_proj: Note [RoPE]).
struct NameRow {
  std::string hf;
  Shape shape;
  std::string ours;
  int64_t row0 = 0, rows = -1;  // rows [row0, row0 + rows) of ours; -1: all of it
  int64_t rope_heads = 0;
};

std::vector<NameRow> hf_llama_names(const nn::GPTConfig& c) {
  const int64_t C = c.n_embd, kv = c.n_kv_head * (C / c.n_head), H = c.mlp_hidden();
  const int64_t V = c.vocab_size;
  std::vector<NameRow> t{{"model.embed_tokens.weight", {V, C}, "transformer.wte.weight"}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = layer(l), a = "transformer.h." + std::to_string(l) + ".";
    const std::string qkv = a + "attn.c_attn.weight", fc = a + "mlp.c_fc.weight";
    t.push_back({p + "self_attn.q_proj.weight", {C, C}, qkv, 0, C, c.n_head});
    t.push_back({p + "self_attn.k_proj.weight", {kv, C}, qkv, C, kv, c.n_kv_head});
    t.push_back({p + "self_attn.v_proj.weight", {kv, C}, qkv, C + kv, kv});
    t.push_back({p + "self_attn.o_proj.weight", {C, C}, a + "attn.c_proj.weight"});
    t.push_back({p + "mlp.gate_proj.weight", {H, C}, fc, 0, H});
    t.push_back({p + "mlp.up_proj.weight", {H, C}, fc, H, H});
    t.push_back({p + "mlp.down_proj.weight", {C, H}, a + "mlp.c_proj.weight"});
    t.push_back({p + "input_layernorm.weight", {C}, a + "ln_1.weight"});
    t.push_back({p + "post_attention_layernorm.weight", {C}, a + "ln_2.weight"});
  }
  t.push_back({"model.norm.weight", {C}, "transformer.ln_f.weight"});
  if (!c.tie_embeddings) t.push_back({"lm_head.weight", {V, C}, "lm_head.weight"});
  return t;
}

// The attend tensor a row is: the parameter, or a view of its rows.
Tensor attend_view(const std::map<std::string, Tensor>& params, const NameRow& r) {
  auto it = params.find(r.ours);
  ATTEND_INTERNAL_CHECK(it != params.end(), "no parameter ", r.ours, " for ", r.hf);
  const Tensor v = r.rows < 0 ? it->second : kernel::narrow(it->second, 0, r.row0, r.rows);
  ATTEND_INTERNAL_CHECK(v.shape() == r.shape, r.hf, " is ", shape_str(v.shape()), ", its row says ",
                        shape_str(r.shape));
  return v;
}

std::map<std::string, Tensor> parameters_by_name(const nn::GPT& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : m.named_parameters()) out.emplace(name, t);
  return out;
}

// attend's parameters as Hugging Face's tensors, in Hugging Face's order.
std::vector<std::pair<std::string, Tensor>> to_hf(const nn::GPT& m) {
  const int64_t HS = m.config.n_embd / m.config.n_head;
  const std::map<std::string, Tensor> params = parameters_by_name(m);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const NameRow& r : hf_llama_names(m.config)) {
    const Tensor v = attend_view(params, r);
    out.emplace_back(r.hf, r.rope_heads > 0 ? permute_rope_rows(v, r.rope_heads, HS, true) : v);
  }
  return out;
}

// The files an export writes, exactly (and the temporaries of an interrupted one): an
// existing --out holding anything else is refused, not replaced.
bool is_shard_name(const std::string& n) {  // model-00001-of-00005.safetensors
  if (n.size() != 32 || n.rfind("model-", 0) != 0 || n.compare(11, 4, "-of-") != 0 ||
      n.compare(20, 12, ".safetensors") != 0)
    return false;
  for (const size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (n[i] < '0' || n[i] > '9') return false;
  return true;
}

bool export_owns(const std::string& name) {
  const size_t tmp = name.find(".tmp.");
  const std::string base = tmp == std::string::npos ? name : name.substr(0, tmp);
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", "config.json",
                        "tokenizer.json", "encoder.json", "vocab.bpe", "tokenizer_config.json"})
    if (base == f) return true;
  return is_shard_name(base);
}

std::string hf_dtype(const std::string& d) {
  if (d == "f32") return "F32";
  if (d == "bf16") return "BF16";
  if (d == "f16") return "F16";
  throw Error(str("export: --dtype must be f32, bf16 or f16, got '", printable(d), "'"));
}

// One of the numbers config.json must give, checked.
struct Json {
  const nlohmann::json& j;
  const fs::path& file;
  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    ATTEND_CHECK(j.contains(key) && j[key].is_number_integer(), file.string(), ": ", key,
                 " must be an integer");
    ATTEND_CHECK(!j[key].is_number_unsigned() ||
                     j[key].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                 file.string(), ": ", key, " is ", j[key].dump(), ", too large");
    const int64_t v = j[key].get<int64_t>();
    ATTEND_CHECK(v >= lo && v <= hi, file.string(), ": ", key, " is ", v, "; expected ", lo,
                 " to ", hi);
    return v;
  }
  double number(const char* key, double fallback) const {
    if (!j.contains(key)) return fallback;
    ATTEND_CHECK(j[key].is_number(), file.string(), ": ", key, " must be a number, got ",
                 j[key].dump().substr(0, 40));
    return j[key].get<double>();
  }
  bool absent_or_false(const char* key) const {
    return !j.contains(key) || j[key].is_null() || (j[key].is_boolean() && !j[key].get<bool>());
  }
};

nlohmann::json read_json(const fs::path& file) {
  try {
    nlohmann::json j = nlohmann::json::parse(read_file(file));
    ATTEND_CHECK(j.is_object(), file.string(), ": expected a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(file.string(), ": invalid JSON: ", e.what()));
  }
}

nn::GPTConfig read_llama_config(const fs::path& file) {
  const nlohmann::json j = read_json(file);
  const Json g{j, file};
  nn::GPTConfig c = nn::gpt_preset("llama-char");
  c.hidden_dim = 0;
  c.vocab_size = g.integer("vocab_size", 1, int64_t{1} << 31);
  c.n_embd = g.integer("hidden_size", 1, int64_t{1} << 20);
  c.hidden_dim = g.integer("intermediate_size", 1, int64_t{1} << 24);
  c.n_layer = g.integer("num_hidden_layers", 1, 1 << 16);
  c.n_head = g.integer("num_attention_heads", 1, 1 << 16);
  c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                    ? g.integer("num_key_value_heads", 1, 1 << 16)
                    : c.n_head;
  c.block_size = g.integer("max_position_embeddings", 1, int64_t{1} << 24);
  c.norm_eps = g.number("rms_norm_eps", 1e-6);
  c.rope_theta = g.number("rope_theta", 10000.0);
  // As transformers' LlamaConfig and MistralConfig read them (docs/formats.md, "config.json
  // as Hugging Face reads it"): tie_word_embeddings absent or null is false (their default);
  // anything but a boolean is refused, as Hugging Face would tie for any truthy value.
  c.tie_embeddings = false;
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    ATTEND_CHECK(j["tie_word_embeddings"].is_boolean(), file.string(),
                 ": tie_word_embeddings is ", j["tie_word_embeddings"].dump().substr(0, 60),
                 "; expected true, false or null");
    c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  // sliding_window: Mistral's only (LlamaConfig has none, LlamaAttention applies none);
  // MistralConfig's default is 4096, null turns it off.
  const bool mistral = j["model_type"] == "mistral";
  c.sliding_window = 0;
  if (!mistral && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    spdlog::warn("import: {}: sliding_window {} ignored: model_type llama has no sliding window "
                 "(Hugging Face's LlamaAttention applies none)",
                 file.string(), j["sliding_window"].dump().substr(0, 60));
  } else if (mistral && !j.contains("sliding_window")) {
    c.sliding_window = 4096;
  } else if (mistral && !j["sliding_window"].is_null()) {
    c.sliding_window = g.integer("sliding_window", 1, int64_t{1} << 24);
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    ATTEND_CHECK(g.integer("head_dim", 1, 1 << 16) * c.n_head == c.n_embd, file.string(),
                 ": head_dim x num_attention_heads must equal hidden_size (attend's heads "
                 "split C)");
  if (j.contains("hidden_act"))  // transformers' ACT2FN: "swish" is SiLU too
    ATTEND_CHECK(j["hidden_act"] == "silu" || j["hidden_act"] == "swish", file.string(),
                 ": hidden_act is ", j["hidden_act"].dump().substr(0, 60),
                 "; attend's Llama uses silu (SwiGLU)");
  for (const char* k : {"rope_scaling", "attention_bias", "mlp_bias"})
    ATTEND_CHECK(g.absent_or_false(k), file.string(), ": ", k, " is ", j[k].dump().substr(0, 60),
                 "; attend's Llama has no ", k);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(str(file.string(), ": ", e.what()));
  }
  return c;
}

std::unique_ptr<data::Tokenizer> llama_tokenizer(const ImportOptions& o, const fs::path& dir) {
  if (!o.tokenizer.empty()) return data::tokenizer_from_arg(o.tokenizer);
  std::error_code ec;
  ATTEND_CHECK(fs::exists(dir / "tokenizer.json", ec) || !fs::exists(dir / "tokenizer.model", ec),
               dir.string(), ": only a SentencePiece tokenizer.model (not supported: attend reads "
               "byte-level BPE tokenizers in Hugging Face's tokenizer.json); give --tokenizer");
  ATTEND_CHECK(fs::exists(dir / "tokenizer.json", ec), dir.string(),
               ": no tokenizer.json; give --tokenizer (char:PATH, gpt2, hf:PATH or a saved "
               "tokenizer folder)");
  return data::load_tokenizer(dir);  // attend's or Hugging Face's tokenizer.json
}

}  // namespace

bool is_hf_llama_folder(const fs::path& config_json) {
  std::error_code ec;
  if (!fs::is_regular_file(config_json, ec)) return false;
  nlohmann::json j;
  try {
    j = read_json(config_json);
  } catch (const Error&) {
    return false;  // the GPT-2 reader names the problem
  }
  if (!j.contains("model_type")) return false;  // GPT2Config.from_pretrained reads such a file
  const nlohmann::json& t = j["model_type"];
  if (t == "llama" || t == "mistral") return true;
  ATTEND_CHECK(t == "gpt2", config_json.string(), ": model_type ", t.dump().substr(0, 60),
               " is not supported (gpt2, llama, mistral)");
  return false;
}

ExportResult export_hf_llama(const ExportSource& m, const LlamaExportOptions& o) {
  const std::string dtype = hf_dtype(o.dtype);
  ATTEND_CHECK(o.shard_bytes >= 0, "export: --shard_size must be >= 0, got ", o.shard_bytes);
  const nn::GPTConfig& c = m.model.config;
  ATTEND_CHECK(c.is_llama(), "export: ", m.name,
               " is a GPT-2 model (arch gpt2); the Llama layout is for arch llama");
  const std::vector<std::pair<std::string, Tensor>> tensors = to_hf(m.model);
  StagedFolder stage(o.out, "export", export_owns);
  const fs::path out = stage.path();
  const int64_t width = dtype == "F32" ? 4 : 2;
  // Shards in order, each up to shard_bytes (a tensor larger than that alone in its shard).
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& e : tensors) {
    const int64_t bytes = e.second.numel() * width;
    if (o.shard_bytes > 0 && in_shard > 0 && in_shard + bytes > o.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(e);
    in_shard += bytes;
    total += bytes;
  }
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  if (shards.size() == 1) {
    io::write_safetensors(out / "model.safetensors", tensors, meta, dtype);
  } else {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                    {"weight_map", nlohmann::ordered_json::object()}};
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      io::write_safetensors(out / name, shards[s], meta, dtype);
      for (const auto& [t, _] : shards[s]) index["weight_map"][t] = name;
    }
    write_file_atomic(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  const bool mistral = c.sliding_window > 0;
  nlohmann::ordered_json j = {
      {"architectures", {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", mistral ? "mistral" : "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.mlp_hidden()},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_kv_head},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.block_size},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_embeddings},
      {"sliding_window", mistral ? nlohmann::ordered_json(c.sliding_window) : nullptr},
      {"attention_bias", false},
      {"torch_dtype", o.dtype == "f32" ? "float32" : o.dtype == "bf16" ? "bfloat16" : "float16"},
      {"attend_tokenizer", m.tokenizer.spec().name},
  };
  write_file_atomic(out / "config.json", j.dump(2) + "\n");
  if (m.tokenizer.spec().kind == "bpe") {
    // tokenizer.json, and a tokenizer_config.json naming the class that reads it alone
    // (Llama 3's own folders do the same): LlamaTokenizer's defaults would add a BOS
    // token "<s>" that an attend vocabulary does not have.
    write_file_atomic(out / "tokenizer.json", data::hf_tokenizer_json(m.tokenizer.spec()));
    const nlohmann::ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                       {"model_max_length", c.block_size},
                                       {"clean_up_tokenization_spaces", false}};
    write_file_atomic(out / "tokenizer_config.json", tc.dump(2) + "\n");
  } else {
    m.tokenizer.save(out);  // Hugging Face has no byte-level form of a char vocabulary
  }
  stage.commit();
  return {o.out, static_cast<int64_t>(tensors.size())};
}

Imported import_hf_llama(const ImportOptions& o) {
  std::error_code ec;
  ATTEND_CHECK(!o.from.empty(), "import: --from is required (a folder)");
  ATTEND_CHECK(fs::is_directory(o.from, ec), o.from, ": a Llama import reads a folder");
  const fs::path dir = o.from;
  const fs::path config_file = o.config.empty() ? dir / "config.json" : fs::path(o.config);
  const nn::GPTConfig c = read_llama_config(config_file);
  const io::SafetensorsFolder folder(dir);
  // Before anything is read or allocated: the tensors the config implies, by name and
  // shape (Note [Llama's names]), then the memory.
  const std::vector<NameRow> names = hf_llama_names(c);
  std::set<std::string> expected;
  std::string missing, extra;
  for (const NameRow& r : names) {
    expected.insert(r.hf);
    auto it = folder.entries().find(r.hf);
    if (it == folder.entries().end()) {
      missing += ' ' + r.hf;
      continue;
    }
    ATTEND_CHECK(it->second.entry->shape == r.shape, it->second.file->path().string(), ": ", r.hf,
                 " has shape ", shape_str(it->second.entry->shape), ", expected ",
                 shape_str(r.shape), " for ", config_file.string());
  }
  for (const auto& [name, _] : folder.entries())
    if (!expected.count(name) && !(c.tie_embeddings && name == "lm_head.weight") &&
        name.find("rotary_emb.inv_freq") == std::string::npos)
      extra += ' ' + printable(name);
  ATTEND_CHECK(missing.empty() && extra.empty(), dir.string(),
               ": the tensors do not match a Llama of ", config_file.string(), ";",
               missing.empty() ? "" : " missing:", missing, extra.empty() ? "" : " unexpected:",
               extra);
  check_import_memory(dir.string(), c);
  Imported r;
  r.model = std::make_unique<nn::GPT>(c, 0, false);  // every parameter is copied below
  const nn::GPT& model = *r.model;
  const std::map<std::string, Tensor> params = parameters_by_name(model);
  const int64_t HS = c.n_embd / c.n_head;
  NoGradGuard no_grad;
  for (const NameRow& row : names) {
    const Tensor t = folder.read(row.hf);
    kernel::copy_(attend_view(params, row),
                  row.rope_heads > 0 ? permute_rope_rows(t, row.rope_heads, HS, false) : t);
  }
  if (c.tie_embeddings && folder.entries().count("lm_head.weight"))
    spdlog::warn("import: {}: tie_word_embeddings is true, so (as Hugging Face does) the stored "
                 "lm_head.weight is ignored and embed_tokens serves both",
                 dir.string());
  r.tensors = static_cast<int64_t>(names.size());
  const std::string bad = nn::first_non_finite(model.named_parameters());
  ATTEND_CHECK(bad.empty(), dir.string(), ": ", bad, " holds NaN or infinite values");
  auto tok = llama_tokenizer(o, dir);
  ATTEND_CHECK(tok->vocab_size() == c.vocab_size, "import: the tokenizer ", tok->spec().name,
               " has ", tok->vocab_size(), " tokens, ", config_file.string(), "'s vocab_size is ",
               c.vocab_size);
  r.tokenizer = std::move(tok);
  return r;
}

}  // namespace attend::convert
