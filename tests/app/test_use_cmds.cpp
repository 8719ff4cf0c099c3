// Using a checkpoint end to end: sample, eval, plot, attention, heads, diagram, and the
// same bytes at any thread count.
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

TEST_CASE("sample: a warning stays on stderr, and a failed sample prints no text") {
  // Regression (adversarial M6): a prompt longer than block_size warns; the warning must
  // not land in the text a pipe receives.
  fs::path dir = temp_dir("streams");
  const fs::path run = tiny_run(make_corpus(dir), dir / "run", 2);
  const std::string text = attend_stdout("sample --checkpoint " + run.string() + " --prompt '" +
                                         std::string(40, 'a') + "' --max_new_tokens 5");
  CHECK(text.find("warn") == std::string::npos);
  CHECK(text.find("[") == std::string::npos);
  CHECK(text.rfind(std::string(40, 'a'), 0) == 0);
  CHECK(attend_stdout("sample --checkpoint /nonexistent").empty());
  fs::remove_all(dir);
}

TEST_CASE("flags that were silently wrong are refused: --log-level, --resume with --out, --head, --seed") {
  // Regressions (adversarial L2, L5, L6, L7).
  fs::path dir = temp_dir("badflags");
  const fs::path run = tiny_run(make_corpus(dir), dir / "run", 2);
  Run lvl = attend_cmd("--log-level errr summary --preset gpt2");
  CHECK(lvl.code != 0);
  CHECK(lvl.out.find("errr not in") != std::string::npos);
  Run both = attend_cmd("train --resume " + run.string() + " --out " + (dir / "x").string());
  CHECK(both.code == 1);
  CHECK(both.out.find("give one of the two") != std::string::npos);
  CHECK(!fs::exists(dir / "x"));
  Run head = attend_cmd("attention --checkpoint " + run.string() + " --prompt ab --head -2 --out " +
                        (dir / "a.svg").string());
  CHECK(head.code != 0);
  Run seed = attend_cmd("sample --checkpoint " + run.string() + " --seed -1");
  CHECK(seed.code != 0);
  fs::remove_all(dir);
}

TEST_CASE("eval of text uses a private temporary folder") {
  // Regression (adversarial M3): eval wrote $TMPDIR/attend_eval_<pid>.bin.tmp through a
  // predictable, symlink-following name.
  fs::path dir = temp_dir("evaltmp");
  const fs::path corpus = make_corpus(dir);
  const fs::path run = tiny_run(corpus, dir / "run", 2);
  fs::create_directories(dir / "tmp");
  Run e = attend_cmd("eval --checkpoint " + run.string() + " --data " + corpus.string(),
                     "TMPDIR=" + (dir / "tmp").string() + " ");
  REQUIRE_MESSAGE(e.code == 0, e.out);
  CHECK(fs::is_empty(dir / "tmp"));  // its folder (mkdtemp, mode 0700) is gone again
  fs::remove_all(dir);
}

TEST_CASE("plot fails loudly when it cannot write the picture") {
  // Regression (adversarial L3): plot said "wrote" when it could not write.
  fs::path dir = temp_dir("plotfail");
  const fs::path run = tiny_run(make_corpus(dir), dir / "run", 2);
  fs::remove(run / "loss.svg");
  fs::create_directories(run / "loss.svg");  // where the picture should go: a folder
  Run p = attend_cmd("plot " + run.string());
  CHECK(p.code == 1);
  CHECK(p.out.find("wrote") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("sample: --num_samples, --prompt_file and --stop") {
  fs::path dir = temp_dir("sampleopts");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  tiny_run(corpus, run, 20);
  const std::string base = "sample --checkpoint " + run.string() + " --max_new_tokens 40 --seed 9";
  const std::string one = attend_stdout(base + " --prompt Now");
  const std::string two = attend_stdout(base + " --prompt Now --num_samples 2");
  const size_t sep = two.find("\n---------------\n");
  REQUIRE(sep != std::string::npos);
  // Sample 0 draws the numbers a single sample draws; sample 1 its own.
  CHECK(two.substr(0, sep) + "\n" == one);
  CHECK(two.substr(sep + 17).rfind("Now", 0) == 0);
  CHECK(two.substr(sep + 17) != two.substr(0, sep) + "\n");
  std::ofstream(dir / "prompt.txt") << "Now";
  CHECK(attend_stdout(base + " --prompt_file " + (dir / "prompt.txt").string()) == one);
  // --stop: the text ends at the first occurrence after the prompt (kept).
  const std::string generated = one.substr(3, one.size() - 4);
  REQUIRE(generated.size() > 10);
  size_t at = 5;  // a pair of letters (nothing the shell's quotes would mind)
  while (at + 2 < generated.size() &&
         !(std::isalpha(static_cast<unsigned char>(generated[at])) &&
           std::isalpha(static_cast<unsigned char>(generated[at + 1]))))
    ++at;
  REQUIRE(at + 2 < generated.size());
  const std::string stop = generated.substr(at, 2);
  const std::string stopped = attend_stdout(base + " --prompt Now --stop '" + stop + "'");
  CHECK(stopped == "Now" + generated.substr(0, generated.find(stop) + stop.size()) + "\n");
  Run both = attend_cmd(base + " --prompt a --prompt_file " + (dir / "prompt.txt").string());
  CHECK(both.code == 1);
  CHECK(both.out.find("give --prompt or --prompt_file, not both") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("eval refuses ids made by another tokenizer, and says how many tokens it scored") {
  // #13 item 5: a token file records which tokenizer made it; eval and train check it.
  fs::path dir = temp_dir("evaltok");
  fs::path corpus = make_corpus(dir);
  REQUIRE(attend_cmd("prepare --data " + corpus.string() + " --out " + (dir / "c").string()).code ==
          0);
  REQUIRE(attend_cmd("prepare --data " + corpus.string() + " --out " + (dir / "b").string() +
                     " --tokenizer bpe:260")
              .code == 0);
  const fs::path run = dir / "run";
  tiny_run((dir / "c"), run, 2);
  Run ok = attend_cmd("eval --checkpoint " + run.string() + " --data " +
                      (dir / "c" / "val.bin").string());
  REQUIRE_MESSAGE(ok.code == 0, ok.out);
  CHECK(ok.out.find("\ntokens ") != std::string::npos);
  Run bad = attend_cmd("eval --checkpoint " + run.string() + " --data " +
                       (dir / "b" / "val.bin").string());
  CHECK(bad.code == 1);
  CHECK_MESSAGE(bad.out.find("made by another tokenizer") != std::string::npos, bad.out);
  CHECK(bad.out.find("than char") != std::string::npos);
  // A prepared folder whose tokenizer.json was swapped for another is refused by train.
  fs::copy_file(dir / "b" / "tokenizer.json", dir / "c" / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  fs::copy_file(dir / "b" / "encoder.json", dir / "c" / "encoder.json");
  fs::copy_file(dir / "b" / "vocab.bpe", dir / "c" / "vocab.bpe");
  Run swapped = attend_cmd("train --data " + (dir / "c").string() + " --out " +
                           (dir / "r2").string() + kTiny + " --max_iters 1");
  CHECK(swapped.code == 1);
  CHECK(swapped.out.find("made by another tokenizer") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("attention views take a long UTF-8 tokenizer name whole") {
  // Regression (adversarial L5): the model description went through a 200-byte snprintf
  // buffer that cut a character in half, and the JSON writer then refused the string.
  fs::path dir = temp_dir("longname");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  tiny_run(corpus, run, 1);
  io::CheckpointData d = train::newest_valid_checkpoint(run).data;
  std::string name;
  for (int i = 0; i < 150; ++i) name += "\xc3\xa9";  // "é" x 150: 300 bytes
  d.tokenizer.name = name;
  io::save_checkpoint(dir / "named.h5", d);
  for (const char* ext : {".json", ".html"}) {
    Run a = attend_cmd("attention --checkpoint " + (dir / "named.h5").string() +
                       " --prompt Now --out " + (dir / (std::string("a") + ext)).string());
    CHECK_MESSAGE(a.code == 0, a.out);
    CHECK(file_bytes(dir / (std::string("a") + ext)).find(name) != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "eval's loss equals the model's own forward over the same windows - sampling is reproducible") {
  fs::path dir = temp_dir("eval");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  tiny_run(corpus, run, 20);
  const fs::path ckpt = train::newest_valid_checkpoint(run).path;
  Run ev = attend_cmd("eval --checkpoint " + ckpt.string() + " --data " +
                      (run / "data" / "val.bin").string());
  REQUIRE_MESSAGE(ev.code == 0, ev.out);
  const double printed = std::stod(ev.out.substr(ev.out.find("loss ") + 5));
  CHECK(ev.out.find("perplexity ") != std::string::npos);
  // One window at a time, by hand.
  train::LoadedModel m = train::load_model(ckpt.string());
  data::TokenDataset ds(run / "data" / "val.bin", 16);
  double total = 0;
  NoGradGuard no_grad;
  for (int64_t k = 0; k < ds.num_windows(); ++k) {
    data::Batch b = ds.windows(k, 1);
    total += m.model->forward(b.x, b.y).loss.item();
  }
  CHECK(printed == doctest::Approx(total / ds.num_windows()).epsilon(1e-5));
  Run plot = attend_cmd("plot " + run.string() + " --log-y");
  CHECK_MESSAGE(plot.code == 0, plot.out);
  CHECK(file_bytes(run / "loss.svg").find("(log scale)") != std::string::npos);
  Run summary = attend_cmd("summary --checkpoint " + run.string());
  CHECK_MESSAGE(summary.code == 0, summary.out);
  CHECK(summary.out.find("transformer.h.0.attn.c_attn") != std::string::npos);
  Run att = attend_cmd("attention --checkpoint " + run.string() + " --prompt 'Now is' --out " +
                       (dir / "a.csv").string());
  CHECK_MESSAGE(att.code == 0, att.out);
  Run too_long = attend_cmd("attention --checkpoint " + run.string() + " --prompt '" +
                            std::string(40, 'o') + "' --out " + (dir / "a.svg").string());
  CHECK(too_long.code != 0);
  CHECK(too_long.out.find("the prompt is 40 tokens, longer than block_size 16") !=
        std::string::npos);
  // A text file is tokenized with the checkpoint's tokenizer.
  Run ev_text = attend_cmd("eval --checkpoint " + ckpt.string() + " --data " + corpus.string());
  CHECK_MESSAGE(ev_text.code == 0, ev_text.out);

  const std::string s =
      "sample --checkpoint " + ckpt.string() + " --max_new_tokens 40 --prompt Now";
  Run s1 = attend_cmd(s + " --seed 5"), s2 = attend_cmd(s + " --seed 5"),
      s3 = attend_cmd(s + " --seed 6");
  CHECK(s1.code == 0);
  CHECK(s1.out == s2.out);
  CHECK(s1.out != s3.out);
  CHECK(s1.out.rfind("Now", 0) == 0);
  Run g1 = attend_cmd(s + " --temperature 0 --seed 1"),
      g2 = attend_cmd(s + " --temperature 0 --seed 2");
  CHECK(g1.out == g2.out);  // greedy ignores the seed
  fs::remove_all(dir);
}

TEST_CASE("eval, sample and heads print the same bytes at 1, 2 and 3 threads and adapting") {
  // The thread policy (Note [Threads on a busy machine]) may change the count between
  // units of work; each unit's result must not depend on it (bounded, not a timing test).
  fs::path dir = temp_dir("threads_cmds");
  const fs::path r = test::trained_run(dir);
  const std::string val = (r / "data" / "val.bin").string();
  for (const std::string& args :
       {"eval --checkpoint " + r.string() + " --data " + val,
        "sample --checkpoint " + r.string() + " --prompt So --max_new_tokens 40 --seed 3",
        "heads --checkpoint " + r.string() + " --data " + val + " --batches 2"}) {
    const std::string adaptive = test::attend_stdout(args);
    CHECK(!adaptive.empty());
    for (const char* t : {"1", "2", "3"}) {
      INFO(args, " at ", t, " threads");
      CHECK(test::attend_stdout(std::string("--threads ") + t + " " + args) == adaptive);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("heads: a layer x head table of ablation losses on stdout, CSV and SVG") {
  const fs::path dir = temp_dir("heads");
  const fs::path corpus = make_corpus(dir);
  REQUIRE(attend_cmd("prepare --data " + corpus.string() + " --out " + (dir / "d").string()).code ==
          0);
  const fs::path run = dir / "run";
  tiny_run((dir / "d"), run, 3);
  const std::string out = attend_stdout(
      "heads --checkpoint " + run.string() + " --data " + (dir / "d" / "val.bin").string() +
      " --batches 2 --batch_size 2 --csv " + (dir / "h.csv").string() + " --svg " +
      (dir / "h.svg").string() + " --html " + (dir / "h.html").string());
  CAPTURE(out);
  CHECK(out.find("base loss ") == 0);
  CHECK(out.find("loss increase with each head zeroed") != std::string::npos);
  CHECK(out.find("cheapest to remove (mean ablation): L") != std::string::npos);
  std::ifstream csv(dir / "h.csv");
  std::string line;
  int rows = 0;
  std::getline(csv, line);
  CHECK(line == "layer,head,zero_loss,mean_loss,zero_increase,mean_increase");
  while (std::getline(csv, line)) ++rows;
  CHECK(rows == 2 * 2);  // kTiny: 2 layers, 2 heads
  std::stringstream svg;
  svg << std::ifstream(dir / "h.svg").rdbuf();
  CHECK(svg.str().find("head output zeroed") != std::string::npos);
  CHECK(svg.str().find("layer 1") != std::string::npos);
  std::stringstream html;
  html << std::ifstream(dir / "h.html").rdbuf();
  CHECK(html.str().rfind("<!doctype html>", 0) == 0);
  CHECK(html.str().find("head output zeroed") != std::string::npos);   // the heatmaps inline
  CHECK(html.str().find("const ROWS = [[0,0,") != std::string::npos);  // every head's row
  // The same run's diagram with a prompt's activations, and the explorer that embeds it.
  Run d = attend_cmd("diagram --checkpoint " + run.string() +
                     " --prompt \"to be\" --layer 1 --out " + (dir / "m.svg").string());
  REQUIRE_MESSAGE(d.code == 0, d.out);
  std::stringstream msvg;
  msvg << std::ifstream(dir / "m.svg").rdbuf();
  CHECK(msvg.str().find("class=\"activation\">prompt (layer 1): (1,5,") != std::string::npos);
  Run e = attend_cmd("diagram --checkpoint " + run.string() + " --prompt to --layer 2 --out " +
                     (dir / "m.svg").string());
  CHECK(e.code == 1);
  CAPTURE(e.out);
  CHECK(e.out.find("--layer 2: the model has 2 layers") != std::string::npos);
  Run g = attend_cmd("diagram --preset gpt2 --layer 1 --out " + (dir / "m.svg").string());
  CHECK(g.code == 1);
  CHECK(g.out.find("--layer chooses the block whose activations --prompt shows") !=
        std::string::npos);
  Run f = attend_cmd("diagram --preset gpt2 --prompt x --out " + (dir / "m.svg").string());
  CHECK(f.code == 1);
  CHECK(f.out.find("--prompt needs --checkpoint") != std::string::npos);
  REQUIRE(attend_cmd("attention --checkpoint " + run.string() + " --prompt \"to be\" --out " +
                     (dir / "a.html").string())
              .code == 0);
  std::stringstream ahtml;
  ahtml << std::ifstream(dir / "a.html").rdbuf();
  CHECK(ahtml.str().find("<h2 id=\"diagram\"") != std::string::npos);
  // A bad --batches is named.
  Run bad = attend_cmd("heads --checkpoint " + run.string() + " --data " +
                       (dir / "d" / "val.bin").string() + " --batches 0");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("--batches: must be >= 1, got 0") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("diagram: --preset or model flags to .svg or .html, a bad name refused") {
  const fs::path dir = temp_dir("diagram");
  Run r = attend_cmd("diagram --preset gpt2 --n_kv_head 4 --out " + (dir / "m.html").string());
  REQUIRE_MESSAGE(r.code == 0, r.out);
  std::stringstream html;
  html << std::ifstream(dir / "m.html").rdbuf();
  CHECK(html.str().rfind("<!doctype html>", 0) == 0);
  CHECK(html.str().find("query heads 0-2 read key/value head 0") != std::string::npos);
  Run bad = attend_cmd("diagram --preset gpt2 --out " + (dir / "m.png").string());
  CHECK(bad.code == 1);
  CHECK(bad.out.find("expected a .svg or .html file name") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("attention --toy: an encoder-decoder's cross-attention from the command line") {
  const fs::path dir = temp_dir("toy");
  // 30 steps: the views, not the learning (tests/viz trains it to reverse).
  Run r = attend_cmd("attention --toy copy --toy_steps 30 --prompt abcd --attention cross --out " +
                     (dir / "x.json").string());
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(r.out.find("toy copy model: 30 steps") != std::string::npos);
  std::stringstream js;
  js << std::ifstream(dir / "x.json").rdbuf();
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j["kind"] == "cross-attention");
  CHECK(j["causal"] == false);
  CHECK(j["key_tokens"] == nlohmann::json({"a", "b", "c", "d"}));
  CHECK(j["layers"].size() == 2);
  Run e = attend_cmd(
      "attention --toy reverse --toy_steps 30 --prompt abcd --attention encoder "
      "--convention column --out " +
      (dir / "e.svg").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  std::stringstream svg;
  svg << std::ifstream(dir / "e.svg").rdbuf();
  CHECK(svg.str().find("bidirectional self-attention") != std::string::npos);
  CHECK(svg.str().find("There is no mask here") != std::string::npos);
  // Bad input, named before any training.
  Run bad = attend_cmd("attention --toy reverse --prompt abz --out " + (dir / "x.json").string());
  CHECK(bad.code == 1);
  CHECK(bad.out.find("--prompt 'abz': 'z' is not one of the toy model's letters abcdefghijkl") !=
        std::string::npos);
  Run longp =
      attend_cmd("attention --toy reverse --prompt abcdefghi --out " + (dir / "x.json").string());
  CHECK(longp.code == 1);
  CHECK(longp.out.find("9 letters; the toy model reads 3 to 8") != std::string::npos);
  Run both = attend_cmd("attention --toy copy --checkpoint runs/x --prompt abc --out " +
                        (dir / "x.json").string());
  CHECK(both.code == 1);
  CHECK(both.out.find("--toy trains its own model; drop --checkpoint") != std::string::npos);
  Run stray = attend_cmd("attention --checkpoint runs/x --prompt abc --attention encoder --out " +
                         (dir / "x.json").string());
  CHECK(stray.code == 1);
  CHECK(stray.out.find("--attention is for --toy models only") != std::string::npos);
  Run none = attend_cmd("attention --prompt abc --out " + (dir / "x.json").string());
  CHECK(none.code == 1);
  CHECK(none.out.find("--checkpoint is required (or --toy copy|reverse)") != std::string::npos);
  fs::remove_all(dir);
}

namespace {
// The loss eval prints.
double eval_loss(const std::string& out) {
  const size_t at = out.find("loss ");
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + 5));
}
}  // namespace

TEST_CASE("sample and eval --weights: q8_0 close to f32, bf16 needs bf16 products, same bits at any thread count") {
  const fs::path dir = test::temp_dir("weights_flag");
  const fs::path corpus = test::make_corpus(dir);
  const test::Run t = test::attend_cmd(
      "train --data " + corpus.string() + " --out " + (dir / "run").string() +
      " --preset llama-char --n_layer 2 --n_head 4 --n_kv_head 2 --n_embd 64 --block_size 64"
      " --batch_size 8 --max_iters 150 --eval_iters 1 --learning_rate 3e-3");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  const std::string run = (dir / "run").string(), val = (dir / "run" / "data" / "val.bin").string();
  const double f32 = eval_loss(test::attend_stdout("eval --checkpoint " + run + " --data " + val));
  const double q8 =
      eval_loss(test::attend_stdout("eval --checkpoint " + run + " --data " + val + " --weights q8_0"));
  const double bf16 =
      eval_loss(test::attend_stdout("eval --checkpoint " + run + " --data " + val + " --weights bf16"));
  MESSAGE("val loss f32 ", f32, ", q8_0 ", q8, ", bf16 ", bf16);
  // Perplexity within 1% (q8_0) and 0.5% (bf16) of f32's: |loss gap| below log(1.01), log(1.005).
  CHECK(q8 != f32);  // the weights were rounded: not the f32 model again
  CHECK(std::abs(q8 - f32) < std::log(1.01));
  CHECK(std::abs(bf16 - f32) < std::log(1.005));
  // Greedy text: q8_0 decoding agrees with f32 for a while (reported), and is the same bits
  // at 1 and 2 threads.
  const std::string cmd = "sample --checkpoint " + run + " --prompt 'Now is the' --temperature 0 --max_new_tokens 60";
  const std::string a = test::attend_stdout(cmd), q = test::attend_stdout(cmd + " --weights q8_0");
  size_t same = 0;
  while (same < a.size() && same < q.size() && a[same] == q[same]) ++same;
  MESSAGE("greedy text: q8_0 agrees with f32 for ", same, " of ", a.size(), " bytes");
  CHECK(test::attend_stdout("--threads 1 " + cmd + " --weights q8_0") ==
        test::attend_stdout("--threads 2 " + cmd + " --weights q8_0"));
  const test::Run refused = test::attend_cmd(cmd + " --weights bf16 --precision f32");
  CHECK(refused.code == 1);
  CHECK(refused.out.find("--weights bf16 multiplies in bf16 products") != std::string::npos);
  fs::remove_all(dir);
}
