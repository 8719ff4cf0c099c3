// Hostile inputs, round 4 (issue #43): exports that deleted files they never wrote, imports
// that read a config.json otherwise than Hugging Face does, outputs in folders that do not
// exist yet or cannot be renamed, tokenizers compared by name instead of whole, and readers
// racing a trainer's pruning. Each case failed on 3ea3ec1.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "run_cmd.h"
#include "train/config.h"
#include "train/model_io.h"
#include "train/run_dir.h"

namespace fs = std::filesystem;
using namespace attend;
using test::attend_cmd;
using test::Run;

namespace {

const std::string kLlama = " --arch llama --n_kv_head 1";

bool has(const Run& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

void check_refused(const Run& r, const std::string& text) {
  CHECK(r.code == 1);
  CHECK_MESSAGE(has(r, text), r.out);
}

void check_ok(const Run& r) { CHECK_MESSAGE(r.code == 0, r.out); }

// A copy of an exported folder with config.json's `key` set to `value` (erased when null
// and `erase`).
fs::path with_config(const fs::path& from, const fs::path& to, const std::string& key,
                     const nlohmann::json& value, bool erase = false) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  nlohmann::json c = nlohmann::json::parse(std::ifstream(to / "config.json"));
  if (erase) {
    c.erase(key);
  } else {
    c[key] = value;
  }
  std::ofstream(to / "config.json") << c.dump(2);
  return to;
}

nn::GPTConfig imported_config(const fs::path& run) {
  return train::load_model(run.string()).model->config;
}

// A trained run of the shared fixture (extra train flags) exported to dir/hf.
fs::path export_of(const fs::path& dir, const std::string& extra) {
  const fs::path run = test::trained_run(dir, extra);
  const Run e = attend_cmd("export --checkpoint " + run.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  return dir / "hf";
}

}  // namespace

TEST_CASE("a Llama export refuses a folder holding files it does not write, and keeps them") {
  const fs::path dir = test::temp_dir("r4_owns");
  const fs::path hf = export_of(dir, kLlama);
  const std::string again =
      "export --checkpoint " + (dir / "run").string() + " --out " + hf.string();
  for (const char* mine : {"model.safetensors.bak", "model-notes.safetensors.txt",
                           "generation_config.json", "model-00001-of-00002.safetensors.old"}) {
    CAPTURE(mine);
    std::ofstream(hf / mine) << "mine";
    check_refused(attend_cmd(again), std::string("holds ") + mine + ", which export did not write");
    CHECK(fs::exists(hf / mine));
    fs::remove(hf / mine);
  }
  check_ok(attend_cmd(again));  // what it wrote itself it replaces
  fs::remove_all(dir);
}

TEST_CASE("import reads tie_word_embeddings as Hugging Face does: a boolean or null, else refused") {
  const fs::path dir = test::temp_dir("r4_tie");
  const fs::path hf = export_of(dir, kLlama + " --tie_embeddings false");
  for (const nlohmann::json& v : {nlohmann::json(1), nlohmann::json("true"), nlohmann::json(0)}) {
    CAPTURE(v.dump());
    const fs::path bad = with_config(hf, dir / "bad", "tie_word_embeddings", v);
    check_refused(attend_cmd("import --from " + bad.string() + " --out " + (dir / "ib").string()),
                  "tie_word_embeddings is " + v.dump() + "; expected true, false or null");
  }
  // null is LlamaConfig's default: untied, the stored lm_head used.
  const fs::path null_tie = with_config(hf, dir / "n", "tie_word_embeddings", nullptr);
  check_ok(attend_cmd("import --from " + null_tie.string() + " --out " + (dir / "in").string()));
  CHECK(!imported_config(dir / "in").tie_embeddings);
  fs::remove_all(dir);
}

TEST_CASE("import applies a sliding window only to Mistral, with MistralConfig's default") {
  const fs::path dir = test::temp_dir("r4_window");
  const fs::path hf = export_of(dir, kLlama);  // model_type llama
  // LlamaConfig has no sliding window: the key is ignored, with a warning.
  const fs::path w4 = with_config(hf, dir / "w4", "sliding_window", 4);
  const Run l = attend_cmd("import --from " + w4.string() + " --out " + (dir / "iw4").string());
  check_ok(l);
  CHECK_MESSAGE(has(l, "sliding_window 4 ignored: model_type llama"), l.out);
  CHECK(imported_config(dir / "iw4").sliding_window == 0);
  // Mistral: absent means 4096 (MistralConfig's default), null means none, a number itself.
  const fs::path m = with_config(hf, dir / "m", "model_type", "mistral");
  const fs::path absent = with_config(m, dir / "ma", "sliding_window", nullptr, true);
  check_ok(attend_cmd("import --from " + absent.string() + " --out " + (dir / "ima").string()));
  CHECK(imported_config(dir / "ima").sliding_window == 4096);
  const fs::path none = with_config(m, dir / "mn", "sliding_window", nullptr);
  check_ok(attend_cmd("import --from " + none.string() + " --out " + (dir / "imn").string()));
  CHECK(imported_config(dir / "imn").sliding_window == 0);
  const fs::path six = with_config(m, dir / "m6", "sliding_window", 6);
  check_ok(attend_cmd("import --from " + six.string() + " --out " + (dir / "im6").string()));
  CHECK(imported_config(dir / "im6").sliding_window == 6);
  fs::remove_all(dir);
}

TEST_CASE("import names an unsupported model_type, and takes hidden_act swish as SiLU") {
  const fs::path dir = test::temp_dir("r4_model_type");
  const fs::path hf = export_of(dir, kLlama);
  for (const nlohmann::json& t : {nlohmann::json("qwen2"), nlohmann::json("LLAMA"), nlohmann::json(5)}) {
    CAPTURE(t.dump());
    const fs::path q = with_config(hf, dir / "q", "model_type", t);
    check_refused(attend_cmd("import --from " + q.string() + " --out " + (dir / "iq").string()),
                  "model_type " + t.dump() + " is not supported (gpt2, llama, mistral)");
  }
  const fs::path swish = with_config(hf, dir / "s", "hidden_act", "swish");
  check_ok(attend_cmd("import --from " + swish.string() + " --out " + (dir / "is").string()));
  // A config whose sizes disagree with the stored tensors is refused by the shapes, before
  // any memory estimate.
  const fs::path wide = with_config(hf, dir / "w", "intermediate_size", 16777216);
  check_refused(attend_cmd("import --from " + wide.string() + " --out " + (dir / "iw").string()),
                "has shape");
  fs::remove_all(dir);
}

TEST_CASE("GPT-2's import reads the layer_norm_epsilon and n_inner its export writes") {
  const fs::path dir = test::temp_dir("r4_gpt2_eps");
  const fs::path hf = export_of(dir, " --norm_eps 1e-6 --hidden_dim 24");
  check_ok(attend_cmd("import --from " + hf.string() + " --out " + (dir / "back").string()));
  const nn::GPTConfig c = imported_config(dir / "back");
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.hidden_dim == 24);
  // And the two runs score the same text alike.
  const std::string text = (dir / "corpus.txt").string();
  CHECK(test::attend_stdout("eval --checkpoint " + (dir / "run").string() + " --data " + text) ==
        test::attend_stdout("eval --checkpoint " + (dir / "back").string() + " --data " + text));
  fs::remove_all(dir);
}

TEST_CASE("import, export and prepare create the missing parents of --out") {
  const fs::path dir = test::temp_dir("r4_parents");
  const fs::path hf = export_of(dir, kLlama);
  check_ok(attend_cmd("import --from " + hf.string() + " --out " + (dir / "a/b/llama").string()));
  CHECK(fs::exists(dir / "a/b/llama"));
  check_ok(attend_cmd("export --checkpoint " + (dir / "run").string() + " --out " +
                      (dir / "c/d/hf").string()));
  CHECK(fs::exists(dir / "c/d/hf/config.json"));
  check_ok(attend_cmd("prepare --data " + (dir / "corpus.txt").string() + " --out " +
                      (dir / "e/f/data").string()));
  CHECK(fs::exists(dir / "e/f/data/train.bin"));
  fs::remove_all(dir);
}

TEST_CASE("export into an existing empty folder that cannot be renamed (.) fills it in place") {
  const fs::path dir = test::temp_dir("r4_dot");
  test::trained_run(dir, kLlama);
  fs::create_directories(dir / "e");
  const Run r = test::shell("cd " + (dir / "e").string() + " && " + ATTEND_BIN +
                            " export --checkpoint ../run --out .");
  check_ok(r);
  CHECK(fs::exists(dir / "e" / "config.json"));
  CHECK(fs::exists(dir / "e" / "model.safetensors"));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir / "e"))
    entries += e.path().filename().string().find("staging") == std::string::npos ? 1 : 100;
  CHECK(entries < 100);  // no stage left behind
  // Once filled, the folder is an export's: a second one swaps it as usual.
  check_ok(attend_cmd("export --checkpoint " + (dir / "run").string() + " --out " +
                      (dir / "e").string()));
  fs::remove_all(dir);
}

TEST_CASE("--init_from compares the whole tokenizer with a prepared folder's, pattern included") {
  // Two byte-level BPE tokenizers with the same tokens and merges but different
  // pre-tokenizer patterns: eval refused the pair, --init_from took it.
  const fs::path dir = test::temp_dir("r4_init_tok");
  test::trained_run(dir, kLlama);
  // attend's own tokenizer.json of a BPE: trained on the corpus, then written with a pattern.
  check_ok(attend_cmd("prepare --data " + (dir / "corpus.txt").string() + " --out " +
                      (dir / "dA").string() + " --tokenizer bpe:300"));
  nlohmann::json tj = nlohmann::json::parse(std::ifstream(dir / "dA" / "tokenizer.json"));
  nlohmann::json split = tj;
  split["version"] = 2;
  split["pattern"] = "\\S+|\\s+";
  split["ignore_merges"] = false;
  fs::create_directories(dir / "tsplit");
  std::ofstream(dir / "tsplit" / "tokenizer.json") << split.dump();
  fs::copy(dir / "dA" / "encoder.json", dir / "tsplit" / "encoder.json");
  fs::copy(dir / "dA" / "vocab.bpe", dir / "tsplit" / "vocab.bpe");
  check_ok(attend_cmd("prepare --data " + (dir / "corpus.txt").string() + " --out " +
                      (dir / "dB").string() + " --tokenizer " + (dir / "tsplit").string()));
  check_ok(attend_cmd("train --data " + (dir / "dA").string() + " --out " + (dir / "rA").string() +
                      kLlama +
                      " --n_layer 1 --n_head 2 --n_embd 16 --block_size 8 --batch_size 2 "
                      "--max_iters 2 --eval_iters 1"));
  check_refused(attend_cmd("train --init_from " + (dir / "rA").string() + " --data " +
                           (dir / "dB").string() + " --out " + (dir / "ft").string() +
                           " --max_iters 2 --eval_iters 1"),
                "the same name, another tokenizer");
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint whose tokenizer pattern does not compile is refused naming the file and field") {
  const fs::path dir = test::temp_dir("r4_pattern");
  const fs::path r = test::trained_run(dir, " --tokenizer bpe:280");  // a pattern is a BPE's
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  d.tokenizer.pattern = "(\\p{L}+";
  io::save_checkpoint(dir / "p.h5", d);
  const std::string ck = (dir / "p.h5").string();
  for (const std::string& cmd :
       {"sample --max_new_tokens 2 --prompt S --checkpoint " + ck,
        "eval --data " + (dir / "corpus.txt").string() + " --checkpoint " + ck,
        "export --checkpoint " + ck + " --out " + (dir / "x").string(),
        "train --init_from " + ck + " --data " + (dir / "corpus.txt").string() + " --out " +
            (dir / "t").string()}) {
    CAPTURE(cmd);
    check_refused(attend_cmd(cmd), ck + ": /tokenizer@pattern: regex:");
  }
  fs::remove_all(dir);
}

TEST_CASE("summary refuses an empty preset and names what set the sequence length") {
  check_refused(attend_cmd("summary --preset ''"), "an empty name");
  const fs::path dir = test::temp_dir("r4_summary");
  const fs::path r = test::trained_run(dir, kLlama);
  io::CheckpointData d = train::newest_valid_checkpoint(r).data;
  for (auto& [name, v] : d.config)
    if (name == "block_size") v = int64_t{1} << 40;
  io::save_checkpoint(dir / "long.h5", d);
  const Run s = attend_cmd("summary --checkpoint " + (dir / "long.h5").string());
  CHECK(s.code == 1);
  const bool named_flags = has(s, "--seq") || has(s, "--batch");  // flags that were not given
  CHECK_MESSAGE(!named_flags, s.out);
  check_refused(attend_cmd("summary --preset gpt2 --hidden_dim 1099511627777"),
                "hidden_dim must be in [0, 2^40]");
  fs::remove_all(dir);
}

TEST_CASE("readers racing a trainer that prunes every step always find a checkpoint") {
  // train --checkpoint_interval 1 --keep_checkpoints 1: each step writes a checkpoint and
  // removes the previous one. Readers meanwhile must never find the folder empty of a
  // loadable checkpoint (12 of 24 did at 3ea3ec1).
  const fs::path dir = test::temp_dir("r4_race");
  test::trained_run(dir);  // writes dir/corpus.txt
  const fs::path r = dir / "race";
  const std::string train = std::string(ATTEND_BIN) + " train --data " +
                            (dir / "corpus.txt").string() + " --out " + r.string() +
                            " --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --batch_size 2"
                            " --max_iters 400 --checkpoint_interval 1 --keep_checkpoints 1"
                            " --eval_interval 1000 --eval_iters 1 > " +
                            (dir / "train.log").string() + " 2>&1";
  test::shell("(" + train + "; touch " + (dir / "done").string() + ") > /dev/null 2>&1 &", "");
  for (int k = 0; k < 300 && train::list_checkpoints(r).empty() && !fs::exists(dir / "done"); ++k)
    test::shell("sleep 0.05", "");
  int readers = 0, failed = 0;
  std::string first_failure;
  for (int k = 0; k < 40 && !fs::exists(dir / "done"); ++k) {
    const Run s = attend_cmd("sample --checkpoint " + r.string() + " --prompt S --max_new_tokens 1");
    ++readers;
    if (s.code != 0) {
      ++failed;
      if (first_failure.empty()) first_failure = s.out;
    }
  }
  for (int k = 0; k < 600 && !fs::exists(dir / "done"); ++k) test::shell("sleep 0.1", "");
  CAPTURE(first_failure);
  CHECK(readers >= 5);  // the race was run
  CHECK(failed == 0);
  fs::remove_all(dir);
}
