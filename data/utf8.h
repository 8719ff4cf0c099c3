// UTF-8 decoding and the character classes of GPT-2's pre-tokenisation pattern.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

// One decoded character: a code point, or (valid == false) a single byte that does not
// start a valid UTF-8 sequence (overlong forms, surrogates and > U+10FFFF are invalid).
struct Utf8Char {
  uint32_t cp;
  int length;  // bytes consumed, 1..4
  bool valid;
};
Utf8Char decode_utf8(std::string_view s, size_t at);
void append_utf8(std::string& out, uint32_t cp);

// Byte offset of the first invalid sequence, or npos if s is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);

bool is_letter(uint32_t cp);  // general category L
bool is_number(uint32_t cp);  // general category N
// JavaScript's \s (which made our reference ids): WhiteSpace and LineTerminator code
// points: \t \n \v \f \r, U+0020, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F,
// U+205F, U+3000, U+FEFF.
bool is_space(uint32_t cp);

// A printable rendering of a code point for error messages: 'x' or U+XXXX.
std::string describe_char(uint32_t cp);

}  // namespace attend::data
#pragma GCC visibility pop
