#include "convert/gpt2_io.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstring>
#include <map>
#include <set>

#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "tensor/kernels.h"
#include "tensor/util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace attend::convert {

namespace fs = std::filesystem;

namespace {

// HF's Conv1D layers: weights stored (in, out).
bool is_conv1d_weight(const std::string& name) {
  for (const char* s :
       {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (name.size() >= std::strlen(s) &&
        name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0)
      return true;
  return false;
}

// The files an export writes (and temporaries of an interrupted one): an existing --out
// holding anything else is refused, not replaced.
bool export_owns(const std::string& name) {
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json", "encoder.json",
                        "vocab.bpe", "vocab.json", "merges.txt"})
    if (name == f || name.rfind(std::string(f) + ".tmp.", 0) == 0) return true;
  return false;
}

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// config.json's model, and whether it ties lm_head to wte (tie_word_embeddings, default
// true as in Hugging Face).
struct HfConfig {
  nn::GPTConfig model;
  bool tied = true;
};

HfConfig read_hf_config(const fs::path& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(file.string(), ": invalid JSON: ", e.what()));
  }
  ATTEND_CHECK(j.is_object(), file.string(), ": expected a JSON object");
  auto get = [&](const char* key, const char* alt = nullptr) -> int64_t {
    const char* k = j.contains(key) ? key : alt;
    ATTEND_CHECK(k && j.contains(k) && j[k].is_number_integer(), file.string(), ": field ", key,
                 " must be an integer");
    ATTEND_CHECK(!j[k].is_number_unsigned() ||
                     j[k].get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                 file.string(), ": field ", k, " is ", j[k].dump(), ", too large");
    return j[k].get<int64_t>();
  };
  nn::GPTConfig c;
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.n_kv_head = c.n_head;
  c.n_embd = get("n_embd");
  c.block_size = get("n_positions", "n_ctx");
  c.vocab_size = get("vocab_size");
  c.dropout = 0.0;
  c.bias = true;
  if (j.contains("activation_function"))
    ATTEND_CHECK(j["activation_function"] == "gelu_new", file.string(), ": activation_function is ",
                 j["activation_function"].dump(), "; attend's GPT uses GPT-2's gelu_new");
  // GPT2Config's defaults: layer_norm_epsilon 1e-5, n_inner null (4 n_embd).
  if (j.contains("layer_norm_epsilon") && !j["layer_norm_epsilon"].is_null()) {
    const nlohmann::json& e = j["layer_norm_epsilon"];
    ATTEND_CHECK(e.is_number() && e.get<double>() > 0 && e.get<double>() < 1, file.string(),
                 ": layer_norm_epsilon is ", e.dump().substr(0, 60),
                 "; expected a number in (0, 1)");
    c.norm_eps = e.get<double>();
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null()) {
    c.hidden_dim = get("n_inner");
    ATTEND_CHECK(c.hidden_dim >= 1, file.string(), ": n_inner is ", c.hidden_dim,
                 "; expected null (4 n_embd) or a positive size");
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(str(file.string(), ": ", e.what()));
  }
  HfConfig h{c, true};
  if (j.contains("tie_word_embeddings")) {
    ATTEND_CHECK(j["tie_word_embeddings"].is_boolean(), file.string(),
                 ": tie_word_embeddings is ", j["tie_word_embeddings"].dump(),
                 "; expected true or false");
    h.tied = j["tie_word_embeddings"].get<bool>();
  }
  return h;
}

// attend's GPT-2 ties lm_head to wte. A file whose head is a tensor of its own is kept
// exactly or refused: with tie_word_embeddings false (an untied model) the stored head must
// equal wte bit for bit; with true (Hugging Face's default, which then ties and ignores a
// stored head) a different stored head is dropped with a warning naming it.
void check_tied_head(const io::SafetensorsFile& st, const fs::path& model_file,
                     const fs::path& config_file, bool tied, const std::string& head,
                     const nn::GPT& model) {
  if (head.empty()) {
    ATTEND_CHECK(tied, config_file.string(),
                 ": tie_word_embeddings is false but ", model_file.string(),
                 " stores no lm_head.weight");
    return;
  }
  const Tensor wte = model.transformer->wte->weight;
  ATTEND_CHECK(st.entries().at(head).shape == wte.shape(), model_file.string(), ": ", head,
               " has shape ", shape_str(st.entries().at(head).shape), ", expected ",
               shape_str(wte.shape()));
  const Tensor h = st.read(head);
  const bool same = h.dtype() == wte.dtype() &&
                    std::memcmp(h.raw_data(), wte.raw_data(), wte.numel() * dtype_size(wte.dtype())) == 0;
  if (same) return;
  ATTEND_CHECK(tied, model_file.string(), ": ", head,
               " differs from transformer.wte.weight and ", config_file.string(),
               " says tie_word_embeddings false (an untied head); attend's GPT-2 ties the two, "
               "so this model cannot be imported as it is");
  spdlog::warn("import: {}: {} differs from transformer.wte.weight; tie_word_embeddings is true, "
               "so (as Hugging Face does) the stored head is dropped and wte is used for both",
               model_file.string(), head);
}

// The folder's tokenizer, unless --tokenizer names one. vocab.json and merges.txt are
// GPT-2's exact files (then "gpt2"), or the same tokenizer as the tokenizer.json beside
// them (Hugging Face writes all three for a byte-level BPE); any other pair is refused,
// never swapped for GPT-2's. A tokenizer.json alone is read (attend's or Hugging Face's);
// a folder with none of them gets GPT-2's.
std::unique_ptr<data::Tokenizer> import_tokenizer(const ImportOptions& o, const fs::path& dir) {
  std::error_code ec;
  if (!o.tokenizer.empty()) return data::tokenizer_from_arg(o.tokenizer);
  const fs::path json = dir / "tokenizer.json", vocab = dir / "vocab.json",
                 merges = dir / "merges.txt";
  const bool has_json = fs::exists(json, ec);
  const bool has_pair = fs::exists(vocab, ec) || fs::exists(merges, ec);
  if (!has_pair) return has_json ? data::load_tokenizer(dir) : data::tokenizer_from_arg("gpt2");
  const bool gpt2_pair = fs::exists(vocab, ec) && fs::exists(merges, ec) &&
                         data::is_gpt2_encoder_file(vocab) && data::is_gpt2_merges_file(merges);
  std::unique_ptr<data::Tokenizer> from_json = has_json ? data::load_tokenizer(dir) : nullptr;
  if (!gpt2_pair && from_json && from_json->spec().kind == "bpe") {
    // The folder's own BPE: its vocab.json and merges.txt must say what tokenizer.json says.
    ATTEND_CHECK(fs::exists(vocab, ec) && fs::exists(merges, ec), "import: ", dir.string(),
                 " has ", fs::exists(vocab, ec) ? "vocab.json" : "merges.txt", " but not ",
                 fs::exists(vocab, ec) ? "merges.txt" : "vocab.json",
                 " beside tokenizer.json; give --tokenizer to choose the tokenizer");
    const auto pair = data::load_bpe_files(vocab, merges, from_json->spec().name);
    const data::TokenizerSpec &a = pair->spec(), &b = from_json->spec();
    ATTEND_CHECK(a.tokens == b.tokens, vocab.string(), ": its tokens differ from ", json.string(),
                 "'s; give --tokenizer to choose the tokenizer");
    ATTEND_CHECK(a.merges == b.merges, merges.string(), ": its merges differ from ", json.string(),
                 "'s; give --tokenizer to choose the tokenizer");
    return from_json;
  }
  ATTEND_CHECK(data::is_gpt2_encoder_file(vocab), vocab.string(),
               ": not GPT-2's vocab.json (its bytes differ from OpenAI's encoder.json) and no "
               "byte-level tokenizer.json beside it to agree with; give --tokenizer to choose the "
               "tokenizer");
  ATTEND_CHECK(data::is_gpt2_merges_file(merges), merges.string(),
               ": not GPT-2's merges.txt (empty, truncated or changed: its bytes differ from "
               "OpenAI's vocab.bpe) and no byte-level tokenizer.json beside it to agree with; "
               "give --tokenizer to choose the tokenizer");
  auto gpt2 = data::load_bpe_files(vocab, merges, "gpt2");
  if (from_json)  // GPT-2's files and a tokenizer.json: they must be one tokenizer
    ATTEND_CHECK(data::tokenizer_hash(from_json->spec()) == data::tokenizer_hash(gpt2->spec()),
                 json.string(), " is not the tokenizer of ", vocab.string(), " and ",
                 merges.string(), " (GPT-2's); give --tokenizer to choose one");
  return gpt2;
}

}  // namespace

Imported import_gpt2(const ImportOptions& o) {
  std::error_code ec;
  ATTEND_CHECK(!o.from.empty(), "import: --from is required (a folder or a .safetensors file)");
  const bool is_dir = fs::is_directory(o.from, ec);
  const fs::path model_file = is_dir ? fs::path(o.from) / "model.safetensors" : fs::path(o.from);
  const fs::path dir = model_file.parent_path().empty() ? fs::path(".") : model_file.parent_path();
  const fs::path config_file = o.config.empty() ? dir / "config.json" : fs::path(o.config);
  ATTEND_CHECK(fs::exists(model_file, ec), model_file.string(), ": no such file");
  ATTEND_CHECK(fs::exists(config_file, ec), config_file.string(),
               ": no such file (give --config config.json)");
  const HfConfig hf = read_hf_config(config_file);
  const nn::GPTConfig& cfg = hf.model;
  io::SafetensorsFile st(model_file);
  // HF name (prefix stripped) -> entry; buffers and the tied head set aside.
  std::map<std::string, std::string> by_name;
  std::string head;  // the stored lm_head.weight, checked against wte below
  for (const auto& [name, e] : st.entries()) {
    const std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (n == "lm_head.weight") head = name;
    if (ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || n == "lm_head.weight")
      continue;
    ATTEND_CHECK(by_name.emplace(n, name).second, model_file.string(), ": tensor ", n,
                 " is stored twice (with and without the transformer. prefix)");
  }
  // Before allocating the model: the stored tensors must hold exactly its parameters.
  int64_t stored = 0;
  for (const auto& [n, name] : by_name) {
    int64_t k = 1;
    for (int64_t d : st.entries().at(name).shape) k *= d;
    stored += k;
  }
  const int64_t want = nn::count_parameters(cfg).total();
  ATTEND_CHECK(stored == want, model_file.string(), ": ", config_file.string(), " describes ", want,
               " parameters, the file stores ", stored);
  Imported r;
  r.model = std::make_unique<nn::GPT>(cfg, 0, false);  // every parameter is copied or listed missing below
  nn::GPT& model = *r.model;
  std::vector<std::string> missing;
  std::set<std::string> used;
  NoGradGuard no_grad;
  for (const auto& [ours, p] : model.named_parameters()) {
    const std::string n = ours.rfind("transformer.", 0) == 0 ? ours.substr(12) : ours;
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      missing.push_back(n);
      continue;
    }
    used.insert(n);
    Shape want_shape = p.shape();
    if (is_conv1d_weight(n)) std::swap(want_shape[0], want_shape[1]);
    ATTEND_CHECK(st.entries().at(it->second).shape == want_shape, model_file.string(), ": tensor ",
                 it->second, " has shape ", shape_str(st.entries().at(it->second).shape),
                 ", expected ", shape_str(want_shape), " for this config");
    Tensor t = st.read(it->second);
    if (is_conv1d_weight(n)) t = kernel::contiguous(kernel::transpose(t, 0, 1));
    kernel::copy_(p, t);
  }
  std::string extra;
  for (const auto& [n, _] : by_name)
    if (!used.count(n)) extra += " " + n;
  std::string miss;
  for (const auto& n : missing) miss += " " + n;
  ATTEND_CHECK(missing.empty() && extra.empty(), model_file.string(),
               ": the tensors do not match GPT-2's;", missing.empty() ? "" : " missing:", miss,
               extra.empty() ? "" : " unexpected:", extra);
  r.tensors = static_cast<int64_t>(used.size());
  check_tied_head(st, model_file, config_file, hf.tied, head, model);
  const std::string bad = nn::first_non_finite(model.named_parameters());
  ATTEND_CHECK(bad.empty(), model_file.string(), ": ", bad, " holds NaN or infinite values");

  auto tok = import_tokenizer(o, dir);
  ATTEND_CHECK(tok->vocab_size() == cfg.vocab_size, "import: the tokenizer ", tok->spec().name,
               " has ", tok->vocab_size(), " tokens, config.json's vocab_size is ",
               cfg.vocab_size);
  r.tokenizer = std::move(tok);
  return r;
}

ExportResult export_gpt2(const ExportSource& m, const fs::path& dir) {
  const nn::GPTConfig& c = m.model.config;
  ATTEND_CHECK(!c.is_llama(), "export: ", m.name,
               " is a Llama (arch llama); this export writes GPT-2's layout only");
  ATTEND_CHECK(c.n_kv_head == c.n_head, "export: ", m.name, " has n_kv_head ",
               c.n_kv_head, " of n_head ", c.n_head,
               " (GQA/MQA); GPT-2's layout has one key/value head per query head");
  ATTEND_CHECK(c.bias, "export: ", m.name,
               " has no biases (--bias false); GPT-2's layout always has them");
  // Built whole beside `dir` and swapped in: an older export (its tokenizer files
  // included) stays usable until the new one is complete, and is then gone entirely.
  StagedFolder stage(dir, "export", export_owns);
  const fs::path out = stage.path();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : m.model.state_dict()) {
    if (name == "lm_head.weight") continue;  // tied to transformer.wte.weight
    tensors.emplace_back(name, is_conv1d_weight(name) ? kernel::transpose(t, 0, 1) : t);
  }
  io::write_safetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", c.hidden_dim > 0 ? nlohmann::ordered_json(c.hidden_dim) : nullptr},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", c.norm_eps},
      {"resid_pdrop", c.dropout},
      {"embd_pdrop", c.dropout},
      {"attn_pdrop", c.dropout},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", true},
      {"bos_token_id", c.vocab_size - 1},
      {"eos_token_id", c.vocab_size - 1},
      {"attend_tokenizer", m.tokenizer.spec().name},
  };
  write_file_atomic(out / "config.json", j.dump(2) + "\n");
  const data::TokenizerSpec& spec = m.tokenizer.spec();
  if (spec.kind == "bpe") {  // what GPT2TokenizerFast and GPT2Tokenizer read
    write_file_atomic(out / "tokenizer.json", data::hf_tokenizer_json(spec));
    write_file_atomic(out / "vocab.json", data::encoder_json_text(spec));
    write_file_atomic(out / "merges.txt", data::vocab_bpe_text(spec));
  } else {
    m.tokenizer.save(out);  // Hugging Face has no byte-level form of a char vocabulary
  }
  stage.commit();
  return {dir, static_cast<int64_t>(tensors.size())};
}

}  // namespace attend::convert
