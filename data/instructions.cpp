#include "data/instructions.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <functional>

#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace fs = std::filesystem;

namespace {

constexpr char kExamplesMagic[8] = {'A', 'T', 'N', 'D', 'E', 'X', 'M', 'P'};
constexpr uint32_t kExamplesVersion = 1, kPairsVersion = 2;
constexpr size_t kExamplesHeader = 32;
constexpr int64_t kMaxInstructionFile = int64_t{1} << 30;  // 1 GiB of JSON

// Stanford Alpaca's prompt (the book's chapter 7 format_input), input section only when
// the example has an input.
std::string render_alpaca(const std::string& instruction, const std::string& input) {
  std::string p =
      "Below is an instruction that describes a task. Write a response that appropriately "
      "completes the request.\n\n### Instruction:\n" +
      instruction;
  if (!input.empty()) p += "\n\n### Input:\n" + input;
  return p + "\n\n### Response:\n";
}

}  // namespace

std::vector<std::string> instruction_templates() { return {"alpaca", "chatml", "llama3"}; }

const ChatTemplate& chat_template(const std::string& name) {
  static const std::vector<ChatTemplate> all = {
      {"alpaca", {}, "", false},
      {"chatml", {"<|im_start|>", "<|im_end|>"}, "<|im_end|>", true},
      {"llama3",
       {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
       "<|eot_id|>",
       true},
  };
  for (const ChatTemplate& t : all)
    if (t.name == name) return t;
  throw Error(str("--template '", printable(name, 40),
                  "' is not a template attend knows (alpaca, chatml, llama3)"));
}

namespace {

std::string user_text(const std::string& instruction, const std::string& input) {
  return input.empty() ? instruction : instruction + "\n\n" + input;
}

TemplatePiece special(const char* name) { return {name, true}; }

// The code point at s[i] (UTF-8) and its length; an invalid byte reads as itself, length 1.
uint32_t code_point_at(const std::string& s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (n == 1 || i + n > s.size()) {
    *len = 1;
    return c;
  }
  uint32_t v = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) {
      *len = 1;
      return c;
    }
    v = (v << 6) | (b(k) & 0x3F);
  }
  *len = n;
  return v;
}

// Python's str.isspace: what Jinja's trim filter (str.strip) removes.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

void llama3_message(Rendered& r, const char* role, const std::string& content) {
  r.push_back(special("<|start_header_id|>"));
  r.push_back({std::string(role)});
  r.push_back(special("<|end_header_id|>"));
  r.push_back({"\n\n" + python_strip(content)});
  r.push_back(special("<|eot_id|>"));
}

void llama3_assistant(Rendered& r) {
  r.push_back(special("<|start_header_id|>"));
  r.push_back({"assistant"});
  r.push_back(special("<|end_header_id|>"));
  r.push_back({"\n\n"});
}

void chatml_message(Rendered& r, const char* role, const std::string& content) {
  r.push_back(special("<|im_start|>"));
  r.push_back({std::string(role) + "\n" + content});
  r.push_back(special("<|im_end|>"));
  r.push_back({"\n"});
}

void chatml_assistant(Rendered& r) {
  r.push_back(special("<|im_start|>"));
  r.push_back({"assistant\n"});
}

}  // namespace

std::string python_strip(const std::string& s) {
  size_t from = 0, to = s.size(), len = 0;
  while (from < to && python_space(code_point_at(s, from, &len))) from += len;
  while (to > from) {  // the last code point: back over its continuation bytes
    size_t start = to - 1;
    while (start > from && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && to - start < 4)
      --start;
    if (!python_space(code_point_at(s, start, &len)) || start + len != to) break;
    to = start;
  }
  return s.substr(from, to - from);
}

std::string template_content(const ChatTemplate& t, const std::string& content) {
  return t.name == "llama3" ? python_strip(content) : content;
}

Rendered render_prompt(const ChatTemplate& t, const std::string& instruction,
                       const std::string& input, const std::string& system) {
  Rendered r;
  if (t.name == "alpaca") {
    ATTEND_CHECK(system.empty(), "--system: the alpaca template has no system message; use "
                 "--template chatml or llama3");
    r.push_back({render_alpaca(instruction, input)});
  } else if (t.name == "chatml") {
    if (!system.empty()) chatml_message(r, "system", system);
    chatml_message(r, "user", user_text(instruction, input));
    chatml_assistant(r);
  } else {
    r.push_back(special("<|begin_of_text|>"));
    if (!system.empty()) llama3_message(r, "system", system);
    llama3_message(r, "user", user_text(instruction, input));
    llama3_assistant(r);
  }
  return r;
}

Rendered render_next_turn(const ChatTemplate& t, const std::string& user) {
  ATTEND_INTERNAL_CHECK(t.multi_turn, "render_next_turn: ", t.name, " is single-turn");
  Rendered r;
  if (t.name == "chatml") {
    r.push_back({"\n"});  // after the previous response's <|im_end|>
    chatml_message(r, "user", user);
    chatml_assistant(r);
  } else {
    llama3_message(r, "user", user);
    llama3_assistant(r);
  }
  return r;
}

std::string rendered_text(const Rendered& r) {
  std::string s;
  for (const TemplatePiece& p : r) s += p.text;
  return s;
}

int32_t token_id(const TokenizerSpec& spec, const std::string& token) {
  for (size_t id = 0; id < spec.tokens.size(); ++id)
    if (spec.tokens[id] == token) return static_cast<int32_t>(id);
  return -1;
}

TokenIds encode_rendered(const Tokenizer& tok, const Rendered& r) {
  TokenIds ids;
  for (const TemplatePiece& p : r) {
    if (!p.special) {
      const TokenIds t = tok.encode(p.text);
      ids.insert(ids.end(), t.begin(), t.end());
      continue;
    }
    const int32_t id = token_id(tok.spec(), p.text);
    ATTEND_CHECK(id >= 0, "tokenizer ", tok.spec().name, " has no ", p.text,
                 " token (prepare --template adds a template's tokens to a tokenizer that "
                 "lacks them; this model was not finetuned with that template)");
    ids.push_back(id);
  }
  return ids;
}

int32_t end_of_turn_id(const ChatTemplate& t, const TokenizerSpec& spec) {
  return t.end_of_turn.empty() ? end_of_text_id(spec) : token_id(spec, t.end_of_turn);
}

TokenizerSpec with_template_tokens(const TokenizerSpec& spec, const ChatTemplate& t,
                                   std::vector<std::string>* added) {
  TokenizerSpec out = spec;
  for (const std::string& s : t.specials)
    if (token_id(spec, s) < 0) {
      out.tokens.push_back(s);
      if (added) added->push_back(s);
    }
  if (out.tokens.size() != spec.tokens.size()) out.name = spec.name + "+" + t.name;
  return out;
}

bool extends_with_specials(const TokenizerSpec& wider, const TokenizerSpec& base,
                           int64_t* added) {
  if (wider.kind != base.kind || wider.merges != base.merges || wider.pattern != base.pattern ||
      wider.ignore_merges != base.ignore_merges || wider.tokens.size() < base.tokens.size() ||
      !std::equal(base.tokens.begin(), base.tokens.end(), wider.tokens.begin()))
    return false;
  for (size_t i = base.tokens.size(); i < wider.tokens.size(); ++i) {
    const std::string& s = wider.tokens[i];
    if (s.size() < 5 || s.rfind("<|", 0) != 0 || s.compare(s.size() - 2, 2, "|>") != 0)
      return false;
  }
  if (added) *added = static_cast<int64_t>(wider.tokens.size() - base.tokens.size());
  return true;
}

std::string instruction_prompt(const std::string& template_name, const std::string& instruction,
                               const std::string& input) {
  return rendered_text(render_prompt(chat_template(template_name), instruction, input));
}

namespace {

// The entries of a JSON array of objects, each handed to `take` with a getter of its string
// fields (a missing or null optional field reads as empty; a required one, or a field of
// another type, is refused naming the file, the entry and the field).
using FieldGetter = std::function<std::string(const char* field, bool required)>;
// The JSON array an instruction, preference or conversation file holds (size and syntax
// checked; `expected` describes an entry for the error when it is not an array).
nlohmann::json read_json_array(const fs::path& file, const char* what, const char* expected) {
  std::error_code ec;
  ATTEND_CHECK(fs::is_regular_file(file, ec), "prepare: --data ", file.string(),
               ": not a regular file (--format ", what, " reads one JSON file)");
  const auto size = fs::file_size(file, ec);
  ATTEND_CHECK(!ec, "prepare: --data ", file.string(), ": cannot read (", ec.message(), ")");
  ATTEND_CHECK(size <= static_cast<uintmax_t>(kMaxInstructionFile), "prepare: --data ",
               file.string(), " is ", size, " bytes; instruction files over 1 GiB are refused");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("prepare: --data ", file.string(), ": not JSON (", e.what(), ")"));
  }
  ATTEND_CHECK(j.is_array(), "prepare: --data ", file.string(), ": expected a JSON array of ",
               expected);
  ATTEND_CHECK(!j.empty(), "prepare: --data ", file.string(), " holds no examples");
  return j;
}

void for_each_entry(const fs::path& file, const char* what,
                    const std::function<void(size_t, const std::string&, const FieldGetter&)>& take) {
  const nlohmann::json j =
      read_json_array(file, what, "examples ({\"instruction\", \"input\", \"output\"})");
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string where = str("prepare: --data ", file.string(), ": example ", i);
    ATTEND_CHECK(e.is_object(), where, " is not an object");
    const FieldGetter text = [&](const char* field, bool required) -> std::string {
      auto it = e.find(field);
      if (it == e.end() || it->is_null()) {
        ATTEND_CHECK(!required, where, " has no \"", field, "\"");
        return "";
      }
      ATTEND_CHECK(it->is_string(), where, ": \"", field, "\" is ", it->type_name(),
                   ", expected a string");
      return it->get<std::string>();
    };
    take(i, where, text);
  }
}

}  // namespace

std::vector<RenderedExample> read_instruction_file(const fs::path& file,
                                                   const std::string& template_name,
                                                   const std::string& system) {
  const ChatTemplate& t = chat_template(template_name);  // one attend knows, before reading
  render_prompt(t, "", "", system);                       // and a system message it takes
  std::vector<RenderedExample> out;
  for_each_entry(file, "alpaca", [&](size_t, const std::string& where, const FieldGetter& text) {
    const std::string instruction = text("instruction", true), input = text("input", false),
                      output = template_content(t, text("output", true));
    ATTEND_CHECK(!instruction.empty(), where, ": \"instruction\" is empty");
    ATTEND_CHECK(!output.empty(), where, ": \"output\" is empty (an example needs a response)",
                 t.name == "llama3" ? " once trimmed, as Llama 3's template trims" : "");
    out.push_back({render_prompt(t, instruction, input, system), output});
  });
  return out;
}

std::vector<PreferencePair> read_preference_file(const fs::path& file,
                                                 const std::string& template_name,
                                                 const std::string& system) {
  const ChatTemplate& t = chat_template(template_name);
  render_prompt(t, "", "", system);
  std::vector<PreferencePair> out;
  for_each_entry(file, "preference",
                 [&](size_t, const std::string& where, const FieldGetter& text) {
                   const std::string instruction = text("instruction", true),
                                     input = text("input", false),
                                     chosen = template_content(t, text("chosen", true)),
                                     rejected = template_content(t, text("rejected", true));
                   const char* trimmed =
                       t.name == "llama3" ? " once trimmed, as Llama 3's template trims" : "";
                   ATTEND_CHECK(!instruction.empty(), where, ": \"instruction\" is empty");
                   ATTEND_CHECK(!chosen.empty(), where,
                                ": \"chosen\" is empty (a pair needs both responses)", trimmed);
                   ATTEND_CHECK(!rejected.empty(), where,
                                ": \"rejected\" is empty (a pair needs both responses)", trimmed);
                   out.push_back({render_prompt(t, instruction, input, system), chosen, rejected});
                 });
  return out;
}

std::vector<RenderedExample> read_chat_file(const fs::path& file,
                                            const std::string& template_name,
                                            const std::string& system,
                                            std::vector<int64_t>* conversation) {
  const ChatTemplate& t = chat_template(template_name);
  ATTEND_CHECK(t.multi_turn, "prepare --format chat: --template ", t.name,
               " has one turn and no history; use chatml or llama3");
  const nlohmann::json j = read_json_array(
      file, "chat", "conversations ({\"messages\": [{\"role\", \"content\"}, ...]})");
  std::vector<RenderedExample> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string where = str("prepare: --data ", file.string(), ": conversation ", i);
    ATTEND_CHECK(e.is_object(), where, " is not an object");
    auto it = e.find("messages");
    ATTEND_CHECK(it != e.end(), where, " has no \"messages\"");
    ATTEND_CHECK(it->is_array() && !it->empty(), where, ": \"messages\" is ",
                 it->is_array() ? "empty" : it->type_name(), ", expected an array of messages");
    std::string sys = system;
    Rendered history;  // the conversation so far, ending with an assistant header
    std::string pending_user;
    bool first_user = true;
    const size_t before = out.size();
    for (size_t m = 0; m < it->size(); ++m) {
      const nlohmann::json& msg = (*it)[m];
      const std::string at = str(where, ", message ", m);
      ATTEND_CHECK(msg.is_object(), at, " is not an object");
      auto field = [&](const char* name) {
        auto f = msg.find(name);
        ATTEND_CHECK(f != msg.end() && !f->is_null(), at, " has no \"", name, "\"");
        ATTEND_CHECK(f->is_string(), at, ": \"", name, "\" is ", f->type_name(),
                     ", expected a string");
        return f->get<std::string>();
      };
      const std::string role = field("role"), content = field("content");
      ATTEND_CHECK(role == "system" || role == "user" || role == "assistant", at,
                   ": \"role\" is '", printable(role, 40),
                   "', expected system, user or assistant");
      ATTEND_CHECK(role == "system" || !content.empty(), at, ": \"content\" is empty");
      if (role == "system") {
        ATTEND_CHECK(m == 0, at, ": a system message comes first or not at all");
        sys = content;
        continue;
      }
      if (role == "user") {
        ATTEND_CHECK(pending_user.empty(), at,
                     ": two user messages in a row (the roles alternate, user first)");
        pending_user = content;
        continue;
      }
      // assistant: after a user message
      ATTEND_CHECK(!pending_user.empty(), at,
                   first_user ? ": the conversation starts with the assistant (a user message "
                                "comes first)"
                              : ": two assistant messages in a row (the roles alternate)");
      const std::string reply = template_content(t, content);
      ATTEND_CHECK(!reply.empty(), at, ": \"content\" is only whitespace, which the ", t.name,
                   " template trims away");
      const Rendered turn = first_user ? render_prompt(t, pending_user, "", sys)
                                       : render_next_turn(t, pending_user);
      history.insert(history.end(), turn.begin(), turn.end());
      out.push_back({history, reply});
      if (conversation) conversation->push_back(static_cast<int64_t>(i));
      history.push_back({reply});
      history.push_back({t.end_of_turn, true});
      pending_user.clear();
      first_user = false;
    }
    ATTEND_CHECK(out.size() > before, where, " has no assistant message to learn");
    ATTEND_CHECK(pending_user.empty(), where,
                 " ends with a user message (a conversation ends with the assistant's answer)");
  }
  return out;
}

int32_t end_of_text_id(const TokenizerSpec& spec) {
  for (size_t id = 0; id < spec.tokens.size(); ++id)
    if (spec.tokens[id] == "<|endoftext|>" || spec.tokens[id] == "<|end_of_text|>")
      return static_cast<int32_t>(id);
  return -1;
}

void write_examples_file(const fs::path& path, const std::vector<ExampleSpan>& spans,
                         int64_t tokens, bool pairs) {
  std::string buf(kExamplesHeader + spans.size() * 16, '\0');
  const uint64_t count = spans.size(), n = static_cast<uint64_t>(tokens);
  const uint32_t kind = pairs ? 1 : 0;
  std::memcpy(buf.data(), kExamplesMagic, 8);
  std::memcpy(buf.data() + 8, pairs ? &kPairsVersion : &kExamplesVersion, 4);
  std::memcpy(buf.data() + 12, &kind, 4);
  ATTEND_CHECK(!pairs || spans.size() % 2 == 0, "examples file: ", spans.size(),
               " examples cannot be preference pairs");
  std::memcpy(buf.data() + 16, &count, 8);
  std::memcpy(buf.data() + 24, &n, 8);
  int64_t sum = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    ATTEND_CHECK(spans[i].prompt >= 1 && spans[i].prompt < spans[i].length,
                 "examples file: example ", i, " has prompt ", spans[i].prompt, " of length ",
                 spans[i].length);
    const uint64_t p = static_cast<uint64_t>(spans[i].prompt),
                   l = static_cast<uint64_t>(spans[i].length);
    std::memcpy(buf.data() + kExamplesHeader + 16 * i, &p, 8);
    std::memcpy(buf.data() + kExamplesHeader + 16 * i + 8, &l, 8);
    ATTEND_CHECK(!pairs || i % 2 == 0 || spans[i].prompt == spans[i - 1].prompt,
                 "examples file: pair ", i / 2, " has prompts of ", spans[i - 1].prompt, " and ",
                 spans[i].prompt, " tokens");
    sum += spans[i].length;
  }
  ATTEND_CHECK(sum == tokens, "examples file: the lengths sum to ", sum, ", not ", tokens);
  write_file_atomic(path, std::string_view(buf.data(), buf.size()));
}

std::vector<ExampleSpan> read_examples_file(const fs::path& path, int64_t tokens, bool* pairs) {
  return parse_examples_file(read_file(path), path, tokens, pairs);
}

std::vector<ExampleSpan> parse_examples_file(const std::string& bytes, const fs::path& path,
                                             int64_t tokens, bool* pairs) {
  const std::string p = path.string();
  ATTEND_CHECK(bytes.size() >= kExamplesHeader && std::memcmp(bytes.data(), kExamplesMagic, 8) == 0,
               p, ": not an examples file (magic ATNDEXMP)");
  uint32_t version = 0, kind = 0;
  uint64_t count = 0, n = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&kind, bytes.data() + 12, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  std::memcpy(&n, bytes.data() + 24, 8);
  ATTEND_CHECK(version == kExamplesVersion || version == kPairsVersion, p,
               ": examples file version ", version, "; this attend reads versions ",
               kExamplesVersion, " and ", kPairsVersion);
  ATTEND_CHECK(kind == (version == kPairsVersion ? 1u : 0u), p, ": kind ", kind,
               " in a version ", version, " examples file (1: examples, 0; 2: pairs, 1)");
  const bool is_pairs = kind == 1;
  if (pairs) *pairs = is_pairs;
  ATTEND_CHECK(count >= 1 && count <= (bytes.size() - kExamplesHeader) / 16 &&
                   bytes.size() == kExamplesHeader + 16 * count,
               p, ": example count ", count, " does not fit the file's ", bytes.size(), " bytes");
  ATTEND_CHECK(n == static_cast<uint64_t>(tokens), p, ": indexes ", n,
               " tokens, but its token file holds ", tokens);
  std::vector<ExampleSpan> spans(count);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t pl = 0, l = 0;
    std::memcpy(&pl, bytes.data() + kExamplesHeader + 16 * i, 8);
    std::memcpy(&l, bytes.data() + kExamplesHeader + 16 * i + 8, 8);
    ATTEND_CHECK(pl >= 1 && pl < l && l <= n - sum, p, ": example ", i, " (prompt ", pl,
                 ", length ", l, ") does not fit the ", n - sum, " tokens left");
    spans[i] = {static_cast<int64_t>(pl), static_cast<int64_t>(l)};
    ATTEND_CHECK(!is_pairs || i % 2 == 0 || spans[i].prompt == spans[i - 1].prompt, p, ": pair ",
                 i / 2, " has a chosen prompt of ", spans[i - 1].prompt,
                 " tokens and a rejected one of ", pl, "; a pair shares its prompt");
    sum += l;
  }
  ATTEND_CHECK(!is_pairs || count % 2 == 0, p, ": ", count,
               " examples in a pairs file (a pair is two)");
  ATTEND_CHECK(sum == n, p, ": the examples cover ", sum, " of the ", n, " tokens");
  return spans;
}

}  // namespace attend::data
