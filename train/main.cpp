// attend: the command-line program. Library code throws; only here are errors caught,
// logged, and turned into an exit code (1 for a user error, 2 for an internal one).
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <iterator>
#include <map>

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
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "print the token ids of a text (or, with --decode, the text of ids)");
  tokenize
      ->add_option("--tokenizer", tk.tokenizer,
                   "gpt2 | char:PATH | bpe:PATH | a saved tokenizer folder")
      ->capture_default_str();
  tokenize->add_option("--text", tk.text, "the input (default: standard input)");
  tokenize->add_flag("--decode", tk.decode, "read ids, print text");

  attend::cli::PrepareArgs pr;
  CLI::App* prepare =
      app.add_subcommand("prepare", "tokenize a corpus into train.bin, val.bin and its tokenizer");
  prepare->add_option("--data", pr.data, "a text file, or a folder of text files")->required();
  prepare
      ->add_option("--tokenizer", pr.tokenizer,
                   "char | gpt2 | bpe:N (train N tokens) | a saved tokenizer")
      ->capture_default_str();
  prepare->add_option("--out", pr.out, "output folder")->required();
  prepare
      ->add_option("--val_fraction,--val-fraction", pr.val_fraction,
                   "the last fraction of tokens kept for validation")
      ->capture_default_str();

  attend::cli::TrainCli tr;
  CLI::App* train =
      app.add_subcommand("train", "train a GPT on a corpus (defaults: nanoGPT's CPU recipe)");
  attend::cli::add_train_options(train, tr);

  attend::cli::SampleCli sa;
  CLI::App* sample =
      app.add_subcommand("sample", "generate text from a checkpoint, streamed as it is drawn");
  sample
      ->add_option("--checkpoint", sa.checkpoint,
                   "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  sample->add_option("--prompt", sa.options.prompt, "text to continue")->capture_default_str();
  sample
      ->add_option("--max_new_tokens,--max-new-tokens", sa.options.max_new_tokens,
                   "tokens to generate")
      ->capture_default_str();
  sample->add_option("--temperature", sa.options.temperature, "softmax temperature; 0 is greedy")
      ->capture_default_str();
  sample->add_option("--top_k,--top-k", sa.options.top_k, "keep the k most likely tokens (0: all)")
      ->capture_default_str();
  sample
      ->add_option("--top_p,--top-p", sa.options.top_p,
                   "keep the smallest set reaching this probability")
      ->capture_default_str();
  sample->add_option("--seed", sa.options.seed, "same seed, same text")->capture_default_str();

  attend::cli::EvalCli ev;
  CLI::App* eval =
      app.add_subcommand("eval", "mean loss and perplexity over every non-overlapping window");
  eval->add_option("--checkpoint", ev.checkpoint,
                   "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  eval->add_option("--data", ev.data, "a token file (.bin) or a text file")->required();

  attend::cli::PlotCli pl;
  CLI::App* plot = app.add_subcommand("plot", "redraw RUN_DIR/loss.svg from RUN_DIR/metrics.csv");
  plot->add_option("run_dir", pl.run_dir, "the run folder")->required();
  plot->add_flag("--log-y,--log_y", pl.log_y, "logarithmic loss axis");

  attend::cli::SummaryCli su;
  CLI::App* summary = app.add_subcommand(
      "summary", "modules, shapes, parameter counts, memory and FLOPs of a model");
  summary->add_option(
      "--preset", su.preset,
      "gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b, shakespeare-char, cpu-char");
  summary->add_option("--checkpoint", su.checkpoint, "a checkpoint file or run folder");
  std::map<std::string, std::string> model_flags;
  const char* model_fields[] = {"vocab_size", "block_size", "n_layer", "n_head",
                                "n_kv_head",  "n_embd",     "dropout", "bias"};
  std::vector<std::string> model_values(std::size(model_fields));
  std::vector<CLI::Option*> model_options;
  for (size_t i = 0; i < std::size(model_fields); ++i) {
    std::string n = model_fields[i], d = n;
    std::replace(d.begin(), d.end(), '_', '-');
    model_options.push_back(summary->add_option("--" + n + (d != n ? ",--" + d : ""),
                                                model_values[i], "model setting"));
  }
  summary->add_option("--batch", su.batch, "batch size B for memory figures")
      ->capture_default_str();
  summary->add_option("--seq", su.seq, "sequence length T (default: block_size)");

  attend::cli::AttentionCli at;
  CLI::App* attention = app.add_subcommand(
      "attention",
      "attention weights of a prompt: .html explorer, .svg heatmaps, .csv or .json data");
  attention->add_option("--checkpoint", at.checkpoint, "checkpoint file or run folder")->required();
  attention->add_option("--prompt", at.prompt, "the text whose attention to show")->required();
  attention->add_option("--layer", at.layer, "one layer (default: all)");
  attention->add_option("--head", at.head, "one head (default: all)");
  attention->add_option("--out", at.out, "FILE.html | FILE.svg | FILE.csv | FILE.json")->required();
  attention->add_option("--decimals", at.decimals, "decimals of the numbers shown in cells")
      ->capture_default_str();
  attention->add_flag("--scores", at.scores,
                      "CSV/JSON: also the scores q.k/sqrt(HS) before the mask and softmax");

  std::string log_level = "info";
  app.add_option("--log-level,--log_level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    spdlog::set_level(spdlog::level::from_str(log_level));
    std::signal(SIGXFSZ, SIG_IGN);  // a write past a file-size limit fails with an error instead
    if (train->parsed()) return attend::cli::run_train(tr);
    if (summary->parsed()) {
      for (size_t i = 0; i < model_options.size(); ++i)
        if (model_options[i]->count()) su.overrides[model_fields[i]] = model_values[i];
      return attend::cli::run_summary(su);
    }
    if (attention->parsed()) return attend::cli::run_attention(at);
    if (sample->parsed()) return attend::cli::run_sample(sa);
    if (eval->parsed()) return attend::cli::run_eval(ev);
    if (plot->parsed()) return attend::cli::run_plot(pl);
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
