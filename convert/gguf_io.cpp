#include "convert/gguf_io.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "io/gguf.h"
#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::convert {

namespace fs = std::filesystem;
using io::GgmlType;
using io::GgufType;
using io::GgufValue;

namespace {

// Llama 3's pre-tokenizer pattern as its tokenizer.json spells it: llama.cpp's "llama-bpe".
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Note [GGUF's names]: one row per GGUF tensor, in the order written, read by export,
// import and the checks alike: its name, its shape in attend's order, the attend parameter
// it is (or rows of it: the fused q/k/v and gate/up weights), or none for a zero bias a
// bias-free GPT-2 is written with.
struct GgufRow {
  std::string name;
  Shape shape;
  std::string ours;             // empty: zeros (a bias attend's model does not have)
  int64_t row0 = 0, rows = -1;  // rows [row0, row0 + rows) of ours; -1: all of it
};

std::vector<GgufRow> gguf_names(const nn::GPTConfig& c) {
  const int64_t C = c.n_embd, kv = c.n_kv_head * (C / c.n_head), H = c.mlp_hidden();
  const int64_t V = c.vocab_size;
  std::vector<GgufRow> t{{"token_embd.weight", {V, C}, "transformer.wte.weight"}};
  if (c.learned_positions())
    t.push_back({"position_embd.weight", {c.block_size, C}, "transformer.wpe.weight"});
  const bool bias = c.biases();
  auto with_bias = [&](const std::string& name, Shape w, const std::string& ours, int64_t bias_n) {
    t.push_back({name + ".weight", std::move(w), ours + ".weight"});
    t.push_back({name + ".bias", {bias_n}, bias ? ours + ".bias" : std::string()});
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const std::string a = "transformer.h." + std::to_string(l) + ".";
    if (c.gated_mlp()) {  // llama: separate q, k, v and gate, up; RMSNorm, no biases
      const std::string qkv = a + "attn.c_attn.weight", fc = a + "mlp.c_fc.weight";
      t.push_back({g + "attn_norm.weight", {C}, a + "ln_1.weight"});
      t.push_back({g + "attn_q.weight", {C, C}, qkv, 0, C});
      t.push_back({g + "attn_k.weight", {kv, C}, qkv, C, kv});
      t.push_back({g + "attn_v.weight", {kv, C}, qkv, C + kv, kv});
      t.push_back({g + "attn_output.weight", {C, C}, a + "attn.c_proj.weight"});
      t.push_back({g + "ffn_norm.weight", {C}, a + "ln_2.weight"});
      t.push_back({g + "ffn_gate.weight", {H, C}, fc, 0, H});
      t.push_back({g + "ffn_up.weight", {H, C}, fc, H, H});
      t.push_back({g + "ffn_down.weight", {C, H}, a + "mlp.c_proj.weight"});
    } else {  // gpt2: fused q/k/v, LayerNorm and Linear biases
      with_bias(g + "attn_norm", {C}, a + "ln_1", C);
      with_bias(g + "attn_qkv", {C + 2 * kv, C}, a + "attn.c_attn", C + 2 * kv);
      with_bias(g + "attn_output", {C, C}, a + "attn.c_proj", C);
      with_bias(g + "ffn_norm", {C}, a + "ln_2", C);
      with_bias(g + "ffn_up", {H, C}, a + "mlp.c_fc", H);
      with_bias(g + "ffn_down", {C, H}, a + "mlp.c_proj", C);
    }
  }
  if (c.gated_mlp()) {
    t.push_back({"output_norm.weight", {C}, "transformer.ln_f.weight"});
  } else {
    with_bias("output_norm", {C}, "transformer.ln_f", C);
  }
  if (!c.tied_head()) t.push_back({"output.weight", {V, C}, "lm_head.weight"});
  return t;
}

std::map<std::string, Tensor> parameters_by_name(const nn::GPT& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : m.named_parameters()) out.emplace(name, t);
  return out;
}

// The attend tensor a row is: the parameter, a view of its rows, or (no parameter) zeros.
Tensor attend_view(const std::map<std::string, Tensor>& params, const GgufRow& r) {
  if (r.ours.empty()) return zeros(r.shape);
  auto it = params.find(r.ours);
  ATTEND_INTERNAL_CHECK(it != params.end(), "no parameter ", r.ours, " for ", r.name);
  const Tensor v = r.rows < 0 ? it->second : kernel::narrow(it->second, 0, r.row0, r.rows);
  ATTEND_INTERNAL_CHECK(v.shape() == r.shape, r.name, " is ", shape_str(v.shape()),
                        ", its row says ", shape_str(r.shape));
  return v;
}

uint32_t file_type(GgmlType t) {
  switch (t) {
    case GgmlType::f32:
      return 0;
    case GgmlType::f16:
      return 1;
    case GgmlType::q8_0:
      return 7;
    case GgmlType::bf16:
      return 32;
  }
  return 0;
}

uint32_t as_u32(int64_t v, const std::string& what) {
  ATTEND_CHECK(v >= 0 && v <= int64_t{0xffffffff}, "export --format gguf: ", what, " is ", v,
               "; GGUF's key holds a u32");
  return static_cast<uint32_t>(v);
}

// The tokenizer as llama.cpp's gpt2-style vocabulary (the header says what is written).
void put_tokenizer(io::GgufMetadata& md, const data::TokenizerSpec& spec, const std::string& what) {
  std::vector<std::string> tokens;
  tokens.reserve(spec.tokens.size());
  for (const std::string& t : spec.tokens) tokens.push_back(data::bytes_to_unicode_string(t));
  std::vector<std::string> merges;
  if (spec.kind == "bpe") {
    merges.reserve(spec.merges.size());
    for (const auto& [a, b] : spec.merges)
      merges.push_back(tokens[static_cast<size_t>(a)] + " " + tokens[static_cast<size_t>(b)]);
  } else {
    // A multi-byte character: its bytes joined left to right; llama.cpp looks a merge up by
    // the two strings it joins, so the partial strings need not be tokens.
    std::set<std::string> seen;
    for (const std::string& t : spec.tokens) {
      std::string acc = data::bytes_to_unicode_string(t.substr(0, 1));
      for (size_t k = 1; k < t.size(); ++k) {
        const std::string next = data::bytes_to_unicode_string(t.substr(k, 1));
        if (seen.insert(acc + " " + next).second) merges.push_back(acc + " " + next);
        acc += next;
      }
    }
  }
  std::string pre = "gpt-2";
  if (!spec.pattern.empty()) {
    ATTEND_CHECK(spec.pattern == kLlama3Pattern, "export --format gguf: ", what,
                 "'s tokenizer splits text by the pattern '", printable(spec.pattern, 120),
                 "', which llama.cpp has no name for (it knows GPT-2's and Llama 3's)");
    pre = "llama-bpe";
  }
  ATTEND_CHECK(spec.ignore_merges == (pre == "llama-bpe"), "export --format gguf: ", what,
               "'s tokenizer ", spec.ignore_merges ? "ignores" : "applies",
               " merges to whole-token pieces, which llama.cpp's '", pre, "' does not");
  std::vector<int32_t> types(tokens.size(), 1);  // LLAMA_TOKEN_TYPE_NORMAL
  int64_t eos = -1, bos = -1;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const std::string& t = spec.tokens[id];
    if (t == "<|endoftext|>" || t == "<|end_of_text|>" || t == "<|eot_id|>") {
      types[id] = 3;  // CONTROL
      if (eos < 0 && t != "<|eot_id|>") eos = static_cast<int64_t>(id);
    }
    if (t == "<|begin_of_text|>") types[id] = 3, bos = static_cast<int64_t>(id);
  }
  if (bos < 0) bos = eos;  // GPT-2's <|endoftext|> serves both
  md.emplace_back("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  md.emplace_back("tokenizer.ggml.pre", GgufValue::of_string(pre));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::of_strings(std::move(tokens)));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::of_i32s(types));
  md.emplace_back("tokenizer.ggml.merges", GgufValue::of_strings(std::move(merges)));
  if (eos >= 0)
    md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::of_u32(as_u32(eos, "eos")));
  if (bos >= 0)
    md.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::of_u32(as_u32(bos, "bos")));
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::of_bool(false));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::of_bool(false));
  md.emplace_back("attend.tokenizer.kind", GgufValue::of_string(spec.kind));
  md.emplace_back("attend.tokenizer.name", GgufValue::of_string(spec.name));
}

// The shortest decimal that reads back as the same float: GGUF stores eps and theta as
// f32, and 1e-5 stored so should come back as 1e-5, not 9.99999974738e-06.
double float_value(double stored) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(stored));
  return std::stod(std::string(buf, r.ptr));
}

struct Keys {
  const io::GgufFile& f;
  std::string arch;
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    const uint64_t v = f.get_uint(arch + "." + key);
    ATTEND_CHECK(v >= static_cast<uint64_t>(lo) && v <= static_cast<uint64_t>(hi),
                 f.path().string(), ": ", arch, ".", key, " is ", v, "; expected ", lo, " to ", hi);
    return static_cast<int64_t>(v);
  }
};

nn::GPTConfig read_config(const io::GgufFile& f, const std::string& arch) {
  const std::string p = f.path().string();
  const Keys k{f, arch};
  const bool llama = arch == "llama";
  nn::GPTConfig c = nn::gpt_preset(llama ? "llama-char" : "gpt2");
  c.dropout = 0.0;
  c.n_embd = k.integer("embedding_length", 1, int64_t{1} << 20);
  c.n_layer = k.integer("block_count", 1, 1 << 16);
  c.n_head = k.integer("attention.head_count", 1, 1 << 16);
  c.n_kv_head = f.find(arch + ".attention.head_count_kv")
                    ? k.integer("attention.head_count_kv", 1, 1 << 16)
                    : c.n_head;
  c.block_size = k.integer("context_length", 1, int64_t{1} << 24);
  const int64_t ff = k.integer("feed_forward_length", 1, int64_t{1} << 24);
  c.hidden_dim = llama || ff != 4 * c.n_embd ? ff : 0;
  const auto* tokens = f.find("tokenizer.ggml.tokens");
  const auto emb = f.tensors().find("token_embd.weight");
  ATTEND_CHECK(emb != f.tensors().end() && emb->second.ne.size() == 2, p,
               ": no 2-dimensional token_embd.weight");
  c.vocab_size = emb->second.ne[1];
  ATTEND_CHECK(!tokens || tokens->strings.size() == static_cast<size_t>(c.vocab_size), p,
               ": tokenizer.ggml.tokens has ", tokens ? tokens->strings.size() : 0,
               " tokens, token_embd.weight ", c.vocab_size, " rows");
  if (llama) {
    c.norm_eps = float_value(f.get_float("llama.attention.layer_norm_rms_epsilon"));
    c.rope_theta = float_value(f.get_float("llama.rope.freq_base", 10000.0));
    ATTEND_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, p, ": llama.embedding_length ", c.n_embd,
                 " is not a multiple of llama.attention.head_count ", c.n_head);
    const uint64_t rot = f.get_uint("llama.rope.dimension_count", c.n_embd / c.n_head);
    ATTEND_CHECK(rot == static_cast<uint64_t>(c.n_embd / c.n_head), p,
                 ": llama.rope.dimension_count is ", rot, "; attend turns whole heads (head size ",
                 c.n_embd / c.n_head, ")");
    if (const GgufValue* s = f.find("llama.rope.scaling.type"))
      ATTEND_CHECK(s->type == GgufType::string && (s->s == "none" || s->s.empty()), p,
                   ": llama.rope.scaling.type is '", printable(s->s, 40),
                   "'; attend's RoPE has no scaling");
    for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"})
      if (f.find(key))
        ATTEND_CHECK(f.get_uint(key) == static_cast<uint64_t>(c.n_embd / c.n_head), p, ": ", key,
                     " is ", f.get_uint(key), "; attend's heads split C (head size ",
                     c.n_embd / c.n_head, ")");
    ATTEND_CHECK(f.get_uint("llama.expert_count", 0) == 0, p, ": llama.expert_count is ",
                 f.get_uint("llama.expert_count", 0), "; attend has no mixture of experts");
    c.sliding_window = static_cast<int64_t>(f.get_uint("attend.sliding_window", 0));
    ATTEND_CHECK(c.sliding_window <= (int64_t{1} << 24), p, ": attend.sliding_window is ",
                 c.sliding_window);
  } else {
    c.norm_eps = float_value(f.get_float("gpt2.attention.layer_norm_epsilon"));
    const GgufValue* b = f.find("attend.bias");
    c.bias = !b || b->u != 0;
  }
  c.tie_embeddings = !f.tensors().count("output.weight");
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(str(p, ": ", e.what()));
  }
  return c;
}

std::unique_ptr<data::Tokenizer> gguf_tokenizer(const io::GgufFile& f) {
  const std::string p = f.path().string();
  ATTEND_CHECK(f.find("tokenizer.ggml.model"), p,
               ": no tokenizer (tokenizer.ggml.model); give --tokenizer");
  const std::string model = f.get_string("tokenizer.ggml.model");
  ATTEND_CHECK(model == "gpt2", p, ": tokenizer.ggml.model is '", printable(model, 40), "'",
               model == "llama" ? " (SentencePiece)" : "",
               "; attend reads byte-level BPE vocabularies (gpt2): give --tokenizer");
  const std::vector<std::string>& tokens =
      f.get_array("tokenizer.ggml.tokens", GgufType::string).strings;
  const GgufValue* kind = f.find("attend.tokenizer.kind");
  const GgufValue* name = f.find("attend.tokenizer.name");
  data::TokenizerSpec spec;
  spec.kind = kind && kind->type == GgufType::string && kind->s == "char" ? "char" : "bpe";
  spec.name = name && name->type == GgufType::string ? name->s : "gguf";
  std::unordered_map<std::string, int32_t> ids;
  for (size_t id = 0; id < tokens.size(); ++id) {
    std::string bytes;
    ATTEND_CHECK(data::unicode_string_to_bytes(tokens[id], bytes) && !bytes.empty(), p,
                 ": tokenizer.ggml.tokens[", id, "] '", printable(tokens[id], 60),
                 "' is not a byte-level token (a character outside GPT-2's byte-to-unicode map)");
    ATTEND_CHECK(ids.emplace(tokens[id], static_cast<int32_t>(id)).second, p,
                 ": tokenizer.ggml.tokens[", id, "] '", printable(tokens[id], 60),
                 "' is also token ", ids[tokens[id]]);
    spec.tokens.push_back(std::move(bytes));
  }
  if (spec.kind == "bpe") {
    const std::string pre =
        f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("gpt-2");
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
      spec.pattern = kLlama3Pattern;
      spec.ignore_merges = true;
    } else {
      ATTEND_CHECK(pre == "gpt-2" || pre == "default", p, ": tokenizer.ggml.pre is '",
                   printable(pre, 40),
                   "'; attend reads GPT-2's (gpt-2) and Llama 3's (llama-bpe) pre-tokenizers");
    }
    const std::vector<std::string>& merges =
        f.get_array("tokenizer.ggml.merges", GgufType::string).strings;
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& line = merges[r];
      const size_t sp = line.find(' ', 1);
      ATTEND_CHECK(sp != std::string::npos && sp + 1 < line.size(), p, ": tokenizer.ggml.merges[",
                   r, "] is '", printable(line, 60), "', expected two tokens and a space");
      const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
      auto ia = ids.find(a), ib = ids.find(b);
      ATTEND_CHECK(ia != ids.end() && ib != ids.end() && ids.count(a + b), p,
                   ": tokenizer.ggml.merges[", r, "] '", printable(line, 60),
                   "' joins strings that are not both tokens or makes one that is not");
      spec.merges.emplace_back(ia->second, ib->second);
    }
  }
  try {
    return data::make_tokenizer(spec);
  } catch (const Error& e) {
    throw Error(str(p, ": ", e.what()));
  }
}

}  // namespace

bool is_gguf_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

ExportResult export_gguf(const ExportSource& m, const GgufExportOptions& o) {
  const nn::GPTConfig& c = m.model.config;
  GgmlType type;
  try {
    type = io::ggml_type_from(o.dtype);
  } catch (const Error& e) {
    throw Error(str("export --format gguf: --dtype: ", e.what()));
  }
  ATTEND_CHECK(!c.gated_mlp() || !c.biases(), "export --format gguf: ", m.name,
               " is a Llama with biases, which attend does not build");
  const std::string arch = c.gated_mlp() ? "llama" : "gpt2";
  if (c.window() > 0 && c.window() < c.block_size)
    spdlog::warn(
        "export --format gguf: {} has a sliding window of {} (block_size {}); "
        "llama.cpp's llama architecture has none, so it agrees with attend only on "
        "contexts of at most {} tokens (attend.sliding_window keeps it for import)",
        m.name, c.window(), c.block_size, c.window());
  io::GgufMetadata md;
  md.emplace_back("general.architecture", GgufValue::of_string(arch));
  fs::path src(m.name);
  const std::string general_name =
      (src.has_parent_path() ? src.parent_path().filename() : src.stem()).string();
  md.emplace_back("general.name",
                  GgufValue::of_string(general_name.empty() ? "attend" : general_name));
  md.emplace_back("general.file_type", GgufValue::of_u32(file_type(type)));
  if (type == GgmlType::q8_0) md.emplace_back("general.quantization_version", GgufValue::of_u32(2));
  auto key = [&](const std::string& k, GgufValue v) {
    md.emplace_back(arch + "." + k, std::move(v));
  };
  key("context_length", GgufValue::of_u32(as_u32(c.block_size, "block_size")));
  key("embedding_length", GgufValue::of_u32(as_u32(c.n_embd, "n_embd")));
  key("block_count", GgufValue::of_u32(as_u32(c.n_layer, "n_layer")));
  key("feed_forward_length", GgufValue::of_u32(as_u32(c.mlp_hidden(), "the MLP width")));
  key("attention.head_count", GgufValue::of_u32(as_u32(c.n_head, "n_head")));
  key("attention.head_count_kv", GgufValue::of_u32(as_u32(c.n_kv_head, "n_kv_head")));
  if (c.rotary()) {
    key("attention.layer_norm_rms_epsilon", GgufValue::of_f32(static_cast<float>(c.norm_eps)));
    key("rope.dimension_count", GgufValue::of_u32(as_u32(c.n_embd / c.n_head, "head size")));
    key("rope.freq_base", GgufValue::of_f32(static_cast<float>(c.rope_theta)));
  } else {
    key("attention.layer_norm_epsilon", GgufValue::of_f32(static_cast<float>(c.norm_eps)));
  }
  key("vocab_size", GgufValue::of_u32(as_u32(c.vocab_size, "vocab_size")));
  if (c.window() > 0)
    md.emplace_back("attend.sliding_window",
                    GgufValue::of_u32(as_u32(c.window(), "sliding_window")));
  if (!c.gated_mlp() && !c.biases()) md.emplace_back("attend.bias", GgufValue::of_bool(false));
  put_tokenizer(md, m.tokenizer.spec(), m.name);

  const std::map<std::string, Tensor> params = parameters_by_name(m.model);
  std::vector<io::GgufTensorOut> tensors;
  std::string kept_f32, one_block;
  for (const GgufRow& r : gguf_names(c)) {
    GgmlType t = r.shape.size() == 2 ? type : GgmlType::f32;
    if (t == GgmlType::q8_0 && r.shape.back() % 32 != 0) {
      t = GgmlType::f32;
      kept_f32 += " " + r.name;
    }
    if (t == GgmlType::q8_0 && r.shape.back() == 32) one_block += " " + r.name;
    tensors.push_back({r.name, attend_view(params, r), t});
  }
  if (!kept_f32.empty())
    spdlog::warn(
        "export --format gguf: rows not a multiple of 32 cannot be q8_0; written as "
        "f32:{}",
        kept_f32);
  // Measured with node-llama-cpp 3.21.1 on an Intel Xeon with AMX (its sapphirerapids
  // build): a Q8_0 matrix whose rows are one block long gives NaN logits for every full
  // 32-token tile of a prompt; rows of 64 or 96 are right, and so is its AVX-512 build.
  // The file is correct (attend imports it back exactly); the warning is for the reader.
  if (!one_block.empty())
    spdlog::warn(
        "export --format gguf: q8_0 matrices with rows of one block (32 values):{}; "
        "llama.cpp's AMX kernels (Intel Xeon 4th generation and later) compute NaN on "
        "these; its other CPU kernels are right (docs/formats.md)",
        one_block);
  io::write_gguf(o.out, md, tensors);
  return {o.out, static_cast<int64_t>(tensors.size())};
}

Imported import_gguf(const ImportOptions& o) {
  ATTEND_CHECK(!o.from.empty(), "import: --from is required");
  const io::GgufFile f(o.from);
  const std::string p = f.path().string();
  ATTEND_CHECK(f.find("general.architecture"), p, ": no general.architecture");
  const std::string arch = f.get_string("general.architecture");
  ATTEND_CHECK(arch == "llama" || arch == "gpt2", p, ": general.architecture is '",
               printable(arch, 40), "'; attend imports llama and gpt2");
  const nn::GPTConfig c = read_config(f, arch);
  // Before anything is read or allocated: every tensor the config implies, by name and
  // shape (Note [GGUF's names]), none other, then the memory.
  const std::vector<GgufRow> names = gguf_names(c);
  std::set<std::string> expected;
  std::string missing, extra;
  for (const GgufRow& r : names) {
    expected.insert(r.name);
    auto it = f.tensors().find(r.name);
    if (it == f.tensors().end()) {
      missing += ' ' + r.name;
      continue;
    }
    ATTEND_CHECK(it->second.shape() == r.shape, p, ": ", r.name, " has shape ",
                 shape_str(it->second.shape()), " (attend's order), expected ", shape_str(r.shape));
  }
  for (const auto& [name, _] : f.tensors())
    if (!expected.count(name)) extra += ' ' + printable(name, 60);
  ATTEND_CHECK(missing.empty() && extra.empty(), p, ": the tensors do not match a ", arch,
               " of these keys;", missing.empty() ? "" : " missing:", missing,
               extra.empty() ? "" : " unexpected:", extra);
  check_import_memory(p, c);
  Imported r;
  r.model = std::make_unique<nn::GPT>(c, 0, false);  // every parameter is copied below
  const std::map<std::string, Tensor> params = parameters_by_name(*r.model);
  NoGradGuard no_grad;
  for (const GgufRow& row : names) {
    const Tensor t = f.read(row.name);
    if (row.ours.empty()) {  // a bias-free GPT-2's zero biases
      const Tensor z = kernel::contiguous(t);
      for (int64_t i = 0; i < z.numel(); ++i)
        ATTEND_CHECK(z.data<float>()[i] == 0.0f, p, ": ", row.name,
                     " is not zero, but attend.bias is false");
      continue;
    }
    kernel::copy_(attend_view(params, row), t);
  }
  r.tensors = static_cast<int64_t>(names.size());
  std::map<std::string, int> types;  // stored type -> tensors
  for (const auto& [_, info] : f.tensors())
    ++types[io::ggml_type_name(static_cast<uint32_t>(info.type))];
  r.source = str(fs::absolute(f.path()).string(), " (GGUF ", arch, ";");
  for (const auto& [t, n] : types) r.source += str(" ", n, " ", t);
  r.source += " tensors, read as f32)";
  const std::string bad = nn::first_non_finite(r.model->named_parameters());
  ATTEND_CHECK(bad.empty(), p, ": ", bad, " holds NaN or infinite values");
  auto tok = o.tokenizer.empty() ? gguf_tokenizer(f) : data::tokenizer_from_arg(o.tokenizer);
  ATTEND_CHECK(tok->vocab_size() == c.vocab_size, "import: the tokenizer ", tok->spec().name,
               " has ", tok->vocab_size(), " tokens, ", p, "'s token_embd.weight ", c.vocab_size);
  r.tokenizer = std::move(tok);
  return r;
}

}  // namespace attend::convert
