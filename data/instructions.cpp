#include "data/instructions.h"

#include <nlohmann/json.hpp>

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

std::vector<std::string> instruction_templates() { return {"alpaca"}; }

std::string instruction_prompt(const std::string& template_name, const std::string& instruction,
                               const std::string& input) {
  ATTEND_CHECK(template_name == "alpaca", "--template '", printable(template_name, 40),
               "' is not a template attend knows (alpaca)");
  return render_alpaca(instruction, input);
}

namespace {

// The entries of a JSON array of objects, each handed to `take` with a getter of its string
// fields (a missing or null optional field reads as empty; a required one, or a field of
// another type, is refused naming the file, the entry and the field).
using FieldGetter = std::function<std::string(const char* field, bool required)>;
void for_each_entry(const fs::path& file, const char* what,
                    const std::function<void(size_t, const std::string&, const FieldGetter&)>& take) {
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
  ATTEND_CHECK(j.is_array(), "prepare: --data ", file.string(),
               ": expected a JSON array of examples ({\"instruction\", \"input\", \"output\"})");
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
  ATTEND_CHECK(!j.empty(), "prepare: --data ", file.string(), " holds no examples");
}

}  // namespace

std::vector<RenderedExample> read_instruction_file(const fs::path& file,
                                                   const std::string& template_name) {
  instruction_prompt(template_name, "");  // a template attend knows, before reading
  std::vector<RenderedExample> out;
  for_each_entry(file, "alpaca", [&](size_t, const std::string& where, const FieldGetter& text) {
    const std::string instruction = text("instruction", true), input = text("input", false),
                      output = text("output", true);
    ATTEND_CHECK(!instruction.empty(), where, ": \"instruction\" is empty");
    ATTEND_CHECK(!output.empty(), where, ": \"output\" is empty (an example needs a response)");
    out.push_back({instruction_prompt(template_name, instruction, input), output});
  });
  return out;
}

std::vector<PreferencePair> read_preference_file(const fs::path& file,
                                                 const std::string& template_name) {
  instruction_prompt(template_name, "");
  std::vector<PreferencePair> out;
  for_each_entry(file, "preference",
                 [&](size_t, const std::string& where, const FieldGetter& text) {
                   const std::string instruction = text("instruction", true),
                                     input = text("input", false), chosen = text("chosen", true),
                                     rejected = text("rejected", true);
                   ATTEND_CHECK(!instruction.empty(), where, ": \"instruction\" is empty");
                   ATTEND_CHECK(!chosen.empty(), where,
                                ": \"chosen\" is empty (a pair needs both responses)");
                   ATTEND_CHECK(!rejected.empty(), where,
                                ": \"rejected\" is empty (a pair needs both responses)");
                   out.push_back({instruction_prompt(template_name, instruction, input), chosen,
                                  rejected});
                 });
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
