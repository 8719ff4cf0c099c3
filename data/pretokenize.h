// GPT-2's pre-tokenisation: the text is cut into pieces by the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (alternatives tried in order at each position, as a regex engine does), and BPE then
// runs inside each piece. \p{L}, \p{N} are Unicode's letter and number categories,
// \s is JavaScript's (see utf8.h). A byte that is not valid UTF-8 counts as one
// character of none of these classes: the pieces are then what GPT-2 gives for the text
// decoded with Python's surrogateescape, and every byte string survives the round trip.
#pragma once

#include <string_view>
#include <vector>

namespace attend::data {

std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace attend::data
