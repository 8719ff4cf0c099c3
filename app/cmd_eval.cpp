// `attend eval`: mean loss and perplexity of a checkpoint over every window of a token
// file, or of a text tokenized with the checkpoint's own tokenizer; --weights evaluates the
// model with its weights in another format (bf16, q8_0: infer/decoding.h).
#include <stdlib.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "app/commands.h"
#include "data/token_file.h"
#include "tensor/util.h"
#include "tensor/error.h"
#include "infer/decoding.h"
#include "train/model_io.h"

namespace attend::cli {

namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string checkpoint, data, precision, weights;
};

bool is_token_file(const fs::path& file) {
  size_t size = 0;
  const int fd = open_regular_file(file, &size);  // refuses a FIFO or device at once
  char magic[8] = {0};
  const ssize_t n = size >= 8 ? ::read(fd, magic, 8) : 0;
  ::close(fd);
  return n == 8 && std::equal(magic, magic + 8, data::kTokenMagic);
}

// A private folder (mkdtemp: mode 0700, a fresh name) removed when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "attend_eval_XXXXXX").string();
    ATTEND_CHECK(::mkdtemp(tmpl.data()) != nullptr, tmpl, ": cannot create a temporary folder");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

int run_eval(const EvalArgs& a) {
  train::LoadedModel m = train::load_model(a.checkpoint);
  const kernel::PrecisionScope precision = use_precision(
      weights_precision(a.weights, a.precision, m.config.precision), "--precision");
  // --weights: the model's weights held in that format while it is evaluated.
  std::optional<infer::DecodingWeights> held;
  if (!a.weights.empty()) held.emplace(*m.model, parse_weight_format(a.weights, "--weights"));
  train::EvalResult r;
  if (is_token_file(a.data)) {
    train::check_made_by(data::TokenFile(a.data), m.tokenizer->spec());
    r = train::evaluate_windows(*m.model, a.data);
  } else {
    const data::TokenIds ids = m.tokenizer->encode(read_file(a.data));
    TempDir tmp;
    data::write_token_file(tmp.path() / "eval.bin", ids, m.tokenizer->vocab_size(),
                           data::tokenizer_hash(m.tokenizer->spec()));
    r = train::evaluate_windows(*m.model, tmp.path() / "eval.bin");
  }
  std::printf("loss %.6f\nperplexity %.6f\ntokens %lld\n", r.loss, std::exp(r.loss),
              static_cast<long long>(r.tokens));
  return 0;
}

}  // namespace

void add_eval(CLI::App& app, int& rc) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd =
      app.add_subcommand("eval", "mean loss and perplexity over every non-overlapping window");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  cmd->add_option("--data", a->data, "a token file (.bin) or a text file")->required();
  cmd->add_option("--precision", a->precision,
                  "f32 | bf16 matrix products (default: the checkpoint's training precision)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  add_weights_option(cmd, a->weights);
  cmd->callback([a, &rc] { rc = run_eval(*a); });
}

}  // namespace attend::cli
