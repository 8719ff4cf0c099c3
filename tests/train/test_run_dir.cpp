// The run folder: metrics.csv written and read back exactly, a damaged one refused with
// the line and column, checkpoint names and pruning.
#include <cmath>
#include <fstream>

#include "test_util.h"
#include "nn/gpt.h"
#include "train/config.h"
#include "train/model_io.h"
#include "train/run_dir.h"

using namespace attend;
using namespace attend::train;
namespace fs = std::filesystem;

TEST_CASE("metrics.csv: rows round-trip bit for bit, empty cells as NaN") {
  const fs::path dir = test::temp_dir("metrics");
  std::vector<MetricsRow> rows = {{0, NAN, 4.1743, 1e-5, NAN, NAN, 0.25, 4.17},
                                  {10, 0.1 + 0.2, NAN, 3.1622776601683795e-4, 1.5, 1234.5, 2.0}};
  write_metrics(dir, rows);
  const auto back = read_metrics(dir / "metrics.csv");
  REQUIRE(back.size() == 2);
  auto same = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  for (size_t i = 0; i < 2; ++i) {
    CHECK(back[i].step == rows[i].step);
    CHECK(same(back[i].train_loss, rows[i].train_loss));
    CHECK(same(back[i].val_loss, rows[i].val_loss));
    CHECK(same(back[i].lr, rows[i].lr));
    CHECK(same(back[i].grad_norm, rows[i].grad_norm));
    CHECK(same(back[i].tokens_per_s, rows[i].tokens_per_s));
    CHECK(same(back[i].elapsed_s, rows[i].elapsed_s));
    CHECK(same(back[i].eval_train_loss, rows[i].eval_train_loss));
  }
  // A file written before eval_train_loss (7 columns) reads with it empty.
  std::ofstream(dir / "old.csv") << "step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s\n"
                                 << "5,2.5,2.6,1e-3,1.1,900,3\n";
  const auto old = read_metrics(dir / "old.csv");
  REQUIRE(old.size() == 1);
  CHECK(old[0].val_loss == 2.6);
  CHECK(std::isnan(old[0].eval_train_loss));
  // loss.svg: the loss panel with evaluations as points, then lr and gradient norm.
  write_loss_plot(dir, rows, true);
  const std::string svg = read_file(dir / "loss.svg");
  for (const char* want :
       {"train loss (evaluation)", "val loss (evaluation)", "train loss (each step)",
        ">learning rate<", ">gradient norm<", "<circle", "(log scale)"}) {
    INFO(want);
    CHECK(svg.find(want) != std::string::npos);
  }
  CHECK(read_metrics(dir / "absent.csv").empty());
  std::ofstream(dir / "bad.csv") << "step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s\n"
                                 << "1,2.5,,1e-3,,,\n2,x,,,,,\n";
  test::check_error([&] { read_metrics(dir / "bad.csv"); },
                    "bad.csv: line 3 column 2: expected a number, got 'x'");
  std::ofstream(dir / "head.csv") << "when,what\n1,2\n";
  test::check_error([&] { read_metrics(dir / "head.csv"); }, "head.csv: unexpected header");
  fs::remove_all(dir);
}

TEST_CASE("checkpoint names sort by step, and pruning keeps the newest and the one asked for") {
  CHECK(checkpoint_name(250) == "ckpt_00000250.h5");
  const fs::path dir = test::temp_dir("prune");
  for (int64_t s : {2, 4, 6, 8, 10}) std::ofstream(dir / checkpoint_name(s)) << "x";
  std::ofstream(dir / "ckpt_notes.txt") << "not a checkpoint";
  prune_checkpoints(dir, 2, checkpoint_name(4));
  std::vector<std::string> left;
  for (const auto& p : list_checkpoints(dir)) left.push_back(p.filename().string());
  CHECK(left ==
        std::vector<std::string>{checkpoint_name(4), checkpoint_name(8), checkpoint_name(10)});
  CHECK(fs::exists(dir / "ckpt_notes.txt"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint pruned while a reader reads it stays readable to that reader") {
  // Regression (adversarial M7, then R18): a reader listed ckpt_2, the trainer wrote ckpt_3
  // and pruned ckpt_2 while the reader was reading it, and the reader failed ("no loadable
  // checkpoint") once this had happened a few times in a row. Now the reader opens the file
  // first and reads through its descriptor: the pruned file is read whole. Staged here with
  // a loader that does the trainer's part first.
  const fs::path dir = test::temp_dir("prune_race");
  std::ofstream(dir / checkpoint_name(2)) << "2";
  int calls = 0;
  auto racing_load = [&](const fs::path& p) -> io::CheckpointData {
    if (calls++ == 0) {
      std::ofstream(dir / checkpoint_name(3)) << "3";
      fs::remove(dir / checkpoint_name(2));
    }
    std::ifstream in(p);
    int step = -1;
    in >> step;
    ATTEND_CHECK(step >= 0, p.string(), ": no such checkpoint file");
    io::CheckpointData d;
    d.meta.step = step;
    return d;
  };
  const LoadedCheckpoint got = newest_valid_checkpoint(dir, racing_load);
  CHECK(calls == 1);  // no second try needed
  CHECK(got.path.filename() == checkpoint_name(2));
  CHECK(got.data.meta.step == 2);  // the bytes of the file it named
  CHECK(!fs::exists(dir / checkpoint_name(2)));
  fs::remove_all(dir);
}

TEST_CASE("load_model sets every parameter from the checkpoint: nothing of an initialisation "
          "is left") {
  // load_model builds the model without drawing its initial weights (nn::GPT's init false),
  // so every parameter must come from the checkpoint: a GPT-2 (biases, tied head) and a
  // Llama (untied head), bit for bit.
  nn::GPTConfig llama = nn::gpt_preset("llama-char");
  llama.block_size = 16, llama.n_layer = 2, llama.n_head = 4, llama.n_kv_head = 2;
  llama.n_embd = 32, llama.hidden_dim = 96, llama.tie_embeddings = false;
  const nn::GPTConfig gpt2{.vocab_size = 65, .block_size = 16, .n_layer = 2, .n_head = 4,
                           .n_kv_head = 4, .n_embd = 32, .dropout = 0.0, .bias = true};
  for (const nn::GPTConfig& c : {gpt2, llama}) {
    CAPTURE(c.arch);
    train::TrainConfig tc;
    tc.model = c;
    const nn::GPT saved(c, 11);
    train::LoadedCheckpoint ck;
    ck.path = "in-memory.h5";
    ck.data.config = train::to_values(tc);
    ck.data.model = saved.state_dict();
    ck.data.tokenizer.kind = ck.data.tokenizer.name = "char";
    for (int i = 0; i < c.vocab_size; ++i)
      ck.data.tokenizer.tokens.push_back(std::string(1, static_cast<char>(' ' + i)));
    const train::LoadedModel m = train::load_model(ck);
    const nn::NamedTensors want = saved.named_parameters(), got = m.model->named_parameters();
    REQUIRE(want.size() == got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(want[i].first);
      CHECK(got[i].first == want[i].first);
      CHECK(test::bit_identical(got[i].second, want[i].second));
    }
    // and a model built without its initialisation is not that model (so this compares)
    const nn::GPT bare(c, 11, false);
    CHECK_FALSE(test::bit_identical(bare.named_parameters()[0].second, want[0].second));
  }
}
