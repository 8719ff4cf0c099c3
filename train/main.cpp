// attend: the command-line program. Library code throws; only here are errors caught,
// logged, and turned into an exit code (1 for a user error, 2 for an internal one).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "tensor/error.h"
#include "train/cli.h"
#include "train/version.h"

int main(int argc, char** argv) {
  CLI::App app{"attend: build, train and look inside small GPT models on CPUs"};
  app.set_version_flag("--version", std::string("attend ") + attend::version());
  app.require_subcommand(0, 1);

  attend::cli::GradcheckArgs gc;
  CLI::App* gradcheck = app.add_subcommand(
      "gradcheck", "check every op's backward against central finite differences (f64)");
  gradcheck->add_option("--only", gc.only, "run only the cases whose name contains this");
  gradcheck->add_option("--seed", gc.seed, "seed of the random inputs");

  attend::cli::TokenizeArgs tk;
  CLI::App* tokenize = app.add_subcommand("tokenize", "print the token ids of a text (or, with --decode, the text of ids)");
  tokenize->add_option("--tokenizer", tk.tokenizer, "gpt2 | char:PATH | bpe:PATH | a saved tokenizer folder")
      ->capture_default_str();
  tokenize->add_option("--text", tk.text, "the input (default: standard input)");
  tokenize->add_flag("--decode", tk.decode, "read ids, print text");

  attend::cli::PrepareArgs pr;
  CLI::App* prepare = app.add_subcommand("prepare", "tokenize a corpus into train.bin, val.bin and its tokenizer");
  prepare->add_option("--data", pr.data, "a text file, or a folder of text files")->required();
  prepare->add_option("--tokenizer", pr.tokenizer, "char | gpt2 | bpe:N (train N tokens) | a saved tokenizer")
      ->capture_default_str();
  prepare->add_option("--out", pr.out, "output folder")->required();
  prepare->add_option("--val_fraction,--val-fraction", pr.val_fraction, "the last fraction of tokens kept for validation")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (gradcheck->parsed()) return attend::cli::run_gradcheck(gc);
    if (tokenize->parsed()) {
      tk.text_given = tokenize->count("--text") > 0;
      return attend::cli::run_tokenize(tk);
    }
    if (prepare->parsed()) return attend::cli::run_prepare(pr);
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const attend::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    return 2;
  }
}
