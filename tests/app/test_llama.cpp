// The attend program on Llamas: sampling past the context from a sliding window's rolling
// cache, finetuning a Llama, the 7B-class counts, what GPT-2's export cannot hold, and
// Hugging Face's layout in and out.
#include <filesystem>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "run_cmd.h"
#include "data/tokenizer.h"
#include "test_util.h"
#include "tensor/kernels.h"
#include "convert/gpt2_io.h"
#include "train/model_io.h"
#include "train/run_dir.h"

namespace fs = std::filesystem;
using attend::test::attend_cmd;
using attend::test::attend_stdout;
using attend::test::Run;
using attend::test::trained_run;

namespace {
const std::string kLlama = " --arch llama --n_kv_head 1";
}  // namespace

TEST_CASE("sample: a sliding-window Llama generates past block_size from its rolling cache") {
  // block_size 16, window 6: 60 new tokens go 61 positions past the prompt's start. The
  // cached decoding must equal recomputing each token from scratch; `sample` has one path
  // only for window models (the cache), so compare its text with greedy decoding done by
  // running the model on the growing sequence through the library.
  const fs::path dir = attend::test::temp_dir("llama_sample");
  const fs::path run = trained_run(dir, kLlama + " --sliding_window 6");
  const std::string text = attend_stdout("sample --checkpoint " + run.string() +
                                         " --prompt So --max_new_tokens 60 --temperature 0");
  REQUIRE(text.size() >= 2 + 60);
  attend::train::LoadedModel m = attend::train::load_model(run.string());
  std::vector<int32_t> ids = m.tokenizer->encode("So");
  attend::NoGradGuard no_grad;
  for (int i = 0; i < 60; ++i) {
    // The last min(len, 16) tokens, positions from 0: RoPE scores depend on distances only
    // and the window (6) times the layers (2) is inside 16, so this is the same next token.
    const size_t from = ids.size() > 16 ? ids.size() - 16 : 0;
    std::vector<double> v(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
    const attend::Tensor logits =
        m.model->forward(attend::tensor(v, {1, static_cast<int64_t>(v.size())}, attend::DType::I64))
            .logits;
    const std::vector<float> last =
        attend::kernel::contiguous(
            attend::kernel::select(attend::kernel::select(logits, 0, 0), 0, logits.size(1) - 1))
            .to_vector<float>();
    ids.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
  }
  CHECK(text == m.tokenizer->decode(ids) + "\n");
  fs::remove_all(dir);
}

TEST_CASE("--init_from a Llama checkpoint finetunes the same Llama") {
  const fs::path dir = attend::test::temp_dir("llama_init");
  const fs::path run = trained_run(dir, kLlama + " --tie_embeddings false");
  Run ft = attend_cmd("train --init_from " + run.string() + " --data " +
                      (dir / "corpus.txt").string() + " --out " + (dir / "ft").string() +
                      " --max_iters 2 --eval_iters 2 --batch_size 4");
  REQUIRE_MESSAGE(ft.code == 0, ft.out);
  const attend::train::LoadedModel a = attend::train::load_model(run.string()),
                                   b = attend::train::load_model((dir / "ft").string());
  CHECK(a.config.model == b.config.model);
  CHECK(b.config.model.arch == "llama");
  Run refused =
      attend_cmd("train --init_from " + run.string() + " --data " + (dir / "corpus.txt").string() +
                 " --out " + (dir / "ft2").string() + " --arch gpt2");
  CHECK(refused.code == 1);
  CHECK(refused.out.find("arch") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("summary prints the Llama 2 7B, Llama 3 8B and Mistral 7B totals exactly") {
  CHECK(attend_stdout("summary --preset llama2-7b").find("  total ") != std::string::npos);
  CHECK(attend_stdout("summary --preset llama2-7b").find("6,738,415,616") != std::string::npos);
  CHECK(attend_stdout("summary --preset llama3-8b").find("8,030,261,248") != std::string::npos);
  CHECK(attend_stdout("summary --preset mistral-7b").find("7,241,732,096") != std::string::npos);
}

TEST_CASE("GPT-2's exporter refuses a Llama, and a GPT-2 export refuses Llama-only flags") {
  const fs::path dir = attend::test::temp_dir("llama_export");
  fs::create_directories(dir / "l");
  fs::create_directories(dir / "g");
  const fs::path llama = trained_run(dir / "l", kLlama);
  // The library's GPT-2 writer cannot hold RMSNorm, SwiGLU or RoPE: refused, naming why.
  std::string why;
  try {
    const attend::train::LoadedModel m = attend::train::load_model(llama.string());
    attend::convert::export_gpt2({*m.model, *m.tokenizer, m.checkpoint.string()},
                                 dir / "gpt2_layout");
  } catch (const std::exception& e) {
    why = e.what();
  }
  CHECK(why.find("is a Llama (arch llama); this export writes GPT-2's layout only") !=
        std::string::npos);
  CHECK(!fs::exists(dir / "gpt2_layout"));
  // The command sends a GPT-2 checkpoint to that writer, which has one file of f32.
  const fs::path gpt = trained_run(dir / "g", "");
  Run d = attend_cmd("export --checkpoint " + gpt.string() + " --out " + (dir / "a").string() +
                     " --dtype bf16");
  CHECK(d.code == 1);
  CHECK(d.out.find("--dtype bf16: GPT-2's export writes f32") != std::string::npos);
  Run m = attend_cmd("export --checkpoint " + gpt.string() + " --out " + (dir / "b").string() +
                     " --max_shard_mb 5");
  CHECK(m.code == 1);
  CHECK(m.out.find("--max_shard_mb: GPT-2's export writes one file") != std::string::npos);
  CHECK(!fs::exists(dir / "a"));
  CHECK(!fs::exists(dir / "b"));
  fs::remove_all(dir);
}

TEST_CASE("a Llama exported in Hugging Face's layout imports back bit for bit, or sharded in bf16") {
  const fs::path dir = attend::test::temp_dir("llama_hf");
  const fs::path run = trained_run(dir, kLlama + " --sliding_window 6 --tie_embeddings false");
  Run e = attend_cmd("export --checkpoint " + run.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  Run i = attend_cmd("import --from " + (dir / "hf").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(i.code == 0, i.out);
  const std::string s = " --prompt So --max_new_tokens 30 --seed 4";
  CHECK(attend_stdout("sample --checkpoint " + run.string() + s) ==
        attend_stdout("sample --checkpoint " + (dir / "back").string() + s));
  const attend::train::LoadedModel a = attend::train::load_model(run.string()),
                                   b = attend::train::load_model((dir / "back").string());
  // The same model (config.json gives H explicitly where attend had Llama's rule).
  const attend::nn::GPTConfig &ca = a.config.model, &cb = b.config.model;
  CHECK(ca.mlp_hidden() == cb.mlp_hidden());
  CHECK(ca.sliding_window == cb.sliding_window);
  CHECK(ca.tie_embeddings == cb.tie_embeddings);
  CHECK(ca.rope_theta == cb.rope_theta);
  CHECK(ca.n_kv_head == cb.n_kv_head);
  const auto sa = a.model->state_dict(), sb = b.model->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t k = 0; k < sa.size(); ++k) CHECK(attend::test::bit_identical(sa[k].second, sb[k].second));
  Run e2 = attend_cmd("export --checkpoint " + run.string() + " --out " + (dir / "hf2").string() +
                      " --dtype bf16 --max_shard_mb 0");
  REQUIRE_MESSAGE(e2.code == 0, e2.out);
  Run i2 = attend_cmd("import --from " + (dir / "hf2").string() + " --out " + (dir / "back2").string());
  CHECK_MESSAGE(i2.code == 0, i2.out);
  fs::remove_all(dir);
}

namespace {

// attend's logits for `ids` (to dir/logits.f32) and its loss against `next`, as text.
std::string attend_logits(const fs::path& run, const std::vector<double>& ids,
                          const std::vector<double>& next, const fs::path& file) {
  attend::train::LoadedModel m = attend::train::load_model(run.string());
  m.model->keep_logits = true;
  const int64_t T = static_cast<int64_t>(ids.size());
  attend::nn::GPTOutput out =
      m.model->forward(attend::tensor(ids, {1, T}, attend::DType::I64),
                       attend::tensor(next, {1, T}, attend::DType::I64));
  const std::vector<float> v = out.logits.to_vector<float>();
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  std::ostringstream loss;
  loss.precision(9);
  loss << out.loss.item();
  return loss.str();
}

const std::vector<double> kIds = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4};
const std::vector<double> kNext = {7, 1, 0, 12, 5, 9, 2, 11, 4, 6};
const std::string kIdsArg = " 3,7,1,0,12,5,9,2,11,4 7,1,0,12,5,9,2,11,4,6 ";

bool have_torch() { return attend::test::shell("/usr/bin/python3 -c 'import torch, numpy'").code == 0; }
std::string llama_torch() {
  return "/usr/bin/python3 " + (fs::path(ATTEND_SOURCE_DIR) / "tests/app/llama_torch.py").string();
}

}  // namespace

TEST_CASE("a PyTorch Llama from Hugging Face's formulas loads the export strictly and agrees") {
  if (!have_torch()) ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  // tests/app/llama_torch.py: torch.nn modules named as Hugging Face names them, rotate_half
  // RoPE, repeat_kv, RMSNorm, SwiGLU, Mistral's window; load_state_dict(strict=True).
  const std::vector<std::pair<std::string, std::string>> models = {
      {"MHA", " --arch llama"},
      {"GQA, untied head, theta 5e5", kLlama + " --tie_embeddings false --rope_theta 500000"},
      {"sliding window 4 (Mistral)", " --arch llama --n_kv_head 2 --sliding_window 4"}};
  for (const auto& [what, flags] : models) {
    INFO(what);
    const fs::path dir = attend::test::temp_dir("llama_torch");
    const fs::path run = trained_run(dir, flags);
    Run e = attend_cmd("export --checkpoint " + run.string() + " --out " + (dir / "hf").string());
    REQUIRE_MESSAGE(e.code == 0, e.out);
    const std::string loss = attend_logits(run, kIds, kNext, dir / "logits.f32");
    Run py = attend::test::shell(llama_torch() + " check " + (dir / "hf").string() + kIdsArg +
                                 (dir / "logits.f32").string() + " " + loss);
    CAPTURE(py.out);
    CHECK(py.code == 0);
    CHECK(py.out.find("torch ok") != std::string::npos);
    MESSAGE(py.out);
    fs::remove_all(dir);
  }
}

TEST_CASE("weights PyTorch writes (BF16, two shards and an index) import, score and export the same") {
  if (!have_torch()) ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  // Random weights of full size (std 0.2, norms around 1) make every part matter: without
  // RoPE, or with the other pair order, the logits move by far more than the tolerance.
  for (const std::string window : {"0", "4"}) {
    INFO("sliding window " << window);
    const fs::path dir = attend::test::temp_dir("llama_from_torch");
    std::ofstream(dir / "corpus.txt") << "So shaken as we are, so wan with care.\n";
    const std::string tok = "char:" + (dir / "corpus.txt").string();
    const int64_t V = attend::data::tokenizer_from_arg(tok)->vocab_size();
    Run w = attend::test::shell(llama_torch() + " write " + (dir / "hf").string() + " " +
                                std::to_string(V) + " " + window);
    REQUIRE_MESSAGE(w.code == 0, w.out);
    Run i = attend_cmd("import --from " + (dir / "hf").string() + " --tokenizer " + tok +
                       " --out " + (dir / "run").string());
    REQUIRE_MESSAGE(i.code == 0, i.out);
    const attend::train::LoadedModel m = attend::train::load_model((dir / "run").string());
    CHECK(m.config.model.n_kv_head == 2);
    CHECK(m.config.model.mlp_hidden() == 72);
    CHECK(m.config.model.rope_theta == 500000.0);
    CHECK(m.config.model.sliding_window == std::stoll(window));
    const std::string loss = attend_logits(dir / "run", kIds, kNext, dir / "logits.f32");
    // PyTorch scores its own files, then attend's f32 export of what attend imported.
    Run e = attend_cmd("export --checkpoint " + (dir / "run").string() + " --out " +
                       (dir / "again").string());
    REQUIRE_MESSAGE(e.code == 0, e.out);
    for (const char* folder : {"hf", "again"}) {
      Run py = attend::test::shell(llama_torch() + " check " + (dir / folder).string() +
                                   kIdsArg + (dir / "logits.f32").string() + " " + loss);
      CAPTURE(folder);
      CAPTURE(py.out);
      CHECK(py.code == 0);
      CHECK(py.out.find("torch ok") != std::string::npos);
      MESSAGE(py.out);
    }
    fs::remove_all(dir);
  }
}

TEST_CASE("a Llama exported for llama2.c reads back in an independent reader and scores as eval") {
  if (attend::test::shell("/usr/bin/python3 -c 'import numpy'").code != 0)
    ATTEND_SKIP("python3 with numpy not found (apt-get install python3-numpy)");
  // Trained until it knows its line (150 steps), so attention and its positions decide
  // the loss: a tensor out of place, or RoPE's other pair order, moves it far more than
  // eval's six decimals.
  for (const std::string& flags : {kLlama, std::string(" --arch llama --tie_embeddings false")}) {
    INFO(flags);
    const fs::path dir = attend::test::temp_dir("llama2c");
    std::string text;
    for (int i = 0; i < 200; ++i) text += "So shaken as we are, so wan with care.\n";
    std::ofstream(dir / "corpus.txt") << text;
    const fs::path run = dir / "run";
    Run t = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --out " + run.string() +
                       " --n_layer 2 --n_head 2 --n_embd 16 --block_size 16 --batch_size 8"
                       " --eval_iters 2 --max_iters 150 --learning_rate 1e-2" + flags);
    REQUIRE_MESSAGE(t.code == 0, t.out);
    Run e = attend_cmd("export --format llama2c --checkpoint " + run.string() + " --out " +
                       (dir / "l2c").string());
    REQUIRE_MESSAGE(e.code == 0, e.out);
    std::ofstream(dir / "text.txt") << text.substr(0, 40 * 6);
    const std::string ev =
        attend_stdout("eval --checkpoint " + run.string() + " --data " + (dir / "text.txt").string());
    REQUIRE(ev.rfind("loss ", 0) == 0);
    const std::string loss = ev.substr(5, ev.find('\n') - 5);
    Run py = attend::test::shell(
        "/usr/bin/python3 " + (fs::path(ATTEND_SOURCE_DIR) / "tests/app/llama2c_numpy.py").string() +
        " " + (dir / "l2c").string() + " " + (dir / "text.txt").string() + " " + loss);
    CAPTURE(py.out);
    CHECK(py.code == 0);
    CHECK(py.out.find("llama2c ok") != std::string::npos);
    MESSAGE(py.out);
    fs::remove_all(dir);
  }
}

TEST_CASE("llama2.c's export refuses what run.c would run differently, naming the value") {
  const fs::path dir = attend::test::temp_dir("llama2c_refuse");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --arch llama --rope_theta 500000", "has rope_theta 500000; llama2.c's run.c fixes"},
      {" --arch llama --norm_eps 1e-6", "has norm_eps 1e-06; llama2.c's run.c fixes"},
      {" --arch llama --sliding_window 4", "has sliding_window 4 (block_size 16)"},
      {"", "is a GPT-2 model (arch gpt2); llama2.c runs Llamas only"}};
  for (size_t k = 0; k < cases.size(); ++k) {
    const fs::path d = dir / std::to_string(k);
    fs::create_directories(d);
    const fs::path run = trained_run(d, cases[k].first);
    Run e = attend_cmd("export --format llama2c --checkpoint " + run.string() + " --out " +
                       (d / "l2c").string());
    CAPTURE(e.out);
    CHECK(e.code == 1);
    CHECK(e.out.find(cases[k].second) != std::string::npos);
    CHECK(!fs::exists(d / "l2c"));
  }
  Run dt = attend_cmd("export --format llama2c --dtype bf16 --checkpoint " + (dir / "0" / "run").string() +
                      " --out " + (dir / "x").string());
  CHECK(dt.code == 1);
  CHECK(dt.out.find("llama2.c's model.bin is one file of f32") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a BPE model's export carries Hugging Face's tokenizer.json, which import and --tokenizer hf: read back") {
  const fs::path dir = attend::test::temp_dir("hf_tok_cli");
  for (const std::string arch : {"llama", "gpt2"}) {
    CAPTURE(arch);
    const fs::path sub = dir / arch;
    fs::create_directories(sub);
    const fs::path run = trained_run(sub, (arch == "llama" ? kLlama : std::string()) + " --tokenizer bpe:300");
    Run e = attend_cmd("export --checkpoint " + run.string() + " --out " + (sub / "hf").string());
    REQUIRE_MESSAGE(e.code == 0, e.out);
    // GPT-2's folder has all three files GPT2TokenizerFast reads; a Llama's has
    // tokenizer.json and a tokenizer_config.json naming PreTrainedTokenizerFast.
    const std::vector<std::string> files =
        arch == "gpt2" ? std::vector<std::string>{"tokenizer.json", "vocab.json", "merges.txt"}
                       : std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"};
    for (const std::string& f : files) CHECK(fs::exists(sub / "hf" / f));
    if (arch == "llama")
      CHECK(attend::read_file(sub / "hf" / "tokenizer_config.json").find("PreTrainedTokenizerFast") !=
            std::string::npos);
    const std::string json = attend::read_file(sub / "hf" / "tokenizer.json");
    CHECK(json.find("\"type\": \"BPE\"") != std::string::npos);
    CHECK(json.find("attend-tokenizer") == std::string::npos);
    Run i = attend_cmd("import --from " + (sub / "hf").string() + " --out " + (sub / "back").string());
    REQUIRE_MESSAGE(i.code == 0, i.out);
    const auto a = attend::train::load_model(run.string()), b = attend::train::load_model((sub / "back").string());
    CHECK(attend::data::tokenizer_hash(a.tokenizer->spec()) == attend::data::tokenizer_hash(b.tokenizer->spec()));
    const std::string text = " --text 'So shaken as we are, so wan'";
    std::string want;
    for (int32_t id : a.tokenizer->encode("So shaken as we are, so wan"))
      want.append(want.empty() ? "" : " ").append(std::to_string(id));
    want += "\n";
    CHECK(attend_stdout("tokenize --tokenizer hf:" + (sub / "hf" / "tokenizer.json").string() + text) == want);
    CHECK(attend_stdout("tokenize --tokenizer hf:" + (sub / "hf").string() + text) == want);
    // A merges.txt that no longer says what tokenizer.json says is refused, naming it.
    if (arch == "llama") continue;
    std::ofstream(sub / "hf" / "merges.txt", std::ios::app) << "S o\n";
    Run bad = attend_cmd("import --from " + (sub / "hf").string() + " --out " + (sub / "bad").string());
    CHECK(bad.code != 0);
    CHECK(bad.out.find("merges.txt") != std::string::npos);
  }
  fs::remove_all(dir);
}
