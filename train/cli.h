// The `attend` command-line program: one function per subcommand, called from main.
#pragma once

#include <cstdint>
#include <string>

namespace attend::cli {

struct GradcheckArgs {
  std::string only;   // run the cases whose name contains this
  uint64_t seed = 0;  // input values
};
int run_gradcheck(const GradcheckArgs& args);

struct TokenizeArgs {
  std::string tokenizer = "gpt2";
  std::string text;
  bool text_given = false;  // else stdin
  bool decode = false;      // input is ids, output text
};
int run_tokenize(const TokenizeArgs& args);

struct PrepareArgs {
  std::string data, tokenizer = "char", out;
  double val_fraction = 0.1;
};
int run_prepare(const PrepareArgs& args);

}  // namespace attend::cli
