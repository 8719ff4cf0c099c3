#include "data/pretokenize.h"

#include "data/utf8.h"

namespace attend::data {

namespace {

enum class Cls : uint8_t { Letter, Number, Space, Other };

struct Ch {
  size_t at;  // byte offset
  uint32_t cp;
  Cls cls;
};

Cls classify(const Utf8Char& c) {
  if (!c.valid) return Cls::Other;
  if (is_letter(c.cp)) return Cls::Letter;
  if (is_number(c.cp)) return Cls::Number;
  if (is_space(c.cp)) return Cls::Space;
  return Cls::Other;
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<Ch> cs;
  cs.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = decode_utf8(text, i);
    cs.push_back({i, c.valid ? c.cp : 0xFFFFFFFFu, classify(c)});
    i += c.length;
  }
  const size_t n = cs.size();
  auto byte_at = [&](size_t k) { return k < n ? cs[k].at : text.size(); };
  auto run = [&](size_t k, Cls cls) {  // end of the run of cls starting at k
    while (k < n && cs[k].cls == cls) ++k;
    return k;
  };

  std::vector<std::string_view> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    // 's 't 're 've 'm 'll 'd
    if (cs[i].cp == '\'' && i + 1 < n) {
      const uint32_t a = cs[i + 1].cp, b = i + 2 < n ? cs[i + 2].cp : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    if (end == i) {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a run of one non-space class, with
      // an optional leading space (U+0020 only).
      const size_t s = (cs[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
      if (cs[s].cls != Cls::Space) end = run(s, cs[s].cls);
    }
    if (end == i) {
      // \s+(?!\S): the whitespace run, less its last character when a non-space follows
      // (that character then leads the next piece); else \s+ takes a single one.
      const size_t r = run(i, Cls::Space);
      if (r == n) {
        end = r;
      } else if (r - i >= 2) {
        end = r - 1;
      } else {
        end = r;
      }
    }
    pieces.emplace_back(text.substr(byte_at(i), byte_at(end) - byte_at(i)));
    i = end;
  }
  return pieces;
}

}  // namespace attend::data
