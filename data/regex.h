// The regular expressions of tokenizers' pre-tokenizers: Hugging Face's tokenizer.json
// names its pattern (GPT-2's, Llama 3's, ...) and attend runs it with this engine, written
// for that job (std::regex has no Unicode categories).
//
// Matching is over code points, Perl/Oniguruma style: alternatives and repetitions are
// tried in order (leftmost-first, greedy unless lazy), by backtracking.
//
// The subset, everything else refused naming it and its offset in the pattern:
//   literals (UTF-8), `.` (anything but \n), `\r \n \t \f \v \xHH \x{H..} \uHHHH` and an
//   escaped punctuation character; `\s \S` (JavaScript's whitespace, data/utf8.h, the class
//   GPT-2's ids were made with); `\p{L} \p{N} \P{L} \P{N}` (also `\pL`, `\p{Letter}`,
//   `\p{Number}`); classes `[...]`, `[^...]` with ranges and those escapes;
//   groups `(...)`, `(?:...)`, `(?i:...)` (ASCII case folding), lookahead `(?=...)`,
//   `(?!...)`; alternation; `? * + {n} {n,} {n,m}` (m <= 1000), each optionally lazy (`?`), and possessive
//   (`+`) on one character or class (tiktoken's patterns use `?+` and `++`).
//   Not supported: anchors, `\d \w \b`, other categories, backreferences, lookbehind,
//   possessive groups, nested classes.
//
// A byte that is not valid UTF-8 is one character that only negated sets match (`.`,
// `\S`, `\P{L}`, `[^...]`), as data/pretokenize.h treats it.
//
// Work is bounded: a search that takes more than 256 steps per character of text (plus
// a constant) is stopped with an error instead of hanging on a pathological pattern.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attend::data {

class Regex {
 public:
  // Throws attend::Error naming the construct and its byte offset in `pattern`.
  explicit Regex(std::string_view pattern);
  const std::string& pattern() const { return pattern_; }

  // Cuts text as Hugging Face's Split pre-tokenizer with behavior "Isolated" does: every
  // non-empty match (leftmost-first, scanning left to right) is a piece, and so is every
  // stretch between matches. Concatenated, the pieces are the text.
  std::vector<std::string_view> split(std::string_view text) const;

  // The end (code point index) of the match starting exactly at `at`, or -1: for tests.
  int64_t match_at(const std::vector<uint32_t>& text, size_t at) const;

  // A character set: ranges, categories (letter, number, space), each item possibly
  // negated, and the whole possibly negated.
  struct Set {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    std::vector<std::pair<uint8_t, bool>> categories;  // (kLetter|kNumber|kSpace, negated)
    bool negated = false;
    bool icase = false;
  };
  // The program a pattern compiles to (a backtracking machine over code points).
  struct Inst {
    enum Op : uint8_t { kChar, kSet, kAny, kRun, kSplit, kJmp, kLook, kMatch };
    Op op = kMatch;
    Op sub = kMatch;       // kRun: what one character must match (kChar, kSet or kAny)
    bool flag = false;     // kChar (or a run of them): ignore ASCII case; kLook: negative
    bool greedy = true;    // kRun
    bool possessive = false;  // kRun: gives nothing back
    uint32_t cp = 0;       // kChar
    int32_t x = 0, y = 0;  // kSet: set; kSplit: first, second; kJmp: x; kLook: body, next
    int32_t min = 0, max = 0;  // kRun: repetitions, max -1 for no limit
  };

 private:
  int64_t run(const std::vector<uint32_t>& text, size_t at, int32_t pc, int64_t& budget) const;

  std::string pattern_;
  std::vector<Inst> prog_;
  std::vector<Set> sets_;
};

}  // namespace attend::data
