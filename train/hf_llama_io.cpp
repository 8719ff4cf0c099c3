#include "train/hf_llama_io.h"

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
#include "train/model_io.h"
#include "train/step.h"

namespace attend::train {

namespace fs = std::filesystem;

namespace {

// Rows of one projection (H heads of HS rows) from attend's pair order to Hugging Face's
// (to_hf) or back: within each head, attend row 2i + r is Hugging Face row r HS/2 + i.
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

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

// attend's parameters as Hugging Face's tensors, in Hugging Face's order.
std::vector<std::pair<std::string, Tensor>> to_hf(const nn::GPT& m) {
  const nn::GPTConfig& c = m.config;
  const int64_t C = c.n_embd, HS = C / c.n_head, kv = c.n_kv_head * HS, H = c.mlp_hidden();
  std::vector<std::pair<std::string, Tensor>> out;
  const auto& t = *m.transformer;
  out.emplace_back("model.embed_tokens.weight", t.wte->weight);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const nn::Block& b = (*t.h)[static_cast<size_t>(l)];
    const Tensor& qkv = b.attn->c_attn->weight;
    const std::string p = layer(l);
    out.emplace_back(p + "self_attn.q_proj.weight",
                     permute_rope_rows(kernel::narrow(qkv, 0, 0, C), c.n_head, HS, true));
    out.emplace_back(p + "self_attn.k_proj.weight",
                     permute_rope_rows(kernel::narrow(qkv, 0, C, kv), c.n_kv_head, HS, true));
    out.emplace_back(p + "self_attn.v_proj.weight", kernel::narrow(qkv, 0, C + kv, kv));
    out.emplace_back(p + "self_attn.o_proj.weight", b.attn->c_proj->weight);
    out.emplace_back(p + "mlp.gate_proj.weight", kernel::narrow(b.mlp->c_fc->weight, 0, 0, H));
    out.emplace_back(p + "mlp.up_proj.weight", kernel::narrow(b.mlp->c_fc->weight, 0, H, H));
    out.emplace_back(p + "mlp.down_proj.weight", b.mlp->c_proj->weight);
    out.emplace_back(p + "input_layernorm.weight", b.ln_1->weight);
    out.emplace_back(p + "post_attention_layernorm.weight", b.ln_2->weight);
  }
  out.emplace_back("model.norm.weight", t.ln_f->weight);
  if (!c.tie_embeddings) out.emplace_back("lm_head.weight", m.lm_head->weight);
  return out;
}

bool export_owns(const std::string& name) {
  if (name == "model.safetensors.index.json" || name == "config.json" ||
      name == "tokenizer.json" || name == "encoder.json" || name == "vocab.bpe" ||
      name == "generation_config.json" || name == "tokenizer_config.json")
    return true;
  return name.rfind("model", 0) == 0 && name.find(".safetensors") != std::string::npos;
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
  c.tie_embeddings = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()
                         ? j["tie_word_embeddings"].get<bool>()
                         : false;  // LlamaConfig's default
  c.sliding_window = j.contains("sliding_window") && !j["sliding_window"].is_null()
                         ? g.integer("sliding_window", 1, int64_t{1} << 24)
                         : 0;
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    ATTEND_CHECK(g.integer("head_dim", 1, 1 << 16) * c.n_head == c.n_embd, file.string(),
                 ": head_dim x num_attention_heads must equal hidden_size (attend's heads "
                 "split C)");
  if (j.contains("hidden_act"))
    ATTEND_CHECK(j["hidden_act"] == "silu", file.string(), ": hidden_act is ",
                 j["hidden_act"].dump(), "; attend's Llama uses silu (SwiGLU)");
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
  try {
    const nlohmann::json j = read_json(config_json);
    return j.contains("model_type") &&
           (j["model_type"] == "llama" || j["model_type"] == "mistral");
  } catch (const Error&) {
    return false;
  }
}

ExportResult export_hf_llama(const LlamaExportOptions& o) {
  const std::string dtype = hf_dtype(o.dtype);
  ATTEND_CHECK(o.shard_bytes >= 0, "export: --shard_size must be >= 0, got ", o.shard_bytes);
  LoadedModel m = load_model(o.checkpoint);
  const nn::GPTConfig& c = m.model->config;
  ATTEND_CHECK(c.is_llama(), "export: ", m.checkpoint.string(),
               " is a GPT-2 model (arch gpt2); the Llama layout is for arch llama");
  const std::vector<std::pair<std::string, Tensor>> tensors = to_hf(*m.model);
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
      {"attend_tokenizer", m.tokenizer->spec().name},
  };
  write_file_atomic(out / "config.json", j.dump(2) + "\n");
  if (m.tokenizer->spec().kind == "bpe") {
    // tokenizer.json, and a tokenizer_config.json naming the class that reads it alone
    // (Llama 3's own folders do the same): LlamaTokenizer's defaults would add a BOS
    // token "<s>" that an attend vocabulary does not have.
    write_file_atomic(out / "tokenizer.json", data::hf_tokenizer_json(m.tokenizer->spec()));
    const nlohmann::ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                       {"model_max_length", c.block_size},
                                       {"clean_up_tokenization_spaces", false}};
    write_file_atomic(out / "tokenizer_config.json", tc.dump(2) + "\n");
  } else {
    m.tokenizer->save(out);  // Hugging Face has no byte-level form of a char vocabulary
  }
  stage.commit();
  return {o.out, static_cast<int64_t>(tensors.size())};
}

ImportResult import_hf_llama(const ImportOptions& o) {
  std::error_code ec;
  ATTEND_CHECK(!o.from.empty(), "import: --from is required (a folder)");
  ATTEND_CHECK(!o.out.empty(), "import: --out is required (the run folder to create)");
  ATTEND_CHECK(fs::is_directory(o.from, ec), o.from, ": a Llama import reads a folder");
  const fs::path dir = o.from;
  const fs::path config_file = o.config.empty() ? dir / "config.json" : fs::path(o.config);
  ImportResult r;
  r.model = read_llama_config(config_file);
  const nn::GPTConfig& c = r.model;

  // The files: one, or the shards an index names (each once, inside the folder).
  std::vector<fs::path> files;
  std::map<std::string, std::string> weight_map;  // tensor -> file, from an index
  const fs::path index_file = dir / "model.safetensors.index.json";
  if (fs::exists(index_file, ec)) {
    const nlohmann::json index = read_json(index_file);
    ATTEND_CHECK(index.contains("weight_map") && index["weight_map"].is_object(),
                 index_file.string(), ": expected an object weight_map");
    std::set<std::string> names;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      ATTEND_CHECK(file.is_string(), index_file.string(), ": weight_map[", printable(tensor),
                   "] must be a file name");
      const std::string f = file.get<std::string>();
      ATTEND_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                   index_file.string(), ": weight_map[", printable(tensor), "] is '",
                   printable(f), "'; expected a file name in the folder");
      names.insert(f);
      weight_map[tensor] = f;
    }
    for (const std::string& f : names) files.push_back(dir / f);
  } else {
    files.push_back(dir / "model.safetensors");
  }
  std::vector<std::unique_ptr<io::SafetensorsFile>> opened;
  std::map<std::string, std::pair<const io::SafetensorsFile*, const io::SafetensorsEntry*>> entries;
  for (const fs::path& f : files) {
    opened.push_back(std::make_unique<io::SafetensorsFile>(f));
    for (const auto& [name, e] : opened.back()->entries()) {
      ATTEND_CHECK(entries.emplace(name, std::make_pair(opened.back().get(), &e)).second,
                   f.string(), ": tensor ", printable(name), " is stored in two files");
      // The index and the shards must agree (Hugging Face's loader reads each tensor from
      // the file the index names): a tensor the index puts elsewhere, or leaves out, is
      // refused rather than guessed.
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        ATTEND_CHECK(it != weight_map.end(), index_file.string(), ": ", f.filename().string(),
                     " holds ", printable(name), ", which the weight_map does not name");
        ATTEND_CHECK(it->second == f.filename().string(), index_file.string(), ": weight_map[",
                     printable(name), "] is '", printable(it->second), "' but ",
                     f.filename().string(), " holds it");
      }
    }
  }
  for (const auto& [name, file] : weight_map)
    ATTEND_CHECK(entries.count(name), index_file.string(), ": weight_map names ", printable(name),
                 " in '", printable(file), "', which does not hold it");
  // Before anything is read: the parameters the config implies, their shapes, and memory.
  const int64_t want = nn::count_parameters(c).total();
  const double need = 4.0 * static_cast<double>(want) * 4;  // weights, the tensors read, AdamW m, v
  const int64_t avail = available_memory_bytes();
  ATTEND_CHECK(avail < 0 || need <= static_cast<double>(avail), "import: ", dir.string(), " is a ",
               want, "-parameter model; importing it needs about ",
               fmt::format("{:.2f}", need / (1024.0 * 1024 * 1024)),
               " GiB (f32 weights, the tensors read and a fresh AdamW state), more than the ",
               fmt::format("{:.2f}", static_cast<double>(avail) / (1024.0 * 1024 * 1024)),
               " GiB this machine has available");
  const int64_t C = c.n_embd, HS = C / c.n_head, kv = c.n_kv_head * HS, H = c.mlp_hidden();
  const int64_t V = c.vocab_size;
  std::map<std::string, Shape> expect = {{"model.embed_tokens.weight", {V, C}},
                                         {"model.norm.weight", {C}}};
  if (!c.tie_embeddings) expect["lm_head.weight"] = {V, C};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = layer(l);
    expect[p + "self_attn.q_proj.weight"] = {C, C};
    expect[p + "self_attn.k_proj.weight"] = {kv, C};
    expect[p + "self_attn.v_proj.weight"] = {kv, C};
    expect[p + "self_attn.o_proj.weight"] = {C, C};
    expect[p + "mlp.gate_proj.weight"] = {H, C};
    expect[p + "mlp.up_proj.weight"] = {H, C};
    expect[p + "mlp.down_proj.weight"] = {C, H};
    expect[p + "input_layernorm.weight"] = {C};
    expect[p + "post_attention_layernorm.weight"] = {C};
  }
  std::string missing, extra;
  for (const auto& [name, shape] : expect) {
    auto it = entries.find(name);
    if (it == entries.end()) {
      missing += ' ';
      missing += name;
      continue;
    }
    ATTEND_CHECK(it->second.second->shape == shape, it->second.first->path().string(), ": ", name,
                 " has shape ", shape_str(it->second.second->shape), ", expected ",
                 shape_str(shape), " for ", config_file.string());
  }
  for (const auto& [name, _] : entries)
    if (!expect.count(name) && !(c.tie_embeddings && name == "lm_head.weight") &&
        name.find("rotary_emb.inv_freq") == std::string::npos) {
      extra += ' ';
      extra += printable(name);
    }
  ATTEND_CHECK(missing.empty() && extra.empty(), dir.string(),
               ": the tensors do not match a Llama of ", config_file.string(), ";",
               missing.empty() ? "" : " missing:", missing, extra.empty() ? "" : " unexpected:",
               extra);
  auto read = [&](const std::string& name) {
    const auto& [file, entry] = entries.at(name);
    (void)entry;
    return file->read(name);
  };
  nn::GPT model(c, 0, false);  // every parameter is copied below
  NoGradGuard no_grad;
  auto& t = *model.transformer;
  kernel::copy_(t.wte->weight, read("model.embed_tokens.weight"));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const nn::Block& b = (*t.h)[static_cast<size_t>(l)];
    const std::string p = layer(l);
    const Tensor& qkv = b.attn->c_attn->weight;
    kernel::copy_(kernel::narrow(qkv, 0, 0, C),
                  permute_rope_rows(read(p + "self_attn.q_proj.weight"), c.n_head, HS, false));
    kernel::copy_(kernel::narrow(qkv, 0, C, kv),
                  permute_rope_rows(read(p + "self_attn.k_proj.weight"), c.n_kv_head, HS, false));
    kernel::copy_(kernel::narrow(qkv, 0, C + kv, kv), read(p + "self_attn.v_proj.weight"));
    kernel::copy_(b.attn->c_proj->weight, read(p + "self_attn.o_proj.weight"));
    kernel::copy_(kernel::narrow(b.mlp->c_fc->weight, 0, 0, H), read(p + "mlp.gate_proj.weight"));
    kernel::copy_(kernel::narrow(b.mlp->c_fc->weight, 0, H, H), read(p + "mlp.up_proj.weight"));
    kernel::copy_(b.mlp->c_proj->weight, read(p + "mlp.down_proj.weight"));
    kernel::copy_(b.ln_1->weight, read(p + "input_layernorm.weight"));
    kernel::copy_(b.ln_2->weight, read(p + "post_attention_layernorm.weight"));
  }
  kernel::copy_(t.ln_f->weight, read("model.norm.weight"));
  if (!c.tie_embeddings) kernel::copy_(model.lm_head->weight, read("lm_head.weight"));
  if (c.tie_embeddings && entries.count("lm_head.weight"))
    spdlog::warn("import: {}: tie_word_embeddings is true, so (as Hugging Face does) the stored "
                 "lm_head.weight is ignored and embed_tokens serves both",
                 dir.string());
  r.tensors = static_cast<int64_t>(expect.size());
  const std::string bad = first_non_finite(model.named_parameters());
  ATTEND_CHECK(bad.empty(), dir.string(), ": ", bad, " holds NaN or infinite values");
  auto tok = llama_tokenizer(o, dir);
  ATTEND_CHECK(tok->vocab_size() == c.vocab_size, "import: the tokenizer ", tok->spec().name,
               " has ", tok->vocab_size(), " tokens, ", config_file.string(), "'s vocab_size is ",
               c.vocab_size);
  r.tokenizer = tok->spec().name;
  r.checkpoint = write_imported(o.out, model, tok->spec());
  return r;
}

}  // namespace attend::train
