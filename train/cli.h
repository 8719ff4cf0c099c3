// The `attend` command-line program: one function per subcommand, called from main.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/sample.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

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

struct TrainCli {
  std::vector<std::string> values;  // one per train::config_fields() entry
  std::vector<CLI::Option*> options;
  std::string out, resume, config_file;
};
void add_train_options(CLI::App* cmd, TrainCli& t);
int run_train(const TrainCli& t);

struct SampleCli {
  std::string checkpoint;
  train::SampleOptions options;
};
int run_sample(const SampleCli& a);

struct EvalCli {
  std::string checkpoint, data;
};
int run_eval(const EvalCli& a);

struct PlotCli {
  std::string run_dir;
  bool log_y = false;
};
int run_plot(const PlotCli& a);

struct SummaryCli {
  std::string preset, checkpoint;
  std::map<std::string, std::string> overrides;  // model flags given
  int64_t batch = 1, seq = 0;                    // seq 0: block_size
};
int run_summary(const SummaryCli& a);

struct AttentionCli {
  std::string checkpoint, prompt, out;
  int64_t layer = -1, head = -1;  // -1: all
  int decimals = 2;
  bool scores = false;
};
int run_attention(const AttentionCli& a);

}  // namespace attend::cli
