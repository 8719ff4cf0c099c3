// A backtracking regular-expression engine over code points, for pre-tokenizer patterns:
// a parser to a tree, a compiler to a small instruction list, and the machine that runs
// it with an explicit stack (no recursion on the text's length; lookaheads recurse on the
// pattern's nesting only).
#include "data/regex.h"

#include <algorithm>
#include <memory>

#include "data/utf8.h"
#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // a byte that is not valid UTF-8
constexpr uint8_t kLetter = 0, kNumber = 1, kSpace = 2;
constexpr size_t kMaxPattern = 1 << 14;   // bytes
constexpr size_t kMaxProgram = 1 << 16;   // instructions
constexpr int kMaxCount = 1000;           // {n,m}
constexpr int kMaxDepth = 64;             // groups inside groups
constexpr size_t kMaxStack = size_t{1} << 22;  // backtracking entries

using Inst = Regex::Inst;
using Set = Regex::Set;

struct Node {
  enum Kind { kEmpty, kChar, kSet, kAny, kCat, kAlt, kRepeat, kLook } kind = kEmpty;
  uint32_t cp = 0;
  bool icase = false;
  int32_t set = 0;
  std::vector<Node> kids;
  int32_t min = 0, max = 0;  // kRepeat (max -1: no limit)
  bool greedy = true;
  bool possessive = false;  // kRepeat of one character: never gives back
  bool negative = false;    // kLook
};

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }
uint32_t ascii_other_case(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 'a' && c <= 'z') return c - 32;
  return c;
}

bool in_category(uint8_t cat, uint32_t c) {
  if (c == kInvalid) return false;
  return cat == kLetter ? is_letter(c) : cat == kNumber ? is_number(c) : is_space(c);
}

bool set_has(const Set& s, uint32_t c) {
  auto has = [&](uint32_t x) {
    for (auto [lo, hi] : s.ranges)
      if (x >= lo && x <= hi) return true;
    return false;
  };
  bool in = has(c) || (s.icase && c != kInvalid && ascii_other_case(c) != c && has(ascii_other_case(c)));
  for (size_t k = 0; !in && k < s.categories.size(); ++k)
    in = in_category(s.categories[k].first, c) != s.categories[k].second;
  return in != s.negated;
}

// One escape: a character or a category.
struct Escape {
  bool is_category = false;
  uint32_t cp = 0;
  uint8_t category = 0;
  bool negated = false;
};

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<Set>& sets) : pattern_(pattern), sets_(sets) {
    ATTEND_CHECK(pattern.size() <= kMaxPattern, "regex: the pattern is ", pattern.size(),
                 " bytes; at most ", kMaxPattern, " are accepted");
    for (size_t i = 0; i < pattern.size();) {
      Utf8Char c = decode_utf8(pattern, i);
      ATTEND_CHECK(c.valid, "regex: the pattern is not valid UTF-8 at byte ", i);
      cps_.push_back(c.cp);
      at_.push_back(i);
      i += c.length;
    }
    at_.push_back(pattern.size());
  }

  Node parse() {
    Node n = alternation();
    if (i_ < cps_.size()) fail(i_, "')' without '('");
    return n;
  }

 private:
  [[noreturn]] void fail(size_t i, const std::string& what) const {
    throw Error(str("regex: ", what, " at byte ", at_[std::min(i, cps_.size())], " of the pattern '",
                    printable(pattern_, 200), "'"));
  }
  bool more() const { return i_ < cps_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : kInvalid;
  }

  Node alternation() {
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(concatenation());
    while (more() && peek() == '|') {
      ++i_;
      alt.kids.push_back(concatenation());
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  Node concatenation() {
    Node cat;
    cat.kind = Node::kCat;
    while (more() && peek() != '|' && peek() != ')') cat.kids.push_back(repetition());
    if (cat.kids.empty()) return Node{};
    return cat.kids.size() == 1 ? std::move(cat.kids[0]) : cat;
  }

  // A number for {n,m}; -1 if there is none here.
  int count() {
    if (!more() || peek() < '0' || peek() > '9') return -1;
    const size_t start = i_;
    int64_t v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) fail(start, str("a repetition count above ", kMaxCount));
      ++i_;
    }
    return static_cast<int>(v);
  }

  Node repetition() {
    Node atom_node = atom();
    for (bool quantified = false; more();) {
      const size_t q = i_;
      int lo = 0, hi = 0;
      const uint32_t c = peek();
      if (c == '*') {
        lo = 0, hi = -1, ++i_;
      } else if (c == '+') {
        lo = 1, hi = -1, ++i_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++i_;
      } else if (c == '{') {
        ++i_;
        lo = count();
        if (lo < 0) fail(q, "'{' not followed by a repetition count (write \\{ for the character)");
        hi = lo;
        if (more() && peek() == ',') {
          ++i_;
          hi = more() && peek() == '}' ? -1 : count();
          if (hi < 0 && peek() != '}') fail(q, "a malformed {n,m}");
        }
        if (!more() || peek() != '}') fail(q, "a malformed {n,m}");
        ++i_;
        if (hi >= 0 && hi < lo) fail(q, "a repetition {n,m} with m < n");
      } else {
        break;
      }
      if (quantified) fail(q, "a repetition of a repetition");
      quantified = true;
      if (atom_node.kind == Node::kLook) fail(q, "a repeated lookahead");
      bool greedy = true, possessive = false;
      if (more() && peek() == '?') {
        greedy = false, ++i_;
      } else if (more() && peek() == '+') {
        if (atom_node.kind != Node::kChar && atom_node.kind != Node::kSet &&
            atom_node.kind != Node::kAny)
          fail(i_, "a possessive repetition of a group (supported on one character or class)");
        possessive = true, ++i_;
      }
      Node r;
      r.kind = Node::kRepeat;
      r.min = lo, r.max = hi, r.greedy = greedy, r.possessive = possessive;
      r.kids.push_back(std::move(atom_node));
      atom_node = std::move(r);
    }
    return atom_node;
  }

  Node atom() {
    const size_t start = i_;
    const uint32_t c = cps_[i_++];
    Node n;
    switch (c) {
      case '(': {
        if (++depth_ > kMaxDepth) fail(start, str("groups nested deeper than ", kMaxDepth));
        const bool saved_icase = icase_;
        bool look = false, negative = false;
        if (peek() == '?') {
          ++i_;
          if (peek() == ':') {
            ++i_;
          } else if (peek() == 'i' && peek(1) == ':') {
            i_ += 2;
            icase_ = true;
          } else if (peek() == '=' || peek() == '!') {
            look = true, negative = peek() == '!';
            ++i_;
          } else if (peek() == '<') {
            fail(start, "a lookbehind or named group (not supported)");
          } else {
            fail(start, "a group option other than ?: ?i: ?= ?! (not supported)");
          }
        }
        Node inner = alternation();
        if (!more() || peek() != ')') fail(start, "'(' without ')'");
        ++i_;
        icase_ = saved_icase;
        --depth_;
        if (!look) return inner;
        n.kind = Node::kLook;
        n.negative = negative;
        n.kids.push_back(std::move(inner));
        return n;
      }
      case '[':
        return char_class(start);
      case '.':
        n.kind = Node::kAny;
        return n;
      case '\\': {
        Escape e = escape(start);
        if (!e.is_category) {
          n.kind = Node::kChar, n.cp = e.cp, n.icase = icase_;
          return n;
        }
        Set s;
        s.categories.emplace_back(e.category, e.negated);
        return set_node(std::move(s));
      }
      case '*':
      case '+':
      case '?':
      case '{':
        fail(start, "a repetition of nothing");
      case '^':
      case '$':
        fail(start, "an anchor (not supported)");
      case ')':
        fail(start, "')' without '('");
      default:
        n.kind = Node::kChar, n.cp = c, n.icase = icase_;
        return n;
    }
  }

  Node set_node(Set s) {
    s.icase = icase_;
    sets_.push_back(std::move(s));
    Node n;
    n.kind = Node::kSet;
    n.set = static_cast<int32_t>(sets_.size() - 1);
    return n;
  }

  uint32_t hex(size_t start, int digits_min, int digits_max, bool braced) {
    uint32_t v = 0;
    int digits = 0;
    while (more() && digits < digits_max) {
      const uint32_t d = peek();
      const int x = (d >= '0' && d <= '9') ? d - '0' : (d >= 'a' && d <= 'f') ? d - 'a' + 10
                    : (d >= 'A' && d <= 'F') ? d - 'A' + 10 : -1;
      if (x < 0) break;
      v = v * 16 + x, ++digits, ++i_;
    }
    if (digits < digits_min) fail(start, "a malformed hexadecimal escape");
    if (braced) {
      if (!more() || peek() != '}') fail(start, "a malformed \\x{...}");
      ++i_;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail(start, "an escape that is not a code point");
    return v;
  }

  Escape escape(size_t start) {
    if (!more()) fail(start, "a '\\' at the end");
    const uint32_t c = cps_[i_++];
    Escape e;
    switch (c) {
      case 'r': e.cp = '\r'; return e;
      case 'n': e.cp = '\n'; return e;
      case 't': e.cp = '\t'; return e;
      case 'f': e.cp = '\f'; return e;
      case 'v': e.cp = '\v'; return e;
      case 's':
      case 'S':
        e.is_category = true, e.category = kSpace, e.negated = c == 'S';
        return e;
      case 'x':
        if (peek() == '{') {
          ++i_;
          e.cp = hex(start, 1, 6, true);
        } else {
          e.cp = hex(start, 2, 2, false);
        }
        return e;
      case 'u':
        e.cp = hex(start, 4, 4, false);
        return e;
      case 'p':
      case 'P': {
        e.is_category = true, e.negated = c == 'P';
        std::string name;
        if (peek() == '{') {
          ++i_;
          while (more() && peek() != '}' && name.size() < 40) name += static_cast<char>(cps_[i_++] & 0x7F);
          if (!more() || peek() != '}') fail(start, "a malformed \\p{...}");
          ++i_;
        } else if (more()) {
          name = std::string(1, static_cast<char>(cps_[i_++] & 0x7F));
        }
        if (name == "L" || name == "Letter") {
          e.category = kLetter;
        } else if (name == "N" || name == "Number") {
          e.category = kNumber;
        } else {
          fail(start, str("the category '", printable(name), "' (only L and N are supported)"));
        }
        return e;
      }
      default:
        if (c < 0x80 && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && !(c >= '0' && c <= '9')) {
          e.cp = c;  // an escaped punctuation character stands for itself
          return e;
        }
        fail(start, str("the escape \\", describe_char(c), " (not supported)"));
    }
  }

  Node char_class(size_t start) {
    Set s;
    if (more() && peek() == '^') s.negated = true, ++i_;
    bool first = true;
    for (;;) {
      if (!more()) fail(start, "'[' without ']'");
      const size_t item = i_;
      uint32_t c = cps_[i_++];
      if (c == ']' && !first) break;
      first = false;
      if (c == '[') fail(item, "a '[' inside a class (nested classes are not supported; write \\[)");
      if (c == '&' && peek() == '&') fail(item, "a class intersection (not supported)");
      if (c == '\\') {
        Escape e = escape(item);
        if (e.is_category) {
          s.categories.emplace_back(e.category, e.negated);
          continue;
        }
        c = e.cp;
      }
      uint32_t hi = c;
      if (more() && peek() == '-' && peek(1) != ']' && peek(1) != kInvalid) {
        ++i_;
        const size_t r = i_;
        hi = cps_[i_++];
        if (hi == '\\') {
          Escape e = escape(r);
          if (e.is_category) fail(r, "a range ending in a category");
          hi = e.cp;
        }
        if (hi < c) fail(item, "a range whose end comes before its start");
      }
      s.ranges.emplace_back(c, hi);
    }
    return set_node(std::move(s));
  }

  std::string_view pattern_;
  std::vector<Set>& sets_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> at_;
  size_t i_ = 0;
  bool icase_ = false;
  int depth_ = 0;
};

class Compiler {
 public:
  explicit Compiler(std::vector<Inst>& prog) : prog_(prog) {}

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::kEmpty:
        return;
      case Node::kChar:
      case Node::kSet:
      case Node::kAny:
        push(single(n));
        return;
      case Node::kCat:
        for (const Node& k : n.kids) emit(k);
        return;
      case Node::kAlt: {
        std::vector<size_t> jumps;
        for (size_t k = 0; k < n.kids.size(); ++k) {
          if (k + 1 == n.kids.size()) {
            emit(n.kids[k]);
            break;
          }
          const size_t split = push({.op = Inst::kSplit});
          prog_[split].x = here();
          emit(n.kids[k]);
          jumps.push_back(push({.op = Inst::kJmp}));
          prog_[split].y = here();
        }
        for (size_t j : jumps) prog_[j].x = here();
        return;
      }
      case Node::kRepeat: {
        const Node& kid = n.kids[0];
        if (kid.kind == Node::kChar || kid.kind == Node::kSet || kid.kind == Node::kAny) {
          Inst run = single(kid);
          run.sub = run.op;
          run.op = Inst::kRun;
          run.min = n.min, run.max = n.max, run.greedy = n.greedy, run.possessive = n.possessive;
          push(run);
          return;
        }
        for (int k = 0; k < n.min; ++k) emit(kid);
        if (n.max < 0) {
          const size_t loop = push({.op = Inst::kSplit});
          const int32_t body = here();
          emit(kid);
          push({.op = Inst::kJmp, .x = static_cast<int32_t>(loop)});
          branch(loop, body, here(), n.greedy);
          return;
        }
        std::vector<size_t> splits;
        for (int k = n.min; k < n.max; ++k) {
          splits.push_back(push({.op = Inst::kSplit}));
          emit(kid);
        }
        for (size_t s : splits) branch(s, static_cast<int32_t>(s + 1), here(), n.greedy);
        return;
      }
      case Node::kLook: {
        const size_t look = push({.op = Inst::kLook, .flag = n.negative});
        prog_[look].x = here();
        emit(n.kids[0]);
        push({.op = Inst::kMatch});
        prog_[look].y = here();
        return;
      }
    }
  }

 private:
  static Inst single(const Node& n) {
    Inst i;
    if (n.kind == Node::kChar) i.op = Inst::kChar, i.cp = n.cp, i.flag = n.icase;
    if (n.kind == Node::kSet) i.op = Inst::kSet, i.x = n.set;
    if (n.kind == Node::kAny) i.op = Inst::kAny;
    return i;
  }
  int32_t here() const { return static_cast<int32_t>(prog_.size()); }
  size_t push(const Inst& i) {
    ATTEND_CHECK(prog_.size() < kMaxProgram, "regex: the pattern compiles to more than ",
                 kMaxProgram, " instructions (repetition counts too large)");
    prog_.push_back(i);
    return prog_.size() - 1;
  }
  void branch(size_t split, int32_t take, int32_t skip, bool greedy) {
    prog_[split].x = greedy ? take : skip;
    prog_[split].y = greedy ? skip : take;
  }

  std::vector<Inst>& prog_;
};

bool one_matches(const Inst& in, Inst::Op op, const std::vector<Set>& sets, uint32_t c) {
  switch (op) {
    case Inst::kChar:
      return c == in.cp || (in.flag && c != kInvalid && c < 0x80 && ascii_lower(c) == ascii_lower(in.cp));
    case Inst::kSet:
      return set_has(sets[in.x], c);
    case Inst::kAny:
      return c != '\n';
    default:
      return false;
  }
}

struct Entry {
  int32_t pc;
  bool run;     // a greedy or lazy run still able to give back or take one more
  size_t pos;   // where to continue
  size_t lo, hi;  // a run's bounds for pos
};

int64_t budget_for(size_t n) { return 256 * static_cast<int64_t>(n) + 65536; }

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  Parser parser(pattern, sets_);
  const Node tree = parser.parse();
  Compiler c(prog_);
  c.emit(tree);
  prog_.push_back({.op = Inst::kMatch});
}

int64_t Regex::run(const std::vector<uint32_t>& text, size_t at, int32_t start_pc,
                   int64_t& budget) const {
  const size_t n = text.size();
  std::vector<Entry> stack;
  stack.push_back({start_pc, false, at, 0, 0});
  while (!stack.empty()) {
    Entry e = stack.back();
    stack.pop_back();
    int32_t pc = e.pc;
    size_t pos = e.pos;
    if (e.run) {  // the run's next choice first, then continue after the run from pos
      const Inst& in = prog_[pc - 1];
      if (in.greedy && pos > e.lo) stack.push_back({pc, true, pos - 1, e.lo, e.hi});
      if (!in.greedy && pos < e.hi) stack.push_back({pc, true, pos + 1, e.lo, e.hi});
    }
    for (bool alive = true; alive;) {
      if (--budget < 0)
        throw Error(str("regex: the pattern '", printable(pattern_, 200),
                        "' needs too many steps on this text (nested repetition?)"));
      const Inst& in = prog_[pc];
      switch (in.op) {
        case Inst::kChar:
        case Inst::kSet:
        case Inst::kAny:
          if (pos < n && one_matches(in, in.op, sets_, text[pos])) {
            ++pos, ++pc;
          } else {
            alive = false;
          }
          break;
        case Inst::kRun: {
          const size_t lo = pos + in.min;
          size_t end = pos;
          const size_t limit = in.max < 0 ? n : std::min(n, pos + in.max);
          while (end < limit && one_matches(in, in.sub, sets_, text[end])) ++end;
          budget -= static_cast<int64_t>(end - pos);
          if (end < lo) {
            alive = false;
            break;
          }
          ++pc;
          if (in.greedy) {
            if (end > lo && !in.possessive) stack.push_back({pc, true, end - 1, lo, end});
            pos = end;
          } else {
            if (lo < end) stack.push_back({pc, true, lo + 1, lo, end});
            pos = lo;
          }
          break;
        }
        case Inst::kSplit:
          stack.push_back({in.y, false, pos, 0, 0});
          pc = in.x;
          break;
        case Inst::kJmp:
          pc = in.x;
          break;
        case Inst::kLook: {
          const bool matched = run(text, pos, in.x, budget) >= 0;
          if (matched != in.flag) {
            pc = in.y;
          } else {
            alive = false;
          }
          break;
        }
        case Inst::kMatch:
          return static_cast<int64_t>(pos);
      }
      ATTEND_CHECK(stack.size() <= kMaxStack, "regex: the pattern '", printable(pattern_, 200),
                   "' needs too much backtracking on this text");
    }
  }
  return -1;
}

int64_t Regex::match_at(const std::vector<uint32_t>& text, size_t at) const {
  int64_t budget = budget_for(text.size());
  return run(text, at, 0, budget);
}

std::vector<std::string_view> Regex::split(std::string_view text) const {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  cps.reserve(text.size());
  offs.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = decode_utf8(text, i);
    cps.push_back(c.valid ? c.cp : kInvalid);
    offs.push_back(i);
    i += c.length;
  }
  offs.push_back(text.size());
  const size_t n = cps.size();
  int64_t budget = budget_for(n);
  std::vector<std::string_view> pieces;
  auto piece = [&](size_t a, size_t b) { pieces.push_back(text.substr(offs[a], offs[b] - offs[a])); };
  size_t gap = 0;
  for (size_t p = 0; p < n;) {
    const int64_t end = run(cps, p, 0, budget);
    if (end > static_cast<int64_t>(p)) {
      if (gap < p) piece(gap, p);
      piece(p, static_cast<size_t>(end));
      p = gap = static_cast<size_t>(end);
    } else {
      ++p;
    }
  }
  if (gap < n) piece(gap, n);
  return pieces;
}

}  // namespace attend::data
