// Hugging Face's tokenizer.json: byte-level BPE in, and out.
#include "data/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <unordered_map>

#include "data/regex.h"
#include "data/utf8.h"
#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 21;
constexpr int kMaxJsonDepth = 32;

json parse_json(const std::string& text, const std::string& where) {
  // Depth bounded: nothing in a tokenizer file nests deeper than a few levels.
  const auto depth_check = [&](int depth, json::parse_event_t, json&) {
    ATTEND_CHECK(depth <= kMaxJsonDepth, where, ": JSON nested deeper than ", kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text, depth_check);
  } catch (const json::parse_error& e) {
    throw Error(str(where, ": invalid JSON at byte ", e.byte));
  } catch (const json::exception& e) {
    throw Error(str(where, ": invalid JSON: ", e.what()));
  }
}

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "(no type)";
  return printable(j["type"].get<std::string>(), 60);
}

bool is_false_or_absent(const json& obj, const char* key) {
  return !obj.contains(key) || obj[key].is_null() || (obj[key].is_boolean() && !obj[key].get<bool>());
}

bool empty_or_absent(const json& obj, const char* key) {
  return !obj.contains(key) || obj[key].is_null() ||
         (obj[key].is_string() && obj[key].get<std::string>().empty());
}

void check_byte_level(const json& bl, const std::string& where, bool want_regex) {
  ATTEND_CHECK(is_false_or_absent(bl, "add_prefix_space"), where,
               ": add_prefix_space true is not supported (attend does not add a space)");
  const bool regex = !bl.contains("use_regex") || (bl["use_regex"].is_boolean() && bl["use_regex"].get<bool>());
  ATTEND_CHECK(bl.contains("use_regex") ? bl["use_regex"].is_boolean() : true, where,
               ": use_regex must be true or false");
  ATTEND_CHECK(regex == want_regex, where, ": use_regex ", regex ? "true" : "false",
               want_regex ? " (expected true: a ByteLevel alone must cut with GPT-2's pattern)"
                          : " (expected false after a Split: the Split already cut the text)");
}

// The pre-tokenizer's pattern: "" for GPT-2's.
std::string read_pre_tokenizer(const json& pt, const std::string& file) {
  const std::string where = file + ": pre_tokenizer";
  ATTEND_CHECK(pt.is_object(), where, " must be an object (a byte-level tokenizer has one)");
  const std::string type = type_of(pt);
  if (type == "ByteLevel") {
    check_byte_level(pt, where, true);
    return "";
  }
  ATTEND_CHECK(type == "Sequence", where, ": type '", type,
               "' is not supported (ByteLevel, or a Sequence of a Split and a ByteLevel)");
  ATTEND_CHECK(pt.contains("pretokenizers") && pt["pretokenizers"].is_array(), where,
               ": a Sequence needs a \"pretokenizers\" array");
  const json& seq = pt["pretokenizers"];
  if (seq.size() == 1 && type_of(seq[0]) == "ByteLevel") {
    check_byte_level(seq[0], where + ".pretokenizers[0]", true);
    return "";
  }
  ATTEND_CHECK(seq.size() == 2 && type_of(seq[0]) == "Split" && type_of(seq[1]) == "ByteLevel",
               where, ": a Sequence of ", seq.size(), " pre-tokenizers (",
               seq.empty() ? std::string("none") : type_of(seq[0]),
               seq.size() > 1 ? ", " + type_of(seq[1]) : std::string(),
               seq.size() > 2 ? ", ..." : "",
               ") is not supported; expected a Split on a regex, then a ByteLevel");
  const json& split = seq[0];
  const std::string sw = where + ".pretokenizers[0]";
  ATTEND_CHECK(split.contains("behavior") && split["behavior"] == "Isolated", sw,
               ": behavior must be \"Isolated\" (each match its own piece)");
  ATTEND_CHECK(is_false_or_absent(split, "invert"), sw, ": invert true is not supported");
  ATTEND_CHECK(split.contains("pattern") && split["pattern"].is_object() &&
                   split["pattern"].contains("Regex") && split["pattern"]["Regex"].is_string(),
               sw, ": pattern must be {\"Regex\": \"...\"}");
  check_byte_level(seq[1], where + ".pretokenizers[1]", false);
  std::string pattern = split["pattern"]["Regex"].get<std::string>();
  try {
    Regex check(pattern);  // refused here, naming the construct, rather than at first use
  } catch (const Error& e) {
    throw Error(str(sw, ".pattern: ", e.what()));
  }
  return pattern == kGpt2Pattern ? "" : pattern;
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const fs::path& path) {
  const std::string file = path.string();
  ATTEND_CHECK(path.extension() != ".model", file,
               ": a SentencePiece model (tokenizer.model) is not supported; attend reads "
               "byte-level BPE tokenizers in Hugging Face's tokenizer.json");
  const json j = parse_json(read_file(path), file);
  ATTEND_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), file,
               ": not a Hugging Face tokenizer file (no \"model\" object)");
  const json& m = j["model"];
  const std::string mw = file + ": model";
  const std::string mtype = m.contains("type") ? type_of(m) : "BPE";
  ATTEND_CHECK(mtype == "BPE", mw, ".type is '", mtype,
               "': only byte-level BPE tokenizers are supported (not Unigram, WordPiece or "
               "WordLevel)");
  ATTEND_CHECK(is_false_or_absent(m, "byte_fallback"), mw,
               ".byte_fallback is true: a SentencePiece-style BPE (as Llama 2's) is not "
               "supported, only byte-level BPE");
  ATTEND_CHECK(!m.contains("dropout") || m["dropout"].is_null() ||
                   (m["dropout"].is_number() && m["dropout"].get<double>() == 0.0),
               mw, ".dropout must be null (BPE dropout is for training tokenizers)");
  ATTEND_CHECK(empty_or_absent(m, "continuing_subword_prefix") && empty_or_absent(m, "end_of_word_suffix"),
               mw, ": continuing_subword_prefix and end_of_word_suffix must be empty");
  ATTEND_CHECK(!m.contains("ignore_merges") || m["ignore_merges"].is_boolean(), mw,
               ".ignore_merges must be true or false");
  ATTEND_CHECK(j.contains("normalizer") ? j["normalizer"].is_null() : true, file,
               ": normalizer '", j.contains("normalizer") ? type_of(j["normalizer"]) : "",
               "' is not supported (byte-level tokenizers have none)");
  ATTEND_CHECK(j.contains("pre_tokenizer"), file, ": no pre_tokenizer");

  TokenizerSpec spec;
  spec.kind = "bpe";
  {
    std::string dir = path.parent_path().filename().string();
    if (dir.empty() || dir == "." || dir == "..") dir = "tokenizer";
    spec.name = "hf:" + printable(dir, 60);
  }
  spec.pattern = read_pre_tokenizer(j["pre_tokenizer"], file);
  spec.ignore_merges = m.value("ignore_merges", false);

  ATTEND_CHECK(m.contains("vocab") && m["vocab"].is_object(), mw,
               ".vocab must be an object of token -> id");
  const json& vocab = m["vocab"];
  const json empty = json::array();
  const json& added = j.contains("added_tokens") && !j["added_tokens"].is_null() ? j["added_tokens"] : empty;
  ATTEND_CHECK(added.is_array(), file, ": added_tokens must be an array");
  // Every id first, bounded, before the vocabulary is sized from them.
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    ATTEND_CHECK(it.value().is_number_integer(), mw, ".vocab: token '", printable(it.key(), 60),
                 "' has a value that is not an integer id");
    const int64_t id = it.value().get<int64_t>();
    ATTEND_CHECK(id >= 0 && id < kMaxVocab, mw, ".vocab: token '", printable(it.key(), 60),
                 "' has id ", id, " (ids must be in [0, ", kMaxVocab, "))");
    max_id = std::max(max_id, id);
  }
  for (size_t k = 0; k < added.size(); ++k) {
    const json& a = added[k];
    ATTEND_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                     a.contains("content") && a["content"].is_string(),
                 file, ": added_tokens[", k, "] needs an integer \"id\" and a string \"content\"");
    const int64_t id = a["id"].get<int64_t>();
    ATTEND_CHECK(id >= 0 && id < kMaxVocab, file, ": added_tokens[", k, "] has id ", id,
                 " (ids must be in [0, ", kMaxVocab, "))");
    max_id = std::max(max_id, id);
  }
  ATTEND_CHECK(max_id >= 0, mw, ".vocab is empty");
  const size_t V = static_cast<size_t>(max_id) + 1;
  spec.tokens.assign(V, std::string());
  std::vector<uint8_t> seen(V, 0);
  std::unordered_map<std::string, int32_t> ids;  // the vocab's strings (mapped) -> id
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    ATTEND_CHECK(!seen[id], mw, ".vocab: id ", id, " is given twice");
    std::string bytes;
    ATTEND_CHECK(unicode_string_to_bytes(it.key(), bytes) && !bytes.empty(), mw, ".vocab: token '",
                 printable(it.key(), 60),
                 "' is not a byte-level token (a character outside GPT-2's byte-to-unicode map)");
    seen[id] = 1;
    spec.tokens[id] = std::move(bytes);
    ids.emplace(it.key(), static_cast<int32_t>(id));
  }
  // Each byte string has one id in attend's vocabulary (encoder.json maps strings to ids):
  // an added token with another token's bytes under a new id would make a folder that
  // does not load. Refused here, naming both.
  std::unordered_map<std::string, int64_t> by_bytes;
  for (size_t id = 0; id < V; ++id)
    if (seen[id] == 1) by_bytes.emplace(spec.tokens[id], static_cast<int64_t>(id));
  for (size_t k = 0; k < added.size(); ++k) {
    const int64_t id = added[k]["id"].get<int64_t>();
    const std::string content = added[k]["content"].get<std::string>();
    ATTEND_CHECK(!content.empty(), file, ": added_tokens[", k, "] is empty");
    if (seen[id] != 1) {
      auto same = by_bytes.find(content);
      ATTEND_CHECK(same == by_bytes.end() || same->second == id, file, ": added_tokens[", k,
                   "] ('", printable(content, 60), "', id ", id, ") has the bytes of token ",
                   same == by_bytes.end() ? 0 : same->second,
                   "; attend gives each byte string one id");
      by_bytes.emplace(content, id);
    }
    if (seen[id] == 1) {
      ATTEND_CHECK(spec.tokens[id] == content, file, ": added_tokens[", k, "] ('",
                   printable(content, 60), "') has id ", id, ", which the vocab gives to '",
                   printable(spec.tokens[id], 60), "'");
      continue;
    }
    ATTEND_CHECK(!seen[id], file, ": added_tokens: id ", id, " is given twice");
    seen[id] = 2;
    spec.tokens[id] = content;
  }
  for (size_t id = 0; id < V; ++id)
    ATTEND_CHECK(seen[id], file, ": no token has id ", id, " (ids must be 0..", V - 1,
                 " with none missing)");

  ATTEND_CHECK(m.contains("merges") && m["merges"].is_array(), mw, ".merges must be an array");
  const json& merges = m["merges"];
  spec.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    if (merges[r].is_string()) {
      const std::string line = merges[r].get<std::string>();
      const size_t sp = line.find(' ');
      ATTEND_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() &&
                       line.find(' ', sp + 1) == std::string::npos,
                   mw, ".merges[", r, "] is '", printable(line, 60),
                   "', expected two tokens separated by one space");
      a = line.substr(0, sp), b = line.substr(sp + 1);
    } else {
      ATTEND_CHECK(merges[r].is_array() && merges[r].size() == 2 && merges[r][0].is_string() &&
                       merges[r][1].is_string(),
                   mw, ".merges[", r, "] must be \"a b\" or [\"a\", \"b\"]");
      a = merges[r][0].get<std::string>(), b = merges[r][1].get<std::string>();
    }
    auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
    ATTEND_CHECK(ia != ids.end() && ib != ids.end(), mw, ".merges[", r, "] merges '",
                 printable(a, 60), "' and '", printable(b, 60), "', not both in the vocab");
    ATTEND_CHECK(iab != ids.end(), mw, ".merges[", r, "]: the merged token '", printable(a + b, 60),
                 "' is not in the vocab");
    spec.merges.emplace_back(ia->second, ib->second);
  }
  try {
    return make_tokenizer(spec);
  } catch (const Error& e) {
    throw Error(str(file, ": ", e.what()));
  }
}

std::string hf_tokenizer_json(const TokenizerSpec& spec) {
  ATTEND_CHECK(spec.kind == "bpe", "tokenizer.json: Hugging Face's format has no byte-level form of a ",
               spec.kind, " tokenizer");
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const std::string key = bytes_to_unicode_string(spec.tokens[id]);
    ATTEND_CHECK(!vocab.contains(key), "tokenizer.json: ids ", vocab[key].get<int64_t>(), " and ",
                 id, " have the same bytes; Hugging Face's vocab maps each string to one id");
    vocab[key] = id;
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (auto [a, b] : spec.merges)
    merges.push_back(bytes_to_unicode_string(spec.tokens[a]) + " " +
                     bytes_to_unicode_string(spec.tokens[b]));
  auto byte_level = [](bool use_regex) {
    return nlohmann::ordered_json{{"type", "ByteLevel"},
                                  {"add_prefix_space", false},
                                  {"trim_offsets", true},
                                  {"use_regex", use_regex}};
  };
  nlohmann::ordered_json pre;
  if (spec.pattern.empty()) {
    pre = byte_level(true);
  } else {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            nlohmann::ordered_json::array(
                {{{"type", "Split"},
                  {"pattern", {{"Regex", spec.pattern}}},
                  {"behavior", "Isolated"},
                  {"invert", false}},
                 byte_level(false)})}};
  }
  nlohmann::ordered_json out;
  out["version"] = "1.0";
  out["truncation"] = nullptr;
  out["padding"] = nullptr;
  out["added_tokens"] = nlohmann::ordered_json::array();
  out["normalizer"] = nullptr;
  out["pre_tokenizer"] = pre;
  out["post_processor"] = byte_level(true);
  out["decoder"] = byte_level(true);
  out["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", spec.ignore_merges},
                  {"vocab", vocab},
                  {"merges", merges}};
  return out.dump(1) + "\n";
}

}  // namespace attend::data
