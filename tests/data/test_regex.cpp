// The pre-tokenizer regex engine (data/regex.h): against the hand-written GPT-2
// pretokenizer, against Python's `regex` module on the patterns tokenizers ship, its
// refusals, and its bound on work.
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data/hf_tokenizer.h"
#include "data/pretokenize.h"
#include "data/regex.h"
#include "patterns.h"
#include "random_text.h"
#include "test_util.h"

using namespace attend;
using namespace attend::data;
using attend::test::check_error;
using attend::test::kCl100kPattern;
using attend::test::kLlama3Pattern;
using attend::test::random_bytes;
using attend::test::random_unicode;
using attend::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> strings(const std::vector<std::string_view>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("regex: GPT-2's pattern cuts text exactly as the hand-written pretokenizer") {
  const Regex re(kGpt2Pattern);
  Generator g(31);
  int compared = 0;
  for (int i = 0; i < 3000; ++i) {
    // Valid text of every class, raw bytes, and contractions with their neighbours.
    std::string s = i % 3 == 0   ? random_unicode(g, 1 + i % 70)
                    : i % 3 == 1 ? random_bytes(g, 1 + i % 40)
                                 : random_unicode(g, 5) + "'ll 're'" + random_unicode(g, 4) + "'s";
    CAPTURE(s);
    REQUIRE(strings(re.split(s)) == strings(pretokenize(s)));
    ++compared;
  }
  CHECK(compared == 3000);
  CHECK(strings(re.split("it's  12 go!\n\n")) ==
        std::vector<std::string>{"it", "'s", " ", " 12", " go", "!", "\n\n"});
}

TEST_CASE("regex: pieces equal Python's regex module's for GPT-2's, Llama 3's and GPT-4's patterns") {
  const fs::path dir = temp_dir("regex_py");
  std::vector<std::string> texts = {
      "Hello world", "I'M here, WE'LL go; they'Re", "12345 678901 1 22", "a\r\n\r\nb\n\n  c",
      "trailing   ", "   leading", "x!!!\n\ny", "$100.00 (approx.)", "tabs\tand\u00a0nbsp",
      "Здравствуй, мир! 日本語のテキスト", "emoji 👍🏽 and ZWJ 👨‍👩‍👧", "١٢٣٤ ४५६", "''s 'S ''",
      "'Sam 'LLama 'REd we'VEr", "aaaZ aaZZ aZ", "ab aab b aaa", ""};
  Generator g(7);
  for (int i = 0; i < 300; ++i) texts.push_back(random_unicode(g, 1 + i % 50));
  // Patterns that exercise the rest of the syntax (none can match empty).
  const std::vector<std::string> patterns = {
      kGpt2Pattern, kLlama3Pattern, kCl100kPattern, R"(a+?Z|[^a-c\s]{2,3}|.)",
      R"((?:ab|a)(?=!)|(?i:Z[A-C])+|\p{N}{2,}|[\p{L}\u65e5-\u672c]|\S)",
      R"([.,!]{1,2}?\s|(?!a)\P{L}+|[\-\]\\]|a)", R"([ab]?+b|a*+a|\S)"};
  const std::vector<std::string>& ours_patterns = patterns;
  {
    nlohmann::json job = {{"patterns", patterns}, {"texts", texts}};
    std::ofstream(dir / "in.json") << job.dump();
  }
  const std::string script = std::string(ATTEND_TEST_DATA) + "/regex_pieces.py";
  const int status = std::system(("/usr/bin/python3 '" + script + "' '" + (dir / "in.json").string() +
                                  "' '" + (dir / "out.json").string() + "' 2>&1")
                                     .c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    ATTEND_SKIP("Python's regex module is missing (apt-get install python3-regex)");
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  nlohmann::json want;
  std::ifstream(dir / "out.json") >> want;
  REQUIRE(want.size() == ours_patterns.size());
  size_t compared = 0;
  for (size_t p = 0; p < ours_patterns.size(); ++p) {
    const Regex re(ours_patterns[p]);
    for (size_t t = 0; t < texts.size(); ++t) {
      CAPTURE(ours_patterns[p]);
      CAPTURE(texts[t]);
      CHECK(strings(re.split(texts[t])) == want[p][t].get<std::vector<std::string>>());
      ++compared;
    }
  }
  CHECK(compared == ours_patterns.size() * texts.size());
  fs::remove_all(dir);
}

TEST_CASE("regex: Llama 3's pattern on hand-worked cases") {
  const Regex re(kLlama3Pattern);
  using S = std::vector<std::string>;
  CHECK(strings(re.split("12345")) == S{"123", "45"});            // \p{N}{1,3}
  CHECK(strings(re.split("I'M")) == S{"I", "'M"});                // (?i:'m)
  CHECK(strings(re.split("(hello")) == S{"(hello"});              // [^\r\n\p{L}\p{N}]?\p{L}+
  CHECK(strings(re.split("a\n\n  b")) == S{"a", "\n\n", " ", " b"});  // \s*[\r\n]+, \s+(?!\S)
  CHECK(strings(re.split("x ...\n")) == S{"x", " ...\n"});         // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
}

TEST_CASE("regex: constructs outside the subset are refused naming them and where") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(\d+)", "the escape \\'d'"},
      {R"(\w)", "the escape \\'w'"},
      {R"(\bx)", "the escape \\'b'"},
      {R"(\p{Lu})", "the category 'Lu'"},
      {R"(^a)", "an anchor"},
      {R"(a$)", "an anchor"},
      {R"((?<=a)b)", "a lookbehind"},
      {R"((?i)a)", "a group option"},
      {R"((ab)++)", "a possessive repetition of a group"},
      {R"([[a]])", "nested classes"},
      {R"(a**)", "a repetition of a repetition"},
      {R"(*a)", "a repetition of nothing"},
      {R"((a)", "'(' without ')'"},
      {R"(a))", "')' without '('"},
      {R"([ab)", "'[' without ']'"},
      {R"(a{2,1})", "m < n"},
      {R"(a{1001})", "a repetition count above 1000"},
      {R"(a{x})", "'{' not followed by a repetition count"},
      {R"([z-a])", "a range whose end comes before its start"},
      {R"(\x{110000})", "not a code point"},
      {R"((?=a)*)", "a repeated lookahead"},
      {"\\", "a '\\' at the end"},
      {std::string("a\xff"), "not valid UTF-8 at byte 1"},
  };
  for (const auto& [pattern, needle] : cases) {
    CAPTURE(pattern);
    check_error([&] { Regex r(pattern); }, needle);
  }
  check_error([] { Regex r(R"(ab(c\d))"); }, "at byte 4 of the pattern");
  check_error([] { Regex r(std::string(20000, 'a')); }, "at most 16384 are accepted");
  check_error([] { Regex r(R"((?:(?:a{1000}){1000}){1000})"); }, "more than 65536 instructions");
}

TEST_CASE("regex: a pathological pattern stops with an error instead of running for ages") {
  const auto t0 = std::chrono::steady_clock::now();
  // Exponential backtracking ((a|a)*b on a's) and an empty loop ((a*)*b).
  check_error([] { Regex(R"((a|a)*b)").split(std::string(60, 'a')); }, "needs too many steps");
  check_error([] { Regex(R"((a*)*b)").split(std::string(2000, 'a')); }, "needs too many steps");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 5.0);
  // Linear patterns on long runs are fine: a megabyte of spaces, one piece.
  const std::string spaces(1 << 20, ' ');
  CHECK(Regex(kLlama3Pattern).split(spaces).size() == 1);
}
