// `attend tokenize`: the token ids of a text, or with --decode the text of ids.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "app/commands.h"
#include "data/tokenizer.h"
#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer = "gpt2";
  std::string text;
  bool text_given = false;  // else stdin
  bool decode = false;      // input is ids, output text
};

int run_tokenize(const TokenizeArgs& a) {
  auto tok = data::tokenizer_from_arg(a.tokenizer);
  const std::string input = a.text_given ? a.text
                                         : std::string(std::istreambuf_iterator<char>(std::cin),
                                                       std::istreambuf_iterator<char>());
  if (a.decode) {
    data::TokenIds ids;
    std::istringstream in(input);
    std::string word;
    while (in >> word) {
      const int64_t v = parse_int(word, str("tokenize --decode: id ", ids.size()));
      ATTEND_CHECK(v >= 0 && v < tok->vocab_size(), "tokenize --decode: id ", ids.size(), " is ", v,
                   ", outside [0, ", tok->vocab_size(), ")");
      ids.push_back(static_cast<int32_t>(v));
    }
    const std::string text = tok->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);  // the bytes as they are, NULs too
    return 0;
  }
  data::TokenIds ids = tok->encode(input);
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void add_tokenize(CLI::App& app, int& rc) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "print the token ids of a text (or, with --decode, the text of ids)");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "gpt2 | char:PATH | bpe:PATH | hf:PATH (Hugging Face tokenizer.json) | a saved "
                  "tokenizer folder")
      ->capture_default_str();
  CLI::Option* text = cmd->add_option("--text", a->text, "the input (default: standard input)");
  cmd->add_flag("--decode", a->decode, "read ids, print text");
  cmd->callback([a, text, &rc] {
    a->text_given = text->count() > 0;
    rc = run_tokenize(*a);
  });
}

}  // namespace attend::cli
