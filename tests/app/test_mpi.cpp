// Data-parallel training under mpirun (Note [Data-parallel training]): the same bits at
// world sizes 1, 2 and 4, elastic resume, SIGTERM, a killed rank, a hung rank, a rank
// that cannot read the data, and world sizes that cannot be exact. Each test starts
// mpirun itself (oversubscribed, one OpenMP thread per rank) and bounds it with timeout.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_cmd.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "io/checkpoint.h"
#include "train/dist.h"
#include "train/run_dir.h"

using namespace attend;
namespace fs = std::filesystem;
using attend::test::Run;
using attend::test::shell;

namespace {

// Why MPI tests cannot run here ("" when they can): an MPI build and mpirun are needed;
// scripts/setup.sh installs OpenMPI, so in CI these run.
std::string mpi_missing() {
  if (!train::Dist::built_with_mpi())
    return "this build has no MPI (apt-get install libopenmpi-dev openmpi-bin; rebuild)";
  if (shell("command -v mpirun").code != 0) return "mpirun not found (apt-get install openmpi-bin)";
  return "";
}
// Skips the test case (and returns from it) where MPI cannot run.
#define REQUIRE_MPI()                                            \
  do {                                                           \
    if (const std::string why = mpi_missing(); !why.empty()) ATTEND_SKIP(why); \
  } while (0)

// Local ranks inherit the environment (scripts/test.sh's ASAN_OPTIONS included). Shared
// memory copies through its own buffers: the single-copy mechanism (CMA) needs ptrace
// rights between sibling processes, which containers and Yama often withhold.
std::string mpirun(int np) {
  return "timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) +
         " -x OMP_NUM_THREADS=1 --mca btl_vader_single_copy_mechanism none ";
}

// A prepared folder of a small made-up corpus, character level.
fs::path prepared(const fs::path& dir) {
  std::string text;
  const char* lines[] = {"When shall we three meet again\n", "In thunder, lightning, or in rain?\n",
                         "When the hurlyburly's done,\n", "When the battle's lost and won.\n",
                         "That will be ere the set of sun.\n"};
  for (int i = 0; i < 400; ++i) text += lines[(i * 3 + i / 5) % 5];
  std::ofstream(dir / "corpus.txt") << text;
  const Run r = shell(std::string(ATTEND_BIN) + " prepare --data " + (dir / "corpus.txt").string() +
                      " --out " + (dir / "data").string());
  REQUIRE(r.code == 0);
  return dir / "data";
}

// Dropout on, so the masks' keying is tested too; M = 4 micro-steps. `every`: evaluation
// and checkpoint interval.
std::string flags(const fs::path& data, int64_t every = 3) {
  return " train --data " + data.string() +
         " --n_layer 2 --n_head 2 --n_embd 32 --block_size 16 --batch_size 4 --dropout 0.1"
         " --gradient_accumulation_steps 4 --eval_iters 5 --log_interval 1 --eval_interval " +
         std::to_string(every) + " --checkpoint_interval " + std::to_string(every);
}

// Every tensor of /model and /optimizer equal bit for bit, and the same step.
void check_same_bits(const fs::path& a, const fs::path& b) {
  const io::CheckpointData x = io::load_checkpoint(a), y = io::load_checkpoint(b);
  CAPTURE(a.string());
  CAPTURE(b.string());
  REQUIRE(x.meta.step == y.meta.step);
  REQUIRE(x.model.size() == y.model.size());
  REQUIRE(x.optimizer.tensors.size() == y.optimizer.tensors.size());
  int differ = 0;
  auto same = [&](const Tensor& s, const Tensor& t) {
    const Tensor cs = kernel::contiguous(s), ct = kernel::contiguous(t);
    return cs.numel() == ct.numel() &&
           std::memcmp(cs.raw_data(), ct.raw_data(),
                       static_cast<size_t>(cs.numel()) * dtype_size(cs.dtype())) == 0;
  };
  for (size_t i = 0; i < x.model.size(); ++i) differ += !same(x.model[i].second, y.model[i].second);
  for (size_t i = 0; i < x.optimizer.tensors.size(); ++i)
    differ += !same(x.optimizer.tensors[i].second, y.optimizer.tensors[i].second);
  CHECK(differ == 0);
  CHECK(x.meta.best_val_loss == y.meta.best_val_loss);
  CHECK(x.meta.tokens_seen == y.meta.tokens_seen);
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// metrics.csv without its elapsed and tokens/s columns (wall time differs run to run).
std::string losses(const fs::path& run) {
  std::stringstream in(read(run / "metrics.csv")), out;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    std::string cell;
    for (int i = 0; std::getline(ls, cell, ','); ++i)
      if (i != 5 && i != 6) out << cell << ',';
    out << '\n';
  }
  return out.str();
}

// The PID of rank `rank` among the processes whose command line holds `marker`.
std::string rank_pid_script(const std::string& marker, int rank) {
  return "for p in $(pgrep -f -- '" + marker +
         "'); do if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx "
         "'OMPI_COMM_WORLD_RANK=" +
         std::to_string(rank) + "'; then echo $p; fi; done";
}

}  // namespace

TEST_CASE("mpirun -np 2 and -np 4 train the same bits as one process") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_same");
  const fs::path data = prepared(dir);
  const std::string f = flags(data) + " --max_iters 6";
  REQUIRE(
      shell("OMP_NUM_THREADS=2 " + std::string(ATTEND_BIN) + f + " --out " + (dir / "w1").string())
          .code == 0);
  for (int np : {2, 4}) {
    const fs::path run = dir / (np == 2 ? "w2" : "w4");
    const Run r = shell(mpirun(np) + ATTEND_BIN + f + " --out " + run.string());
    CAPTURE(r.out);
    REQUIRE(r.code == 0);
    check_same_bits(dir / "w1" / train::checkpoint_name(6), run / train::checkpoint_name(6));
    check_same_bits(dir / "w1" / train::checkpoint_name(3), run / train::checkpoint_name(3));
    CHECK(losses(dir / "w1") == losses(run));
    CHECK(io::load_checkpoint(run / train::checkpoint_name(6)).meta.world_size == np);
    // Only rank 0 reports: one final line on stdout.
    size_t finals = 0;
    for (size_t at = 0; (at = r.out.find("trained steps 0..6", at)) != std::string::npos; ++at)
      ++finals;
    CHECK(finals == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("bf16 products: mpirun -np 2 and -np 4 train the same bits as one process") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_bf16");
  const fs::path data = prepared(dir);
  const std::string f = flags(data) + " --max_iters 3 --precision bf16";
  REQUIRE(
      shell("OMP_NUM_THREADS=2 " + std::string(ATTEND_BIN) + f + " --out " + (dir / "w1").string())
          .code == 0);
  for (int np : {2, 4}) {
    // (GCC 12's -Wrestrict misfires on "w" + std::to_string(np): bug 105329)
    const fs::path run = dir / (std::string("w") += std::to_string(np));
    const Run r = shell(mpirun(np) + ATTEND_BIN + f + " --out " + run.string());
    CAPTURE(r.out);
    REQUIRE(r.code == 0);
    check_same_bits(dir / "w1" / train::checkpoint_name(3), run / train::checkpoint_name(3));
    CHECK(losses(dir / "w1") == losses(run));
  }
  fs::remove_all(dir);
}

TEST_CASE("a Llama (GQA, sliding window) trains the same bits at -np 2 as in one process") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_llama");
  const fs::path data = prepared(dir);
  const std::string f =
      flags(data) + " --arch llama --n_kv_head 1 --sliding_window 6 --max_iters 3";
  REQUIRE(
      shell("OMP_NUM_THREADS=2 " + std::string(ATTEND_BIN) + f + " --out " + (dir / "w1").string())
          .code == 0);
  const Run r = shell(mpirun(2) + ATTEND_BIN + f + " --out " + (dir / "w2").string());
  CAPTURE(r.out);
  REQUIRE(r.code == 0);
  check_same_bits(dir / "w1" / train::checkpoint_name(3), dir / "w2" / train::checkpoint_name(3));
  CHECK(losses(dir / "w1") == losses(dir / "w2"));
  fs::remove_all(dir);
}

TEST_CASE("LoRA finetuning trains the same bits at -np 2 as in one process") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_lora");
  const fs::path data = prepared(dir);
  const std::string base = flags(data) + " --arch llama --n_kv_head 1 --max_iters 2";
  REQUIRE(shell(std::string(ATTEND_BIN) + base + " --out " + (dir / "base").string()).code == 0);
  // The adapters' own dropout on too (their masks keyed after the base's dropouts); an f32
  // base and a bf16 one (--base_weights bf16).
  for (const std::string format : {"f32", "bf16"}) {
    INFO("base_weights ", format);
    const std::string f = flags(data) + " --init_from " + (dir / "base").string() +
                          " --lora_rank 4 --lora_targets q,k,v,o,gate,up,down --lora_dropout 0.1"
                          " --max_iters 3 --base_weights " + format;
    const fs::path w1 = dir / ("w1" + format), w2 = dir / ("w2" + format);
    REQUIRE(shell("OMP_NUM_THREADS=2 " + std::string(ATTEND_BIN) + f + " --out " + w1.string())
                .code == 0);
    const Run r = shell(mpirun(2) + ATTEND_BIN + f + " --out " + w2.string());
    CAPTURE(r.out);
    REQUIRE(r.code == 0);
    check_same_bits(w1 / train::checkpoint_name(3), w2 / train::checkpoint_name(3));
    CHECK(losses(w1) == losses(w2));
  }
  fs::remove_all(dir);
}

TEST_CASE("DPO (LoRA, and full with its own reference) trains the same bits at -np 2") {
  REQUIRE_MPI();
  const fs::path gpt2 = test::shared_data("gpt2/encoder.json").parent_path();
  if (gpt2.empty()) ATTEND_SKIP("../shared/data/gpt2 not found (DPO's pairs need its end token)");
  const fs::path dir = test::temp_dir("mpi_dpo");
  const std::string env = "ATTEND_GPT2_DIR=" + gpt2.string() + " ";
  std::string json = "[";
  for (int i = 0; i < 24; ++i)
    json += std::string(i ? "," : "") + "{\"instruction\": \"Name thing " + std::to_string(i) +
            ".\", \"chosen\": \"Thing " + std::to_string(i) +
            " is fine.\", \"rejected\": \"No, go away.\"}";
  std::ofstream(dir / "pairs.json") << json << "]";
  std::ofstream(dir / "text.txt") << json;
  REQUIRE(shell(env + ATTEND_BIN + " prepare --data " + (dir / "pairs.json").string() +
                " --format preference --tokenizer gpt2 --out " + (dir / "pairs").string())
              .code == 0);
  const std::string model = " --arch llama --n_layer 2 --n_head 2 --n_kv_head 1 --n_embd 16"
                            " --block_size 64 --batch_size 2 --eval_iters 2 --log_interval 1";
  REQUIRE(shell(env + ATTEND_BIN + " train --data " + (dir / "text.txt").string() +
                " --tokenizer gpt2 --max_iters 2 --out " + (dir / "base").string() + model)
              .code == 0);
  for (const std::string mode : {" --lora_rank 2 --lora_targets q,v,o --lora_dropout 0.1", ""}) {
    INFO(mode);
    const std::string tag = mode.empty() ? "full" : "lora";
    const std::string f = std::string(" train --data ") + (dir / "pairs").string() +
                          " --init_from " + (dir / "base").string() +
                          " --dpo --gradient_accumulation_steps 4 --dropout 0.1 --max_iters 3"
                          " --eval_interval 3 --learning_rate 1e-2" +
                          model + mode;
    REQUIRE(shell(env + "OMP_NUM_THREADS=2 " + ATTEND_BIN + f + " --out " +
                  (dir / (tag + "1")).string())
                .code == 0);
    const Run r = shell(env + mpirun(2) + ATTEND_BIN + f + " --out " + (dir / (tag + "2")).string());
    CAPTURE(r.out);
    REQUIRE(r.code == 0);
    check_same_bits(dir / (tag + "1") / train::checkpoint_name(3),
                    dir / (tag + "2") / train::checkpoint_name(3));
    CHECK(losses(dir / (tag + "1")) == losses(dir / (tag + "2")));
  }
  fs::remove_all(dir);
}

TEST_CASE("a run checkpointed at 2 processes resumes at 4 and at 1 with the same bits") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_elastic");
  const fs::path data = prepared(dir);
  REQUIRE(shell(std::string(ATTEND_BIN) + flags(data) + " --max_iters 6 --out " +
                (dir / "straight").string())
              .code == 0);
  REQUIRE(
      shell(mpirun(2) + ATTEND_BIN + flags(data) + " --max_iters 3 --out " + (dir / "a").string())
          .code == 0);
  fs::copy(dir / "a", dir / "b", fs::copy_options::recursive);
  const Run to4 =
      shell(mpirun(4) + ATTEND_BIN + " train --resume " + (dir / "a").string() + " --max_iters 6");
  CAPTURE(to4.out);
  REQUIRE(to4.code == 0);
  REQUIRE(
      shell(std::string(ATTEND_BIN) + " train --resume " + (dir / "b").string() + " --max_iters 6")
          .code == 0);
  const fs::path want = dir / "straight" / train::checkpoint_name(6);
  check_same_bits(want, dir / "a" / train::checkpoint_name(6));
  check_same_bits(want, dir / "b" / train::checkpoint_name(6));
  CHECK(losses(dir / "straight") == losses(dir / "a"));
  fs::remove_all(dir);
}

TEST_CASE("SIGTERM to mpirun stops every rank after one step with one loadable checkpoint") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_term");
  const fs::path data = prepared(dir);
  const fs::path run = dir / "run";
  // Long enough never to finish; checkpoints only at the stop (and the evaluation at 0).
  const std::string cmd =
      mpirun(2) + ATTEND_BIN + flags(data, 1000000) + " --max_iters 1000000 --out " + run.string();
  const Run r =
      shell("(" + cmd + " > " + (dir / "log").string() +
            " 2>&1 & pid=$!; for i in $(seq 300); do [ -f " + (run / "metrics.csv").string() +
            " ] && break; sleep 0.1; done; sleep 1; pkill -TERM -P $pid -x mpirun; wait $pid; echo "
            "mpirun exit $?)");
  const std::string log = read(dir / "log");
  CAPTURE(log);
  CAPTURE(r.out);
  // One checkpoint, written at the stop (mpirun may have stopped forwarding the ranks'
  // output by then, so the "stopped by" line is checked only when it arrived).
  const std::vector<fs::path> cks = train::list_checkpoints(run);
  REQUIRE(cks.size() == 1);
  const int64_t step = io::load_checkpoint(cks[0]).meta.step;
  CHECK(step > 0);
  const size_t at = log.find("stopped by SIGTERM after step ");
  if (at != std::string::npos) CHECK(std::stoll(log.substr(at + 30)) == step);
  // And it resumes.
  CHECK(shell(mpirun(2) + ATTEND_BIN + " train --resume " + run.string() + " --max_iters " +
              std::to_string(step + 2))
            .code == 0);
  fs::remove_all(dir);
}

TEST_CASE("a killed rank and a hung rank end the job within seconds naming the rank") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_faults");
  const fs::path data = prepared(dir);
  for (const std::string how : {"KILL", "STOP"}) {
    CAPTURE(how);
    const fs::path run = dir / ("run_" + how);
    const std::string cmd = mpirun(2) + ATTEND_BIN + " --dist-timeout 3" + flags(data) +
                            " --max_iters 1000000 --out " + run.string();
    const auto t0 = std::chrono::steady_clock::now();
    const Run r = shell("(" + cmd + " > " + (dir / "log").string() +
                        " 2>&1 & pid=$!; for i in $(seq 300); do [ $(ls " + run.string() +
                        " 2>/dev/null | grep -c '^ckpt_') -ge 2 ] && break; sleep 0.1; done; "
                        "victim=$(" +
                        rank_pid_script("--out " + run.string(), 1) + "); kill -" + how +
                        " $victim; wait $pid; echo mpirun exit $?; kill -KILL $victim "
                        "2>/dev/null; true)");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = read(dir / "log");
    CAPTURE(log);
    CAPTURE(r.out);
    CHECK(r.out.find("mpirun exit 0") == std::string::npos);
    CHECK(seconds < 60);
    if (how == "KILL")
      CHECK(log.find("rank 1") != std::string::npos);
    else
      CHECK(log.find("rank 0: step ") != std::string::npos);
    // Rank 0's watchdog names the peer it waited for, in whichever collective it was
    // ("summing gradients with rank 1", "gathering gradients from rank 1", ...).
    if (how == "STOP") CHECK(log.find("rank 1: no answer within 3 s") != std::string::npos);
    // Every checkpoint on disk loads.
    const std::vector<fs::path> cks = train::list_checkpoints(run);
    CHECK(!cks.empty());
    for (const fs::path& c : cks) CHECK_NOTHROW(io::load_checkpoint(c));
  }
  fs::remove_all(dir);
}

TEST_CASE("a rank that cannot read the data fails the job with its own error") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_nodata");
  prepared(dir);
  fs::create_directories(dir / "elsewhere");
  // MPMD: rank 0 works in dir (where data/ is), rank 1 in dir/elsewhere (where it is not).
  const std::string f = flags("data") + " --max_iters 4 --out run";
  const Run r = shell(
      "timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
      " --mca btl_vader_single_copy_mechanism none -np 1 -wdir " +
      dir.string() + " " + ATTEND_BIN + f + " : -np 1 -wdir " + (dir / "elsewhere").string() + " " +
      ATTEND_BIN + f);
  CAPTURE(r.out);
  CHECK(r.code != 0);
  CHECK(r.code != 124);  // not the timeout: the job ended by itself
  CHECK(r.out.find("[rank 1] [error]") != std::string::npos);
  CHECK(r.out.find("data/tokenizer.json: no such file") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("world sizes that cannot give the same bits are refused naming both numbers") {
  REQUIRE_MPI();
  const fs::path dir = test::temp_dir("mpi_refuse");
  const fs::path data = prepared(dir);
  const Run three =
      shell(mpirun(3) + ATTEND_BIN + flags(data) + " --max_iters 2 --out " + (dir / "r3").string());
  CAPTURE(three.out);
  CHECK(three.code != 0);
  CHECK(three.out.find("--gradient_accumulation_steps 4 with 3 processes: the number of "
                       "processes must be a power of two") != std::string::npos);
  const Run eight =
      shell(mpirun(8) + ATTEND_BIN + flags(data) + " --max_iters 2 --out " + (dir / "r8").string());
  CHECK(eight.code != 0);
  CHECK(eight.out.find("--gradient_accumulation_steps 4 with 8 processes") != std::string::npos);
  fs::remove_all(dir);
}
