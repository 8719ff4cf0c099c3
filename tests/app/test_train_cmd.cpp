// `attend train` end to end, each run in a fresh process: exact resume (f32, bf16, a Llama),
// presets, kills during checkpoint writes, signals, NaN stops, memory and disk limits, the
// run folder's lock, thread counts and the GEMM kernel.
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

namespace {

// 8 steps straight against 3 steps + resume for 5, for the model `arch` flags describe.
void check_exact_resume(const std::string& arch) {
  fs::path dir = temp_dir("resume");
  fs::path corpus = make_corpus(dir);
  // Dropout on, warmup and cosine, gradient accumulation: everything that could drift.
  const std::string common =
      "train --data " + corpus.string() + kTiny + arch +
      " --dropout 0.1 --warmup_iters 2 --lr_decay_iters 8 --gradient_accumulation_steps 2"
      " --eval_interval 4 --log_interval 1 --checkpoint_interval 100";
  Run a = attend_cmd(common + " --max_iters 8 --out " + (dir / "A").string());
  REQUIRE_MESSAGE(a.code == 0, a.out);
  Run b1 = attend_cmd(common + " --max_iters 3 --out " + (dir / "B").string());
  REQUIRE_MESSAGE(b1.code == 0, b1.out);
  Run b2 = attend_cmd("train --resume " + (dir / "B").string() + " --max_iters 8");
  REQUIRE_MESSAGE(b2.code == 0, b2.out);
  CHECK(b2.out.find("resumed from") != std::string::npos);

  io::CheckpointData ca = io::load_checkpoint(dir / "A" / "ckpt_00000008.h5");
  io::CheckpointData cb = io::load_checkpoint(dir / "B" / "ckpt_00000008.h5");
  REQUIRE(ca.model.size() == cb.model.size());
  for (size_t i = 0; i < ca.model.size(); ++i) {
    INFO(ca.model[i].first);
    CHECK(test::bit_identical(ca.model[i].second, cb.model[i].second));
  }
  REQUIRE(ca.optimizer.tensors.size() == cb.optimizer.tensors.size());
  for (size_t i = 0; i < ca.optimizer.tensors.size(); ++i) {
    INFO(ca.optimizer.tensors[i].first);
    CHECK(test::bit_identical(ca.optimizer.tensors[i].second, cb.optimizer.tensors[i].second));
  }
  // (content_hash differs: it covers /data, and the two runs prepared data in their own
  // folders.)
  CHECK(ca.optimizer.step == 8);
  // Per-step losses, printed with 17 significant digits: identical strings.
  std::vector<std::string> la = column(dir / "A" / "metrics.csv", 1),
                           lb = column(dir / "B" / "metrics.csv", 1);
  CHECK(la.size() == 8);
  CHECK(la == lb);
  fs::remove_all(dir);
}

}  // namespace


TEST_CASE("exact resume: 8 steps straight equal 3 steps + resume for 5, bit for bit") {
  check_exact_resume("");
}

TEST_CASE("exact resume of a Llama with a sliding window and an untied head, bit for bit") {
  // RMSNorm, RoPE, SwiGLU, GQA (kTiny's n_kv_head 1), Mistral's window, lm_head its own.
  check_exact_resume(" --arch llama --tie_embeddings false --sliding_window 5");
}

TEST_CASE("exact resume with bf16 products, bit for bit") {
  check_exact_resume(" --precision bf16");
}

TEST_CASE(
    "bf16: recorded in the checkpoint, kept on resume, refused changed, same bits at 1 and 2 "
    "threads and by either kernel") {
  fs::path dir = temp_dir("bf16");
  fs::path corpus = make_corpus(dir);
  const std::string common =
      " train --data " + corpus.string() + kTiny + " --dropout 0.1 --max_iters 4";
  for (const char* run : {"f32", "t1", "t2", "emulated"}) {
    const std::string name = run;
    const std::string env = name == "emulated" ? "ATTEND_GEMM=avx2 " : "";
    const std::string threads = name == "t2" ? "--threads 2" : "--threads 1";
    const std::string precision = name == "f32" ? "" : " --precision bf16";
    Run r = attend_cmd(threads + common + precision + " --out " + (dir / run).string(), env);
    REQUIRE_MESSAGE(r.code == 0, r.out);
    bool fast = false;  // vdpbf16ps, or the AVX-512 FMAs that stand in for it
    kernel::gemm_bf16_note(&fast);
    if (name == "emulated" || (name == "t1" && !fast))
      CHECK(r.out.find("running the emulation") != std::string::npos);
  }
  CHECK(models_differing(dir / "t1", dir / "t2") == 0);
  CHECK(models_differing(dir / "t1", dir / "emulated") == 0);
  CHECK(models_differing(dir / "t1", dir / "f32") > 0);  // the rounding did happen
  const io::CheckpointData saved = train::newest_valid_checkpoint(dir / "t1").data;
  CHECK(train::from_values(saved.config).precision == "bf16");
  const Run changed =
      attend_cmd("train --resume " + (dir / "t1").string() + " --max_iters 6 --precision f32");
  CHECK(changed.code != 0);
  CHECK(changed.out.find("precision (checkpoint bf16, now f32)") != std::string::npos);
  const Run bad = attend_cmd(common + " --precision f16 --out " + (dir / "bad").string());
  CHECK(bad.code != 0);
  CHECK(bad.out.find("--precision: must be f32 or bf16, got f16") != std::string::npos);
  // eval and sample take the checkpoint's precision unless told otherwise.
  const std::string ev =
      "eval --checkpoint " + (dir / "t1").string() + " --data " + corpus.string();
  const std::string e_saved = attend_stdout(ev), e_bf16 = attend_stdout(ev + " --precision bf16"),
                    e_f32 = attend_stdout(ev + " --precision f32");
  REQUIRE(e_saved.find("loss ") == 0);
  CHECK(e_saved == e_bf16);
  CHECK(e_saved != e_f32);
  CHECK(attend_cmd(ev + " --precision f16").code != 0);
  fs::remove_all(dir);
}

TEST_CASE("exact resume keeps non-round settings bit for bit (4 steps + resume to 8)") {
  // Regression: at 272aa40 the resume merge re-set every double from 6-digit text, so
  // this run differed from the uninterrupted one in 14 of 16 tensors.
  fs::path dir = temp_dir("resume_exact");
  fs::path corpus = make_corpus(dir);
  const std::string common = "train --data " + corpus.string() + kTiny +
                             " --learning_rate 0.00031622776 --min_lr 3.3333333e-5"
                             " --warmup_iters 2 --lr_decay_iters 8 --checkpoint_interval 100";
  Run a = attend_cmd(common + " --max_iters 8 --out " + (dir / "A").string());
  REQUIRE_MESSAGE(a.code == 0, a.out);
  Run b1 = attend_cmd(common + " --max_iters 4 --out " + (dir / "B").string());
  REQUIRE_MESSAGE(b1.code == 0, b1.out);
  Run b2 = attend_cmd("train --resume " + (dir / "B").string() + " --max_iters 8");
  REQUIRE_MESSAGE(b2.code == 0, b2.out);
  CHECK(b2.out.find("will not match") == std::string::npos);
  io::CheckpointData ca = io::load_checkpoint(dir / "A" / "ckpt_00000008.h5");
  io::CheckpointData cb = io::load_checkpoint(dir / "B" / "ckpt_00000008.h5");
  int differ = 0;
  for (size_t i = 0; i < ca.model.size(); ++i)
    differ += !test::bit_identical(ca.model[i].second, cb.model[i].second);
  CHECK(differ == 0);
  for (size_t i = 0; i < ca.optimizer.tensors.size(); ++i)
    CHECK(test::bit_identical(ca.optimizer.tensors[i].second, cb.optimizer.tensors[i].second));
  fs::remove_all(dir);
}

TEST_CASE("--preset cpu-char --n_head 8 builds the model --n_head 8 builds (MHA)") {
  // Regression: at 272aa40 naming the preset kept its n_kv_head 4 (GQA), silently.
  fs::path dir = temp_dir("preset_heads");
  fs::path corpus = make_corpus(dir);
  const std::string common = "train --data " + corpus.string() +
                             " --n_layer 1 --block_size 16 --batch_size 2 --eval_iters 1"
                             " --max_iters 0 --n_head 8";
  Run with = attend_cmd(common + " --preset cpu-char --out " + (dir / "A").string());
  Run without = attend_cmd(common + " --out " + (dir / "B").string());
  REQUIRE_MESSAGE(with.code == 0, with.out);
  REQUIRE_MESSAGE(without.code == 0, without.out);
  CHECK(with.out.find("8 heads, 8 kv heads") != std::string::npos);
  CHECK(without.out.find("8 heads, 8 kv heads") != std::string::npos);
  Run g2 = attend_cmd("summary --preset gpt2 --n_head 16");
  CHECK_MESSAGE(g2.code == 0, g2.out);
  CHECK(g2.out.find("n_head 16, n_kv_head 16") != std::string::npos);
  Run bad = attend_cmd("summary --n_layer x");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("--n_layer: expected an integer, got 'x'") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("kill -9 during checkpoint writes leaves every checkpoint loadable") {
  fs::path dir = temp_dir("kill");
  fs::path corpus = make_corpus(dir);
  // Checkpoints every step; the kill lands at varied delays after the first one exists,
  // so at various points of later writes.
  for (int delay_ms : {0, 37, 113, 260}) {
    fs::path run = dir / ("run" + std::to_string(delay_ms));
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1), ::dup2(null, 2);
      const std::string out = run.string(), data = corpus.string();
      ::execl(ATTEND_BIN, "attend", "train", "--data", data.c_str(), "--out", out.c_str(),
              "--n_layer", "2", "--n_embd", "64", "--n_head", "2", "--block_size", "16",
              "--batch_size", "2", "--max_iters", "100000", "--checkpoint_interval", "1",
              "--keep_checkpoints", "2", "--eval_interval", "100000", nullptr);
      ::_exit(127);
    }
    for (int waited = 0; waited < 30000 && train::list_checkpoints(run).empty(); waited += 5)
      ::usleep(5000);
    ::usleep(delay_ms * 1000);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    auto all = train::list_checkpoints(run);
    CAPTURE(delay_ms);
    REQUIRE(!all.empty());
    for (const fs::path& p : all) {
      INFO(p.string());
      CHECK_NOTHROW(io::load_checkpoint(p));
    }
    CHECK(train::newest_valid_checkpoint(run).path == all.back());
    // And the run continues from it.
    Run r = attend_cmd("train --resume " + run.string() + " --max_iters " +
                       std::to_string(io::load_checkpoint(all.back()).meta.step + 1));
    CHECK_MESSAGE(r.code == 0, r.out);
  }
  fs::remove_all(dir);
}

TEST_CASE("SIGTERM and SIGINT finish the step, write a checkpoint and exit 0 saying where it is") {
  fs::path dir = temp_dir("sigterm");
  fs::path corpus = make_corpus(dir);
  for (int sig : {SIGTERM, SIGINT}) {
    fs::path run = dir / ("run" + std::to_string(sig));
    fs::path log = dir / ("log" + std::to_string(sig));
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1), ::dup2(fd, 2);
      const std::string out = run.string(), data = corpus.string();
      ::execl(ATTEND_BIN, "attend", "train", "--data", data.c_str(), "--out", out.c_str(),
              "--n_layer", "1", "--n_embd", "16", "--n_head", "2", "--block_size", "16",
              "--batch_size", "2", "--max_iters", "1000000", "--checkpoint_interval", "50",
              "--eval_interval", "1000000", nullptr);
      ::_exit(127);
    }
    for (int waited = 0; waited < 30000 && train::list_checkpoints(run).empty(); waited += 5)
      ::usleep(5000);
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CAPTURE(sig);
    const std::string out = file_bytes(log);
    CAPTURE(out);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(out.find(sig == SIGTERM ? "stopped by SIGTERM" : "stopped by SIGINT") !=
          std::string::npos);
    CHECK(out.find("continue with: attend train --resume") != std::string::npos);
    // The checkpoint is of the last finished step, not of the last interval.
    const fs::path newest = train::newest_valid_checkpoint(run).path;
    const int64_t step = io::load_checkpoint(newest).meta.step;
    CHECK(out.find(newest.filename().string()) != std::string::npos);
    CHECK(column(run / "metrics.csv", 0).empty() == false);
    CHECK(step >= 50);
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "a non-finite loss stops the run naming the step - the last good checkpoint is untouched") {
  fs::path dir = temp_dir("nan");
  fs::path corpus = make_corpus(dir);
  Run r = attend_cmd(
      "train --data " + corpus.string() + " --out " + (dir / "run").string() + kTiny +
      " --max_iters 50 --learning_rate 1e30 --decay_lr false --grad_clip 0 --checkpoint_interval 1"
      " --keep_checkpoints 100 --eval_interval 1000");
  CHECK(r.code != 0);
  CAPTURE(r.out);
  CHECK(r.out.find("step ") != std::string::npos);
  CHECK((r.out.find("the loss is") != std::string::npos ||
         r.out.find("the gradient norm is") != std::string::npos ||
         r.out.find("non-finite (the model diverged)") != std::string::npos));
  CHECK(r.out.find("no checkpoint written") != std::string::npos);
  for (const fs::path& p : train::list_checkpoints(dir / "run")) {
    io::CheckpointData d = io::load_checkpoint(p);
    for (auto& [n, t] : d.model) {
      std::vector<float> v = t.to_vector<float>();
      CHECK(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "a diverged model is never checkpointed nor marked best, and sample refuses NaN weights") {
  // Regression (adversarial M1): with lr 1e308 and an evaluation every step the NaN model
  // was saved, marked best ("the last good one"), and sample printed "zzzz" with exit 0.
  fs::path dir = temp_dir("diverge");
  fs::path corpus = make_corpus(dir);
  Run r = attend_cmd("train --data " + corpus.string() + " --out " + (dir / "run").string() +
                     kTiny + " --learning_rate 1e308 --max_iters 2 --eval_interval 1");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.out.find("the model diverged") != std::string::npos, r.out);
  CHECK(train::list_checkpoints(dir / "run").empty());
  // A checkpoint with a NaN weight (written by hand) is refused by sample and eval.
  Run ok = attend_cmd("train --data " + corpus.string() + " --out " + (dir / "ok").string() +
                      kTiny + " --max_iters 1");
  REQUIRE_MESSAGE(ok.code == 0, ok.out);
  const fs::path ckpt = train::newest_valid_checkpoint(dir / "ok").path;
  io::CheckpointData d = io::load_checkpoint(ckpt);
  for (auto& [name, t] : d.model)
    if (name == "transformer.ln_f.weight") t.data<float>()[0] = NAN;
  io::save_checkpoint(dir / "nan.h5", d);
  Run s = attend_cmd("sample --checkpoint " + (dir / "nan.h5").string() + " --max_new_tokens 5");
  CHECK(s.code == 1);
  CHECK_MESSAGE(s.out.find("/model/transformer.ln_f.weight holds NaN or infinite values") !=
                    std::string::npos,
                s.out);
  fs::remove_all(dir);
}

TEST_CASE(
    "resuming from an older checkpoint sets the later ones aside instead of pruning the new") {
  // Regression (adversarial M8): pruning kept the abandoned run's higher-numbered files and
  // deleted the new run's, so the next --resume RUN silently continued the abandoned run.
  fs::path dir = temp_dir("branch");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  Run a = attend_cmd("train --data " + corpus.string() + " --out " + run.string() + kTiny +
                     " --max_iters 10 --checkpoint_interval 1 --keep_checkpoints 3"
                     " --eval_interval 1000");
  REQUIRE_MESSAGE(a.code == 0, a.out);
  std::ofstream(run / "ckpt_00000011.h5.tmp") << "partial";  // as a killed write leaves it
  Run b = attend_cmd("train --resume " + (run / "ckpt_00000008.h5").string() + " --max_iters 9");
  REQUIRE_MESSAGE(b.code == 0, b.out);
  CHECK(b.out.find("moved 2 later checkpoint(s)") != std::string::npos);
  const train::LoadedCheckpoint newest = train::newest_valid_checkpoint(run);
  CHECK(newest.path.filename() == "ckpt_00000009.h5");
  CHECK(newest.data.meta.step == 9);
  CHECK(fs::exists(run / "abandoned_after_00000008" / "ckpt_00000010.h5"));
  CHECK(!fs::exists(run / "ckpt_00000011.h5.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("a second SIGINT ends a run at once, even inside a long evaluation") {
  // Regression (adversarial L13): Ctrl-C was ignored until the current evaluation ended.
  fs::path dir = temp_dir("sigint2");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run", log = dir / "log";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1), ::dup2(fd, 2);
    const std::string out = run.string(), data = corpus.string();
    ::execl(ATTEND_BIN, "attend", "train", "--data", data.c_str(), "--out", out.c_str(),
            "--n_layer", "1", "--n_embd", "16", "--n_head", "2", "--block_size", "16",
            "--batch_size", "2", "--eval_iters", "1000000", nullptr);
    ::_exit(127);
  }
  // Wait until the step-0 evaluation (about a minute at this eval_iters) has begun.
  for (int waited = 0; waited < 30000 && file_bytes(log).find("model:") == std::string::npos;
       waited += 5)
    ::usleep(5000);
  ::usleep(200000);
  ::kill(pid, SIGINT);
  ::usleep(100000);
  ::kill(pid, SIGINT);
  int status = 0;
  bool ended = false;
  for (int waited = 0; waited < 5000 && !ended; waited += 10) {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) ::usleep(10000);
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  CHECK(ended);  // within 5 s of the second SIGINT
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGINT));
  fs::remove_all(dir);
}

TEST_CASE("requests past the machine's memory are refused up front, naming the estimate") {
  // Regression (adversarial M4): --batch_size 50000000 or --n_layer 200000 allocated until
  // "internal error: std::bad_alloc" (exit 2), naming no flag.
  fs::path dir = temp_dir("mem");
  fs::path corpus = make_corpus(dir);
  Run b = attend_cmd("train --data " + corpus.string() + " --out " + (dir / "a").string() +
                     " --batch_size 50000000");
  CHECK(b.code == 1);
  CHECK_MESSAGE(b.out.find("of activations at --batch_size 50000000") != std::string::npos, b.out);
  CHECK(b.out.find("more than the") != std::string::npos);
  Run l = attend_cmd("train --data " + corpus.string() + " --out " + (dir / "b").string() +
                     " --n_layer 200000");
  CHECK(l.code == 1);
  CHECK_MESSAGE(l.out.find("training needs an estimated") != std::string::npos, l.out);
  Run e = attend_cmd("summary --n_embd 4611686018427387904 --n_head 1");
  CHECK(e.code == 1);
  CHECK_MESSAGE(e.out.find("attend refuses more than 10^15") != std::string::npos, e.out);
  Run rows = attend_cmd("summary --n_layer 1000000 --n_embd 64 --n_head 2");
  CHECK(rows.code == 0);
  CHECK(std::count(rows.out.begin(), rows.out.end(), '\n') < 80);
  // A checkpoint whose (rehashed) /config asks for far more than /model stores.
  Run ok = attend_cmd("train --data " + corpus.string() + " --out " + (dir / "ok").string() +
                      kTiny + " --max_iters 1");
  REQUIRE_MESSAGE(ok.code == 0, ok.out);
  io::CheckpointData d = train::newest_valid_checkpoint(dir / "ok").data;
  for (auto& [name, v] : d.config)
    if (name == "n_layer") v = int64_t{1000000};
  io::save_checkpoint(dir / "big.h5", d);
  Run s = attend_cmd("sample --checkpoint " + (dir / "big.h5").string());
  CHECK(s.code == 1);
  CHECK_MESSAGE(s.out.find("/config describes a model of") != std::string::npos, s.out);
  fs::remove_all(dir);
}

TEST_CASE("a full disk during a checkpoint leaves the previous one byte-identical") {
  fs::path dir = temp_dir("full");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  Run first =
      attend_cmd("train --data " + corpus.string() + " --out " + run.string() +
                 " --n_layer 2 --n_embd 64 --n_head 2 --block_size 16 --batch_size 2 --max_iters 2"
                 " --checkpoint_interval 2 --eval_interval 1000");
  REQUIRE_MESSAGE(first.code == 0, first.out);
  const fs::path ckpt = run / "ckpt_00000002.h5";
  const std::string before = file_bytes(ckpt);
  REQUIRE(before.size() > 200 * 1024);
  // Files may grow to 100 KiB only: the next checkpoint's write fails.
  Run second = attend_cmd("train --resume " + run.string() + " --max_iters 4", "ulimit -f 100; ");
  // Regression (adversarial H4): exit 1 with the error, not a crash in HDF5 at exit (139),
  // and no partial .tmp left to keep the disk full.
  CHECK(second.code == 1);
  CAPTURE(second.out);
  CHECK(second.out.find("disk full?") != std::string::npos);
  CHECK(file_bytes(ckpt) == before);
  CHECK(!fs::exists(run / "ckpt_00000004.h5"));
  CHECK(!fs::exists(run / "ckpt_00000004.h5.tmp"));
  CHECK(train::newest_valid_checkpoint(run).path == ckpt);
  fs::remove_all(dir);
}

TEST_CASE("one trainer per run folder - settings that cannot change on resume are refused") {
  fs::path dir = temp_dir("lock");
  fs::path corpus = make_corpus(dir);
  const fs::path run = dir / "run";
  tiny_run(corpus, run, 2);
  {
    const int fd = ::open((run / "lock").c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    REQUIRE(::ftruncate(fd, 0) == 0);
    REQUIRE(::pwrite(fd, "424242", 6, 0) == 6);
    Run r = attend_cmd("train --resume " + run.string() + " --max_iters 4");
    CHECK(r.code != 0);
    CHECK_MESSAGE(
        r.out.find("another trainer is using this run folder (pid 424242)") != std::string::npos,
        r.out);
    ::close(fd);
  }
  Run mismatch =
      attend_cmd("train --resume " + run.string() + " --max_iters 4 --n_embd 32 --n_layer 3");
  CHECK(mismatch.code != 0);
  CHECK_MESSAGE(mismatch.out.find("n_layer (checkpoint 2, now 3)") != std::string::npos,
                mismatch.out);
  CHECK(mismatch.out.find("n_embd (checkpoint 16, now 32)") != std::string::npos);
  Run again = attend_cmd("train --data " + corpus.string() + " --out " + run.string() + kTiny +
                         " --max_iters 2");
  CHECK(again.code != 0);
  CHECK(again.out.find("already holds checkpoints; use --resume") != std::string::npos);
  // A corrupt newest checkpoint is skipped with a warning.
  fs::copy_file(run / "ckpt_00000002.h5", run / "ckpt_00000009.h5");
  fs::resize_file(run / "ckpt_00000009.h5", 1000);
  Run skip = attend_cmd("train --resume " + run.string() + " --max_iters 3");
  CHECK_MESSAGE(skip.code == 0, skip.out);
  CHECK(skip.out.find("skipping") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("--threads 1 and --threads 2 train bit-identical models") {
  // The promise behind --threads: only the speed depends on it.
  fs::path dir = temp_dir("threads");
  fs::path corpus = make_corpus(dir);
  for (const char* t : {"1", "2"}) {
    Run r = attend_cmd(std::string("--threads ") + t + " train --data " + corpus.string() +
                       " --out " + (dir / t).string() + kTiny + " --dropout 0.1 --max_iters 4");
    REQUIRE_MESSAGE(r.code == 0, r.out);
  }
  CHECK(models_differing(dir / "1", dir / "2") == 0);
  CHECK(attend_cmd("--threads 0 summary --preset gpt2").code != 0);
  fs::remove_all(dir);
}

TEST_CASE("ATTEND_GEMM=avx2 trains the default kernel's bits, and a bad value is refused") {
  // The AVX-512 GEMM kernel (where the CPU has it) and the AVX2 one give the same bits
  // (tests/tensor/test_matmul.cpp compares them product by product); here, whole training.
  fs::path dir = temp_dir("gemm_env");
  fs::path corpus = make_corpus(dir);
  for (const char* k : {"default", "avx2"}) {
    Run r = attend_cmd("train --data " + corpus.string() + " --out " + (dir / k).string() + kTiny +
                           " --dropout 0.1 --max_iters 4",
                       std::string(k) == "default" ? "" : std::string("ATTEND_GEMM=") + k + " ");
    REQUIRE_MESSAGE(r.code == 0, r.out);
  }
  CHECK(models_differing(dir / "default", dir / "avx2") == 0);
  const Run bad = attend_cmd("summary --preset gpt2", "ATTEND_GEMM=avx1024 ");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("ATTEND_GEMM='avx1024': expected avx512, avx2 or portable") !=
        std::string::npos);
  fs::remove_all(dir);
}
