// Random text for the tokenizer and pattern tests.
#pragma once

#include <string>

#include "data/utf8.h"
#include "tensor/random.h"

namespace attend::test {

// Random valid UTF-8: ASCII, Latin, Cyrillic, CJK, emoji, whitespace of several kinds.
inline std::string random_unicode(Generator& g, int n) {
  static const uint32_t pool[] = {'a',   'Z',    '0',    '9',    ' ',     ' ',     '\n',
                                  '\t',  '\'',   '.',    ',',    '!',     0xE9,    0xDF,
                                  0x416, 0x44F,  0x65E5, 0x672C, 0x1F600, 0x1F44D, 0x1F3FD,
                                  0xA0,  0x3000, 0x661,  0x966,  0x2028,  0x301,   0x200D};
  std::string s;
  for (int i = 0; i < n; ++i) {
    PhiloxCounter r = g.block(g.advance(1));
    data::append_utf8(s, pool[r[0] % (sizeof pool / sizeof pool[0])]);
  }
  return s;
}

inline std::string random_bytes(Generator& g, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>(g.block(g.advance(1))[0] & 0xFF);
  return s;
}

}  // namespace attend::test
