// `attend tokenize` and `attend prepare`.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "data/prepare.h"
#include "data/tokenizer.h"
#include "tensor/error.h"
#include "train/cli.h"

namespace attend::cli {

namespace {
std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}
}  // namespace

int run_tokenize(const TokenizeArgs& a) {
  auto tok = data::tokenizer_from_arg(a.tokenizer);
  const std::string input = a.text_given ? a.text : read_stdin();
  if (a.decode) {
    data::TokenIds ids;
    std::istringstream in(input);
    std::string word;
    while (in >> word) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ATTEND_CHECK(used == word.size(), "tokenize --decode: '", word, "' at position ", ids.size(),
                   " is not an integer id");
      ids.push_back(static_cast<int32_t>(v));
    }
    std::fputs(tok->decode(ids).c_str(), stdout);
    return 0;
  }
  data::TokenIds ids = tok->encode(input);
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

int run_prepare(const PrepareArgs& a) {
  data::PrepareOptions o;
  o.data = a.data;
  o.tokenizer = a.tokenizer;
  o.out = a.out;
  o.val_fraction = a.val_fraction;
  data::PrepareResult r = data::prepare(o);
  std::printf("read %lld bytes from %lld file(s)", static_cast<long long>(r.bytes),
              static_cast<long long>(r.files));
  if (!r.skipped.empty()) std::printf(" (%zu skipped: not UTF-8 text)", r.skipped.size());
  std::printf("\ntokenizer %s, vocab_size %lld\n", r.tokenizer.c_str(),
              static_cast<long long>(r.vocab_size));
  std::printf("train.bin %lld tokens, val.bin %lld tokens, in %s\n",
              static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
              a.out.c_str());
  return 0;
}

}  // namespace attend::cli
