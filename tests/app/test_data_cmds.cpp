// The data commands end to end: tokenize and prepare, bad flags and data, config files.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "run_cmd.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "test_util.h"
#include "cli_fixture.h"
#include "io/checkpoint.h"
#include "train/model_io.h"
#include "train/run_dir.h"
#include "train/trainer.h"


using namespace attend;
using namespace attend::test;
namespace fs = std::filesystem;

TEST_CASE("bad flags and data: an error naming the flag or file, and a non-zero exit") {
  fs::path dir = temp_dir("flags");
  fs::path corpus = make_corpus(dir);
  const std::string base = "train --data " + corpus.string() + " --out " + (dir / "r").string();
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {base + " --bogus 1", "--bogus"},
      {base + " --learning_rate -1", "--learning_rate: must be positive, got -1"},
      {base + " --learning-rate abc", "--learning_rate: expected a number, got 'abc'"},
      {base + " --n_embd 30 --n_head 4", "--n_embd 30 must be divisible by --n_head 4"},
      {base + " --n_head 4 --n_kv_head 3", "--n_head 4 must be divisible by --n_kv_head 3"},
      {base + " --bias maybe", "--bias: expected true or false, got 'maybe'"},
      {base + " --preset gpt5", "unknown preset 'gpt5'"},
      {"train --data " + (dir / "nothing").string() + " --out " + (dir / "r2").string(),
       "no such file or folder"},
      {base + " --n_layer 1 --n_embd 16 --block_size 100000 --max_iters 1",
       "too short for block_size 100000"},
      {"eval --checkpoint " + (dir / "none.h5").string() + " --data " + corpus.string(),
       "none.h5: no such checkpoint file"},
      {"sample --checkpoint " + corpus.string(), "cannot open as HDF5"},
  };
  for (const Case& c : cases) {
    Run r = attend_cmd(c.args);
    CAPTURE(c.args);
    CAPTURE(r.out);
    CHECK(r.code != 0);
    CHECK(r.out.find(c.needle) != std::string::npos);
  }
  std::ofstream(dir / "cfg.json") << "{\"n_layer\": 1, \"colour\": \"red\"}";
  Run r = attend_cmd(base + " --config " + (dir / "cfg.json").string());
  CHECK(r.code != 0);
  CHECK_MESSAGE(r.out.find("cfg.json: unknown setting 'colour'") != std::string::npos, r.out);
  fs::remove_all(dir);
}

TEST_CASE("tokenize and prepare from the command line") {
  fs::path dir = temp_dir("tokcli");
  fs::path corpus = make_corpus(dir);
  Run p = attend_cmd("prepare --data " + corpus.string() + " --out " + (dir / "d").string() +
                     " --tokenizer bpe:300");
  REQUIRE_MESSAGE(p.code == 0, p.out);
  CHECK(p.out.find("tokenizer bpe:300, vocab_size 300") != std::string::npos);
  Run ids = attend_cmd("tokenize --tokenizer bpe:" + (dir / "d").string() +
                       " --text 'Now is the winter'");
  REQUIRE_MESSAGE(ids.code == 0, ids.out);
  Run back = attend_cmd("tokenize --decode --tokenizer " + (dir / "d").string() + " --text '" +
                        ids.out.substr(0, ids.out.size() - 1) + "'");
  CHECK(back.out == "Now is the winter");
  Run bad = attend_cmd("tokenize --decode --tokenizer " + (dir / "d").string() + " --text '1 x 2'");
  CHECK(bad.code != 0);
  CHECK(bad.out.find("tokenize --decode: id 1: expected an integer, got 'x'") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("prepare replaces a prepared folder whole or not at all") {
  // Regression (adversarial M2): a failed prepare left the new train.bin beside the old
  // val.bin and tokenizer, and train accepted the mix.
  fs::path dir = temp_dir("prep_atomic");
  std::string a, b;
  for (int i = 0; i < 2000; ++i) a += "abcdefgh \n"[i % 10], b += "stuvwxyz.\n"[(i * 7) % 10];
  std::ofstream(dir / "A.txt") << a;
  std::ofstream(dir / "B.txt") << b + b + b + b + b + b + b + b;
  const fs::path out = dir / "dA";
  REQUIRE(
      attend_cmd("prepare --data " + (dir / "A.txt").string() + " --out " + out.string()).code ==
      0);
  const std::string train_a = file_bytes(out / "train.bin"), val_a = file_bytes(out / "val.bin"),
                    tok_a = file_bytes(out / "tokenizer.json");
  // Files may grow to 12 KiB: B's train.bin (about 14 KiB) cannot be written.
  Run fail = attend_cmd("prepare --data " + (dir / "B.txt").string() + " --out " + out.string(),
                        "ulimit -f 24; ");
  CHECK(fail.code == 1);
  CHECK(file_bytes(out / "train.bin") == train_a);
  CHECK(file_bytes(out / "val.bin") == val_a);
  CHECK(file_bytes(out / "tokenizer.json") == tok_a);
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir))
    leftovers += e.path().filename().string().find(".staging.") != std::string::npos;
  CHECK(leftovers == 0);
  // Success swaps the whole folder.
  Run ok = attend_cmd("prepare --data " + (dir / "B.txt").string() + " --out " + out.string());
  REQUIRE_MESSAGE(ok.code == 0, ok.out);
  CHECK(file_bytes(out / "tokenizer.json") != tok_a);
  // Folders prepare may not replace, and a split that training could not use.
  std::ofstream(out / "notes.txt") << "mine";
  Run foreign = attend_cmd("prepare --data " + (dir / "A.txt").string() + " --out " + out.string());
  CHECK(foreign.code == 1);
  CHECK(foreign.out.find("holds notes.txt, which prepare did not write") != std::string::npos);
  Run inside = attend_cmd("prepare --data " + dir.string() + " --out " + (dir / "sub").string());
  CHECK(inside.code == 1);
  CHECK(inside.out.find("is inside --data") != std::string::npos);
  Run zero = attend_cmd("prepare --data " + (dir / "A.txt").string() + " --out " +
                        (dir / "z").string() + " --val_fraction 0");
  CHECK(zero.code == 1);
  CHECK(zero.out.find("--val_fraction must be in (0, 1)") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("config files: integers past int64, duplicate keys, a huge value, 1e400 are refused") {
  // Regression (adversarial L12); a huge value is not echoed whole.
  fs::path dir = temp_dir("configs");
  const fs::path corpus = make_corpus(dir);
  auto train_with = [&](const std::string& name, const std::string& json) {
    std::ofstream(dir / name) << json;
    return attend_cmd("train --config " + (dir / name).string() + " --data " + corpus.string() +
                      " --out " + (dir / ("r_" + name)).string());
  };
  Run big = train_with("big.json", R"({"max_iters": 18446744073709551615})");
  CHECK(big.code == 1);
  CHECK(big.out.find("out of range for an integer setting") != std::string::npos);
  Run dup = train_with("dup.json", R"({"max_iters": 5, "max_iters": 7})");
  CHECK(dup.code == 1);
  CHECK(dup.out.find("setting 'max_iters' is given twice") != std::string::npos);
  Run huge = train_with("huge.json", "{\"n_layer\": \"" + std::string(100000, '9') + "x\"}");
  CHECK(huge.code == 1);
  CHECK(huge.out.size() < 2000);
  Run inf = train_with("inf.json", R"({"learning_rate": 1e400})");
  CHECK(inf.code == 1);
  fs::remove_all(dir);
}

TEST_CASE("tokenize --decode refuses an id past the vocabulary instead of wrapping it to 0") {
  fs::path dir = temp_dir("decodewrap");
  const fs::path corpus = make_corpus(dir);
  Run wrap =
      attend_cmd("tokenize --decode --tokenizer char:" + corpus.string() + " --text '4294967296'");
  CHECK(wrap.code == 1);
  CHECK(wrap.out.find("outside [0,") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("tokenize with GPT-2's tokenizer from the command line") {
  const fs::path gpt2 = test::shared_data("gpt2/encoder.json").parent_path();
  if (gpt2.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  Run g = attend_cmd("tokenize --tokenizer gpt2 --text 'Hello world'",
                     "ATTEND_GPT2_DIR=" + gpt2.string() + " ");
  CHECK(g.out == "15496 995\n");
}
