// Hostile inputs, round 3 (issue #23): files written through links, silent imports, hangs
// on special files, a crash from the environment. One case per defect, each failing on
// 0175703; then the classes: every command against a FIFO, a symlink and a folder.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_cmd.h"
#include "tensor/kernels.h"
#include "tensor/util.h"
#include "io/checkpoint.h"
#include "train/run_dir.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace attend;
using test::attend_cmd;
using test::Run;

namespace {

bool has(const Run& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

// The command failed as a user's error (exit 1) and said `text`.
void check_refused(const Run& r, const std::string& text) {
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, text), r.out);
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// "t<k>": a fresh output name per case.
std::string fmt_target(int k) {
  std::string name = std::to_string(k);
  name.insert(name.begin(), 't');
  return name;
}

// An exported Hugging Face folder of the shared tiny run.
fs::path exported(const fs::path& dir, const std::string& train_extra = "") {
  const fs::path r = test::trained_run(dir, train_extra);
  Run e = attend_cmd("export --checkpoint " + r.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  return dir / "hf";
}

}  // namespace

TEST_CASE("a huge OMP_NUM_THREADS is refused naming the variable, not a crash") {
  for (const char* v : {"100000", "0", "two"}) {
    Run r = attend_cmd("summary --preset gpt2", std::string("OMP_NUM_THREADS=") + v + " ");
    INFO(v, ": ", r.out);
    CHECK(r.code == 1);
    CHECK(has(r, "OMP_NUM_THREADS"));
  }
  Run ok = attend_cmd("summary --preset gpt2", "OMP_NUM_THREADS=2 ");
  CHECK_MESSAGE(ok.code == 0, ok.out);
}

TEST_CASE("export never writes through a symlink already in the output folder") {
  const fs::path dir = test::temp_dir("hostile_r2");
  const fs::path r = test::trained_run(dir);
  write_text(dir / "victim.json", "precious\n");
  fs::create_directories(dir / "out");
  for (const char* name : {"config.json", "tokenizer.json", "model.safetensors"})
    fs::create_symlink(dir / "victim.json", dir / "out" / name);
  Run e = attend_cmd("export --checkpoint " + r.string() + " --out " + (dir / "out").string());
  CHECK_MESSAGE(e.code == 0, e.out);
  CHECK(bytes_of(dir / "victim.json") == "precious\n");
  for (const char* name : {"config.json", "tokenizer.json", "model.safetensors"})
    CHECK(fs::is_regular_file(fs::symlink_status(dir / "out" / name)));
  // An --out that is itself a symlink is refused; a folder holding a user's own file too.
  fs::create_directories(dir / "elsewhere");
  fs::create_directory_symlink(dir / "elsewhere", dir / "linked");
  Run l = attend_cmd("export --checkpoint " + r.string() + " --out " + (dir / "linked").string());
  check_refused(l, "symbolic link");
  write_text(dir / "out" / "notes.txt", "mine\n");
  Run n = attend_cmd("export --checkpoint " + r.string() + " --out " + (dir / "out").string());
  check_refused(n, "notes.txt");
  CHECK(bytes_of(dir / "out" / "notes.txt") == "mine\n");
  fs::remove_all(dir);
}

TEST_CASE("import keeps an untied head or refuses, and a tied config drops it with a warning") {
  const fs::path dir = test::temp_dir("hostile_r3");
  const fs::path hf = exported(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    io::SafetensorsFile st(hf / "model.safetensors");
    for (const auto& [name, _] : st.entries()) tensors.emplace_back(name, st.read(name));
    Tensor head = kernel::contiguous(st.read("transformer.wte.weight"));
    head.data<float>()[0] += 0.5f;
    tensors.emplace_back("lm_head.weight", head);
  }
  io::write_safetensors(hf / "model.safetensors", tensors, {{"format", "pt"}});
  nlohmann::json cfg = nlohmann::json::parse(bytes_of(hf / "config.json"));
  cfg["tie_word_embeddings"] = false;
  write_text(hf / "config.json", cfg.dump());
  Run untied = attend_cmd("import --from " + hf.string() + " --out " + (dir / "a").string());
  check_refused(untied, "lm_head.weight differs from transformer.wte.weight");
  CHECK(!fs::exists(dir / "a" / "ckpt_00000000.h5"));
  cfg["tie_word_embeddings"] = true;
  write_text(hf / "config.json", cfg.dump());
  Run tied = attend_cmd("import --from " + hf.string() + " --out " + (dir / "b").string());
  CHECK_MESSAGE(tied.code == 0, tied.out);
  CHECK_MESSAGE(has(tied, "stored head is dropped"), tied.out);
  fs::remove_all(dir);
}

TEST_CASE("an import folder's damaged merges.txt is refused, never swapped for GPT-2's") {
  const fs::path dir = test::temp_dir("hostile_r4");
  const fs::path hf = exported(dir);
  fs::path gpt2;
  try {
    gpt2 = data::find_gpt2_dir();
  } catch (const Error&) {
  }
  if (gpt2.empty()) ATTEND_SKIP("GPT-2's tokenizer files are not available here");
  // The exported char model keeps its own tokenizer.json; GPT-2's vocab.json beside a
  // merges.txt that is empty, truncated, or GPT-2's own (which is accepted).
  fs::copy_file(gpt2 / "encoder.json", hf / "vocab.json");
  const std::string merges = bytes_of(gpt2 / "vocab.bpe");
  for (const std::string& bad : {std::string(), merges.substr(0, merges.size() / 2)}) {
    write_text(hf / "merges.txt", bad);
    Run r = attend_cmd("import --from " + hf.string() + " --out " + (dir / "i").string());
    check_refused(r, "merges.txt: not GPT-2's merges.txt");
  }
  fs::remove_all(dir);
}

TEST_CASE("a FIFO where a file is read is refused at once, not waited on") {
  const fs::path dir = test::temp_dir("hostile_r5");
  const fs::path hf = exported(dir);
  fs::remove(hf / "model.safetensors");
  REQUIRE(::mkfifo((hf / "model.safetensors").c_str(), 0644) == 0);
  Run i = attend_cmd("import --from " + hf.string() + " --out " + (dir / "i").string(),
                     "timeout 60 ");
  check_refused(i, "not a regular file");
  fs::create_directories(dir / "g");
  REQUIRE(::mkfifo((dir / "g" / "encoder.json").c_str(), 0644) == 0);
  REQUIRE(::mkfifo((dir / "g" / "vocab.bpe").c_str(), 0644) == 0);
  Run t = attend_cmd("tokenize --tokenizer gpt2 --text hi",
                     "timeout 60 env ATTEND_GPT2_DIR=" + (dir / "g").string() + " ");
  check_refused(t, "not a regular file");
  Run e = attend_cmd("eval --checkpoint " + (dir / "run").string() + " --data /dev/zero",
                     "timeout 60 ");
  check_refused(e, "/dev/zero: not a regular file");
  fs::remove_all(dir);
}

TEST_CASE("an export that fills the disk part-way fails as an ordinary error and leaves the old one") {
  // As the campaign found it: a small file system holding an export of a char model; an
  // export of a GPT-2-tokenizer model over it has room for model.safetensors but not for
  // the tokenizer files. Needs a private mount namespace with a tmpfs (root, as in CI).
  if (test::shell("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs /mnt'").code != 0)
    ATTEND_SKIP("cannot mount a tmpfs in a private mount namespace (needs root)");
  try {
    data::find_gpt2_dir();
  } catch (const Error&) {
    ATTEND_SKIP("GPT-2's tokenizer files are not available here");
  }
  const fs::path dir = test::temp_dir("hostile_r6");
  const fs::path old_export = exported(dir);  // a char model's export: dir/hf
  fs::create_directories(dir / "g");
  const fs::path g2 = test::trained_run(dir / "g", " --tokenizer gpt2");
  Run probe = attend_cmd("export --checkpoint " + g2.string() + " --out " + (dir / "g" / "hf").string());
  REQUIRE_MESSAGE(probe.code == 0, probe.out);
  uintmax_t old_bytes = 0;
  for (const auto& e : fs::directory_iterator(old_export)) old_bytes += fs::file_size(e.path());
  // Room for the old export and the new model file, not for the tokenizer files after it.
  const uintmax_t room = old_bytes + fs::file_size(dir / "g" / "hf" / "model.safetensors") + 300000;
  fs::create_directories(dir / "full");
  const std::string A = ATTEND_BIN, D = dir.string();
  Run r = test::shell("unshare -m sh -c 'mount -t tmpfs -o size=" + std::to_string(room / 1024) +
                      "k tmpfs " + D + "/full && cp -r " + D + "/hf " + D + "/full/hf && " + A +
                      " export --checkpoint " + g2.string() + " --out " + D +
                      "/full/hf; echo export=$?; " + A + " import --from " + D + "/full/hf --out " +
                      D + "/i; echo import=$?; ls -a " + D + "/full " + D + "/full/hf'");
  INFO(r.out);
  CHECK(has(r, "export=1"));
  CHECK(!has(r, "internal error"));
  CHECK(has(r, "import=0"));  // the old export, whole
  const std::string listing = r.out.substr(r.out.find("import="));
  CHECK(listing.find("staging") == std::string::npos);  // nothing left behind
  CHECK(listing.find("vocab.json") == std::string::npos);  // and nothing of the new export
  fs::remove_all(dir);
}

TEST_CASE("export over an older export leaves none of its files behind") {
  const fs::path dir = test::temp_dir("hostile_r7");
  const fs::path hf = exported(dir);
  // Files only a BPE export writes, as an older export of another model left them.
  for (const char* name : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
    write_text(hf / name, "stale\n");
  Run e = attend_cmd("export --checkpoint " + (dir / "run").string() + " --out " + hf.string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  for (const char* name : {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
    CHECK_MESSAGE(!fs::exists(hf / name), name);
  CHECK(fs::exists(hf / "tokenizer.json"));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint's tokenizer name that is not UTF-8 is refused naming the field") {
  const fs::path dir = test::temp_dir("hostile_r8");
  const fs::path r = test::trained_run(dir);
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  d.tokenizer.name = "\xff\xfe" "char";
  io::save_checkpoint(dir / "bad.h5", d);
  Run a = attend_cmd("attention --checkpoint " + (dir / "bad.h5").string() +
                     " --prompt So --out " + (dir / "a.html").string());
  check_refused(a, "/tokenizer: name");
  CHECK(!has(a, "internal error"));
  d.tokenizer.name = "char";
  d.tokenizer.kind = "evil";  // R16: the kind is checked too
  io::save_checkpoint(dir / "evil.h5", d);
  Run k = attend_cmd("train --init_from " + (dir / "evil.h5").string() + " --data " +
                     (dir / "corpus.txt").string() + " --out " + (dir / "t").string());
  check_refused(k, "kind is 'evil'");
  fs::remove_all(dir);
}

TEST_CASE("summary --checkpoint checks /config against the stored weights") {
  const fs::path dir = test::temp_dir("hostile_r10");
  const fs::path r = test::trained_run(dir);
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  for (auto& [name, v] : d.config)
    if (name == "n_layer") v = int64_t{1000000};
  io::save_checkpoint(dir / "big.h5", d);
  Run s = attend_cmd("summary --checkpoint " + (dir / "big.h5").string());
  check_refused(s, "/config describes a model of");
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint whose /config precision is not f32 or bf16 is refused naming the field") {
  const fs::path dir = test::temp_dir("hostile_precision");
  const fs::path r = test::trained_run(dir);
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  for (auto& [name, v] : d.config)
    if (name == "precision") v = std::string("f8");
  io::save_checkpoint(dir / "p.h5", d);
  const std::string ck = " --checkpoint " + (dir / "p.h5").string();
  for (const std::string& cmd : {"eval --data " + (dir / "corpus.txt").string() + ck,
                                 "sample --max_new_tokens 2 --prompt T" + ck})
    check_refused(attend_cmd(cmd), "checkpoint /config precision: expected f32 or bf16, got 'f8'");
  fs::remove_all(dir);
}

TEST_CASE("errors show the user's numbers: integer flags and huge config.json values") {
  const fs::path dir = test::temp_dir("hostile_r11");
  const fs::path hf = exported(dir);
  Run l = attend_cmd("attention --checkpoint " + (dir / "run").string() +
                     " --prompt So --out x.html --layer -3");
  check_refused(l, "expected an integer >= 0, got '-3'");
  CHECK(!has(l, "1.797"));
  nlohmann::json cfg = nlohmann::json::parse(bytes_of(hf / "config.json"));
  cfg["n_layer"] = uint64_t{18446744073709551615ull};
  write_text(hf / "config.json", cfg.dump());
  Run i = attend_cmd("import --from " + hf.string() + " --out " + (dir / "i").string());
  check_refused(i, "18446744073709551615");
  fs::remove_all(dir);
}

TEST_CASE("diagram --prompt \"\" is refused like every other empty prompt") {
  const fs::path dir = test::temp_dir("hostile_r12");
  const fs::path r = test::trained_run(dir);
  Run d = attend_cmd("diagram --checkpoint " + r.string() + " --prompt \"\" --out " +
                     (dir / "d.html").string());
  check_refused(d, "--prompt is empty");
  CHECK(!fs::exists(dir / "d.html"));
  fs::remove_all(dir);
}

TEST_CASE("flag errors CLI11 catches exit 1, as documented") {
  for (const char* args : {"--threads 0 summary --preset gpt2", "--log-level errr summary",
                           "attention --toy evil --prompt abc --out x.html"}) {
    Run r = attend_cmd(args);
    INFO(args, ": ", r.out);
    CHECK(r.code == 1);
  }
}

TEST_CASE("--eval_iters has a bound, named in the error") {
  const fs::path dir = test::temp_dir("hostile_r14");
  const fs::path r = test::trained_run(dir);
  Run e = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --out " +
                     (dir / "r").string() + " --max_iters 2 --eval_iters 1000000000000");
  check_refused(e, "eval_iters");
  CHECK(!has(e, "out of memory"));
  fs::remove_all(dir);
}

TEST_CASE("a tokens_seen near 2^63 is refused on resume, not wrapped into a bad checkpoint") {
  const fs::path dir = test::temp_dir("hostile_r15");
  const fs::path r = test::trained_run(dir);
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  d.meta.tokens_seen = INT64_MAX - 10;
  for (const fs::path& c : train::list_checkpoints(r)) fs::remove(c);
  io::save_checkpoint(r / train::checkpoint_name(d.meta.step), d);
  Run t = attend_cmd("train --resume " + r.string() + " --max_iters 5");
  check_refused(t, "overflows a 64-bit count");
  for (const fs::path& c : train::list_checkpoints(r))
    CHECK_NOTHROW(io::load_checkpoint(c));
  fs::remove_all(dir);
}

TEST_CASE("environment variables are checked like flags, naming the variable") {
  struct Case {
    std::string env, args, names;
  };
  for (const Case& c : {Case{"OMP_THREAD_LIMIT=0", "summary --preset gpt2", "OMP_THREAD_LIMIT"},
                        Case{"ATTEND_GEMM=avx1024", "summary --preset gpt2", "ATTEND_GEMM"},
                        Case{"ATTEND_GPT2_DIR=/nonexistent", "tokenize --tokenizer gpt2 --text hi",
                             "ATTEND_GPT2_DIR"},
                        Case{"XDG_CACHE_HOME=relative/cache", "tokenize --tokenizer gpt2 --text hi",
                             "XDG_CACHE_HOME"}}) {
    Run r = attend_cmd(c.args, "env -u ATTEND_GPT2_DIR " + c.env + " ");
    INFO(c.env, ": ", r.out);
    CHECK(r.code == 1);
    CHECK(has(r, c.names));
  }
}

// The class: every file a command reads, replaced by a FIFO, a folder, or a symlink to
// one of those, is refused at once (exit 1, naming the path), never waited on or crashed.
TEST_CASE("every command refuses a FIFO, a folder or a link to them in place of a file it reads") {
  const fs::path dir = test::temp_dir("hostile_special");
  const fs::path hf = exported(dir);
  const fs::path run = dir / "run";
  const std::string ckpt = train::list_checkpoints(run).back().string();
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0644) == 0);
  fs::create_directories(dir / "folder");
  fs::create_symlink(dir / "fifo", dir / "link_to_fifo");
  // Each command with one input replaced by @ (the thing under test).
  const std::vector<std::string> commands = {
      "eval --checkpoint @ --data " + (run / "data" / "val.bin").string(),
      "eval --checkpoint " + ckpt + " --data @",
      "sample --checkpoint @ --max_new_tokens 2",
      "summary --checkpoint @",
      "attention --checkpoint @ --prompt So --out " + (dir / "a.html").string(),
      "heads --checkpoint " + ckpt + " --data @",
      "diagram --checkpoint @ --prompt So --out " + (dir / "d.html").string(),
      "export --checkpoint @ --out " + (dir / "e").string(),
      "import --from @ --config " + (hf / "config.json").string() + " --out " +
          (dir / "i").string(),
      "import --from " + (hf / "model.safetensors").string() + " --config @ --out " +
          (dir / "i").string(),
      "tokenize --tokenizer char:@ --text hi",
      "prepare --data @ --out " + (dir / "p").string(),
      "train --data @ --out " + (dir / "t").string() + " --max_iters 1",
      "train --init_from @ --data " + (dir / "corpus.txt").string() + " --out " +
          (dir / "t").string() + " --max_iters 1",
      "plot @",
  };
  for (const char* special : {"fifo", "link_to_fifo", "folder"}) {
    for (std::string cmd : commands) {
      cmd.replace(cmd.find('@'), 1, (dir / special).string());
      Run r = attend_cmd(cmd, "timeout 60 ");
      INFO(std::string(special), ": attend ", cmd, "\n", r.out);
      CHECK(r.code == 1);
      CHECK(has(r, (dir / special).string()));
    }
  }
  fs::remove_all(dir);
}

// The class, writing: every file or folder a command writes, with a symlink to a victim
// file, a FIFO or a folder already in its place: the victim is never written through,
// nothing hangs, and a folder in the way is an error naming the path.
TEST_CASE("every command's outputs: never written through a link, no hang on a FIFO") {
  const fs::path dir = test::temp_dir("hostile_out");
  const fs::path run = test::trained_run(dir);
  const std::string val = (run / "data" / "val.bin").string();
  // Each command with its output replaced by @.
  const std::vector<std::string> commands = {
      "attention --checkpoint " + run.string() + " --prompt So --out @.html",
      "attention --checkpoint " + run.string() + " --prompt So --out @.json",
      "diagram --checkpoint " + run.string() + " --out @.svg",
      "heads --checkpoint " + run.string() + " --data " + val + " --batches 1 --csv @.csv",
      "export --checkpoint " + run.string() + " --out @",
      "export --checkpoint " + run.string() + " --format gguf --out @.gguf",
      "import --from " + (dir / "hf").string() + " --out @",
      "prepare --data " + (dir / "corpus.txt").string() + " --out @",
      "train --data " + (dir / "corpus.txt").string() +
          " --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --max_iters 1 --eval_iters 1 "
          "--out @",
  };
  REQUIRE(attend_cmd("export --checkpoint " + run.string() + " --out " + (dir / "hf").string())
              .code == 0);
  write_text(dir / "victim", "precious\n");
  int k = 0;
  for (const std::string& c : commands) {
    for (const char* kind : {"link", "fifo", "folder"}) {
      const fs::path target = dir / fmt_target(k++);
      std::string cmd = c;
      const size_t at = cmd.find('@'), end = cmd.find(' ', at);
      const std::string ext = cmd.substr(at + 1, end == std::string::npos ? end : end - at - 1);
      cmd.replace(at, 1, target.string());
      const fs::path out = target.string() + ext;  // the path the command writes
      if (std::string(kind) == "link") fs::create_symlink(dir / "victim", out);
      if (std::string(kind) == "fifo") REQUIRE(::mkfifo(out.c_str(), 0644) == 0);
      if (std::string(kind) == "folder") {
        fs::create_directories(out / "inside");
        write_text(out / "inside" / "mine.txt", "mine\n");
      }
      Run r = attend_cmd(cmd, "timeout 60 ");
      INFO(kind, ": attend ", cmd, "\n", r.out);
      CHECK(r.code != 124);  // no hang
      CHECK(r.code < 2);     // no crash, no internal error
      CHECK(bytes_of(dir / "victim") == "precious\n");
      if (std::string(kind) == "folder") CHECK(bytes_of(out / "inside" / "mine.txt") == "mine\n");
    }
  }
  fs::remove_all(dir);
}
