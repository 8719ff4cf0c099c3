// Finetuning from the command line: LoRA (nn/lora.h): `train --init_from X --lora_rank R`
// trains the adapters alone, resumes exactly, and `export --merge` writes the merged model;
// instruction data (data/instructions.h): `prepare --format alpaca`, scored on responses.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <sstream>

#include "cli_fixture.h"
#include "convert/peft_io.h"
#include "data/instructions.h"
#include "data/token_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "train/model_io.h"
#include "train/run_dir.h"

using namespace attend;
using namespace attend::test;
namespace fs = std::filesystem;

namespace {

std::map<std::string, Tensor> by_name(const nn::NamedTensors& v) { return {v.begin(), v.end()}; }

// A Llama trained 4 steps: the base the adapters go on.
fs::path base_run(const fs::path& dir) {
  return tiny_run(make_corpus(dir), dir / "base", 4, " --arch llama --tie_embeddings false");
}

std::string lora_train(const fs::path& dir, const fs::path& base) {
  // Dropout on the adapters, warmup and cosine, gradient accumulation: what could drift.
  return "train --data " + (dir / "corpus.txt").string() + " --init_from " + base.string() +
         " --lora_rank 4 --lora_alpha 8 --lora_targets q,v,o,down --lora_dropout 0.1"
         " --batch_size 4 --eval_iters 2 --learning_rate 1e-2 --warmup_iters 2"
         " --lr_decay_iters 8 --gradient_accumulation_steps 2 --eval_interval 4"
         " --log_interval 1 --checkpoint_interval 100";
}

// A base and lora_train's adapters on it, `iters` steps, in dir/L.
fs::path lora_run(const fs::path& dir, int iters) {
  const fs::path base = base_run(dir);
  const Run t = attend_cmd(lora_train(dir, base) + " --max_iters " + std::to_string(iters) +
                           " --out " + (dir / "L").string());
  REQUIRE_MESSAGE(t.code == 0, t.out);
  return dir / "L";
}

}  // namespace

TEST_CASE("train --lora_rank: only the adapters move, and resume is exact") {
  const fs::path dir = temp_dir("lora_train");
  const fs::path base = base_run(dir);
  const Run a = attend_cmd(lora_train(dir, base) + " --max_iters 8 --out " + (dir / "A").string());
  REQUIRE_MESSAGE(a.code == 0, a.out);
  CHECK(a.out.find("LoRA rank 4 on q,v,o,down") != std::string::npos);
  // summary names the adapters and counts them on a line of their own
  const Run sm = attend_cmd("summary --checkpoint " + (dir / "A").string());
  REQUIRE_MESSAGE(sm.code == 0, sm.out);
  CHECK(sm.out.find("lora_rank 4, lora_alpha 8, lora_targets q,v,o,down") != std::string::npos);
  CHECK(sm.out.find("LoRA adapters, R 4 (they train; the rest is frozen)") != std::string::npos);
  const Run b1 = attend_cmd(lora_train(dir, base) + " --max_iters 3 --out " + (dir / "B").string());
  REQUIRE_MESSAGE(b1.code == 0, b1.out);
  const Run b2 = attend_cmd("train --resume " + (dir / "B").string() + " --max_iters 8");
  REQUIRE_MESSAGE(b2.code == 0, b2.out);

  const io::CheckpointData ca = io::load_checkpoint(dir / "A" / "ckpt_00000008.h5");
  const io::CheckpointData cb = io::load_checkpoint(dir / "B" / "ckpt_00000008.h5");
  const io::CheckpointData c0 = train::newest_valid_checkpoint(base).data;
  // The file holds the adapters alone (--save_base false, the default) ...
  for (const auto& [name, t] : ca.model) CHECK(name.find(".lora_") != std::string::npos);
  // ... and reads back as the whole model, its base from --init_from's file
  const io::CheckpointData full = train::load_checkpoint_or_run((dir / "A").string()).data;
  CHECK(full.model.size() > ca.model.size());
  CHECK(models_differing(dir / "A", dir / "B") == 0);
  REQUIRE(ca.optimizer.tensors.size() == cb.optimizer.tensors.size());
  for (size_t i = 0; i < ca.optimizer.tensors.size(); ++i) {
    INFO(ca.optimizer.tensors[i].first);
    CHECK(test::bit_identical(ca.optimizer.tensors[i].second, cb.optimizer.tensors[i].second));
    // optimizer state for the adapters only: 2 layers x 4 targets x (A, B) x (m, v)
    CHECK(ca.optimizer.tensors[i].first.find(".lora_") != std::string::npos);
  }
  CHECK(ca.optimizer.tensors.size() == 2 * 4 * 2 * 2);
  // The base's tensors are the base checkpoint's, bit for bit; every adapter's B has moved.
  const auto base_w = by_name(c0.model);
  int adapters = 0;
  for (const auto& [name, t] : full.model) {
    INFO(name);
    if (name.find(".lora_") == std::string::npos) {
      CHECK(test::bit_identical(t, base_w.at(name)));
    } else if (name.back() == 'B') {
      ++adapters;
      double s = 0;
      for (const float v : t.to_vector<float>()) s += std::abs(v);
      CHECK(s > 0);
    }
  }
  CHECK(adapters == 8);
  fs::remove_all(dir);
}

TEST_CASE("export of a LoRA checkpoint: --merge writes the merged model, plain refuses") {
  const fs::path dir = temp_dir("lora_export");
  const std::string ck = lora_run(dir, 3).string();
  const fs::path base = dir / "base";
  const Run plain =
      attend_cmd("export --checkpoint " + ck + " --format gguf --out " + (dir / "x.gguf").string());
  CHECK(plain.code != 0);
  CHECK(plain.out.find("holds LoRA adapters (rank 4 on q,v,o,down); --merge") != std::string::npos);
  CHECK(!fs::exists(dir / "x.gguf"));
  const Run no_adapters =
      attend_cmd("export --merge --checkpoint " + base.string() + " --out " + (dir / "y").string());
  CHECK(no_adapters.code != 0);
  CHECK(no_adapters.out.find("has no LoRA adapters to merge") != std::string::npos);

  // Merged to GGUF (F32), imported back: the merged weights bit for bit.
  const Run m = attend_cmd("export --merge --checkpoint " + ck + " --format gguf --out " +
                           (dir / "m.gguf").string());
  REQUIRE_MESSAGE(m.code == 0, m.out);
  const Run i = attend_cmd("import --from " + (dir / "m.gguf").string() + " --out " +
                           (dir / "back").string());
  REQUIRE_MESSAGE(i.code == 0, i.out);
  const train::LoadedModel lora = train::load_model(ck),
                           back = train::load_model((dir / "back").string());
  const auto want = by_name(nn::merged_state(*lora.model));
  const auto got = back.model->named_parameters();
  CHECK(back.config.model.lora_rank == 0);
  REQUIRE(got.size() == lora.model->named_parameters().size() - 2 * 4 * 2);
  for (const auto& [name, w] : got) {
    INFO(name);
    CHECK(test::bit_identical(w, want.at(name)));
  }
  // The Hugging Face layout too.
  const Run hf =
      attend_cmd("export --merge --checkpoint " + ck + " --out " + (dir / "hf").string());
  CHECK_MESSAGE(hf.code == 0, hf.out);
  // The views read weights too (W_o's slices per head): they see the merged model, so what
  // each head adds still sums to the attention's output (with an adapter on o).
  const Run v = attend_cmd("attention --checkpoint " + ck + " --prompt 'Now is the' --layer 0" +
                           " --position 4");
  REQUIRE_MESSAGE(v.code == 0, v.out);
  const size_t at = v.out.find("largest difference between the two: ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(v.out.substr(at + 36)) < 1e-5);
  // sample reads a LoRA checkpoint as it is (adapters applied).
  const Run s = attend_cmd("sample --checkpoint " + ck + " --max_new_tokens 8 --temperature 0");
  CHECK_MESSAGE(s.code == 0, s.out);
  fs::remove_all(dir);
}

TEST_CASE("--init_from a LoRA checkpoint with new adapters is refused: merge first") {
  const fs::path dir = temp_dir("lora_twice");
  lora_run(dir, 2);
  const fs::path base = dir / "base";
  const Run again = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                               (dir / "L").string() + " --lora_rank 2 --max_iters 1 --out " +
                               (dir / "L2").string());
  CHECK(again.code != 0);
  CHECK(again.out.find("has LoRA adapters (rank 4); export it --merge first") != std::string::npos);
  // LoRA's other settings without --lora_rank would be silently unused: refused.
  const Run alone = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                               base.string() + " --lora_alpha 32 --max_iters 1 --out " +
                               (dir / "L3").string());
  CHECK(alone.code != 0);
  CHECK(alone.out.find("--lora_alpha: LoRA's settings go with --lora_rank") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("prepare --format alpaca: the instructions, and eval scores the responses only") {
  const fs::path gpt2 = test::shared_data("gpt2/encoder.json").parent_path();
  const fs::path inst = test::shared_data("instructions/instruction-data.json");
  if (gpt2.empty() || inst.empty()) ATTEND_SKIP("../shared/data/gpt2 or instructions/ not found");
  const std::string env = "ATTEND_GPT2_DIR=" + gpt2.string() + " ";
  const fs::path dir = temp_dir("alpaca");
  const Run p = attend_cmd("prepare --data " + inst.string() + " --format alpaca --template " +
                               "alpaca --tokenizer gpt2 --out " + (dir / "data").string(),
                           env);
  REQUIRE_MESSAGE(p.code == 0, p.out);
  CHECK(p.out.find("990 train and 110 val examples (template alpaca") != std::string::npos);
  // A small GPT-2-vocabulary model, trained on the examples, then LoRA on top.
  const std::string model =
      " --n_layer 2 --n_head 2 --n_embd 32 --block_size 64 --batch_size 4"
      " --eval_iters 2 --eval_interval 5 --log_interval 5";
  const Run b = attend_cmd("train --data " + (dir / "data").string() + " --out " +
                           (dir / "base").string() + model + " --max_iters 5");
  REQUIRE_MESSAGE(b.code == 0, b.out);
  CHECK(b.out.find("have a prompt longer than block_size 64 and are left out") !=
        std::string::npos);
  const Run l = attend_cmd("train --data " + (dir / "data").string() + " --init_from " +
                           (dir / "base").string() + " --out " + (dir / "lora").string() +
                           " --lora_rank 4 --max_iters 5 --eval_iters 2 --eval_interval 5");
  REQUIRE_MESSAGE(l.code == 0, l.out);
  // eval counts each usable val example's scored targets: min(L, T + 1) - P.
  const data::TokenFile val(dir / "data" / "val.bin");
  int64_t want = 0;
  for (const data::ExampleSpan& e :
       data::read_examples_file(dir / "data" / "val.examples", val.size()))
    if (e.prompt <= 64) want += std::min<int64_t>(e.length, 65) - e.prompt;
  const Run ev = attend_cmd("eval --checkpoint " + (dir / "lora").string() + " --data " +
                            (dir / "data" / "val.bin").string());
  REQUIRE_MESSAGE(ev.code == 0, ev.out);
  CHECK(ev.out.find("tokens " + std::to_string(want) + "\n") != std::string::npos);
  // chat --prompt: the template's prompt continued greedily to the end-of-text token, which
  // ends the reply unprinted: the same tokens sample draws from that prompt.
  const Run ch = attend_cmd("chat --checkpoint " + (dir / "lora").string() +
                            " --prompt 'Name a colour.' --max_new_tokens 40");
  REQUIRE_MESSAGE(ch.code == 0, ch.out);
  const std::string reply = test::attend_stdout("chat --checkpoint " + (dir / "lora").string() +
                                                " --prompt 'Name a colour.' --max_new_tokens 40");
  const std::string prompt = data::instruction_prompt("alpaca", "Name a colour.");
  std::ofstream(dir / "prompt.txt", std::ios::binary) << prompt;
  const std::string sampled =
      test::attend_stdout("sample --checkpoint " + (dir / "lora").string() + " --prompt_file " +
                          (dir / "prompt.txt").string() + " --temperature 0 --max_new_tokens 41");
  REQUIRE(!reply.empty());
  CHECK(reply.find("<|endoftext|>") == std::string::npos);
  CHECK(sampled.rfind(prompt + reply.substr(0, reply.size() - 1), 0) == 0);
  // On a terminal, in the line editor: the instruction typed with a slip mended (Ctrl-A,
  // Right, the missing letter), then recalled with Up, then Ctrl-D: both turns give the
  // reply --prompt gave, and the chat ends cleanly.
  const Run term = attend_on_terminal("chat --checkpoint " + (dir / "lora").string() +
                                          " --max_new_tokens 40",
                                      {"Nme a colour.\x01\x1b[Ca\r", "\x1b[A\r", "\x04"});
  std::string shown;  // what the terminal showed, without its carriage returns
  for (const char ch : term.out)
    if (ch != '\r') shown += ch;
  INFO(term.out);
  CHECK(term.code == 0);
  CHECK(shown.find("> Name a colour.\x1b[0K\x1b[16C\n") != std::string::npos);
  const std::string text = reply.substr(0, reply.size() - 1);
  const size_t first = shown.find(text);
  CHECK(first != std::string::npos);
  CHECK(shown.find(text, first + text.size()) != std::string::npos);
  // Ctrl-C with a line typed drops it; at the empty prompt it ends the chat as SIGINT does.
  const Run stop = attend_on_terminal("chat --checkpoint " + (dir / "lora").string(),
                                      {"half a line\x03", "\x03"});
  CHECK(stop.code == 128 + SIGINT);
  // two ^C drawn: the first dropped the line (the program read on), the second ended it
  CHECK(stop.out.find("half a line") != std::string::npos);
  const size_t c1 = stop.out.find("^C\r\n");
  CHECK((c1 != std::string::npos && stop.out.find("^C\r\n", c1 + 1) != std::string::npos));
  // Tokenizers without an end-of-text token, and templates attend does not know, refused.
  const Run c = attend_cmd("prepare --data " + inst.string() + " --format alpaca --tokenizer char" +
                           " --out " + (dir / "c").string());
  CHECK(c.code != 0);
  CHECK(c.out.find("--tokenizer char has no end-of-text token") != std::string::npos);
  const Run t = attend_cmd("prepare --data " + inst.string() + " --format alpaca --template nope" +
                               " --tokenizer gpt2 --out " + (dir / "t").string(),
                           env);
  CHECK(t.code != 0);
  CHECK(t.out.find("nope") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE(
    "export --format peft: a PyTorch LoRA from PEFT's formula gives the same loss and gradients") {
  if (test::shell("/usr/bin/python3 -c 'import torch, numpy'").code != 0)
    ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  const fs::path dir = temp_dir("lora_peft");
  const fs::path base = base_run(dir);
  // Every Llama target and the head (q and k need RoPE's row order), no dropout, B moved off zero.
  const Run t = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                           base.string() + " --out " + (dir / "L").string() +
                           " --lora_rank 3 --lora_alpha 5 --lora_targets q,k,v,o,gate,up,down,head"
                           " --batch_size 4 --eval_iters 1 --max_iters 4 --learning_rate 3e-2");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  const Run hf =
      attend_cmd("export --checkpoint " + base.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(hf.code == 0, hf.out);
  const Run pe = attend_cmd("export --checkpoint " + (dir / "L").string() +
                            " --format peft --out " + (dir / "peft").string());
  REQUIRE_MESSAGE(pe.code == 0, pe.out);
  // attend's loss and adapter gradients in f64, then the gradients through the same export.
  const std::vector<int64_t> ids = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4},
                             next = {7, 1, 0, 12, 5, 9, 2, 11, 4, 6};
  Tensor x = empty({1, 10}, DType::I64), y = empty({1, 10}, DType::I64);
  std::copy(ids.begin(), ids.end(), x.data<int64_t>());
  std::copy(next.begin(), next.end(), y.data<int64_t>());
  train::LoadedModel m = train::load_model((dir / "L").string());
  m.model->to(DType::F64);
  Tensor loss = m.model->forward(x, y).loss;
  loss.backward();
  const fs::path grads = export_adapter_grads(*m.model, dir / "L", dir / "grads", 2 * 7 * 2 + 2);
  std::ostringstream l;
  l.precision(17);
  l << loss.item();
  const Run py = test::shell("/usr/bin/python3 " + std::string(ATTEND_SOURCE_DIR) +
                             "/tests/app/peft_torch.py check " + (dir / "hf").string() + " " +
                             (dir / "peft").string() + " " +
                             grads.string() +
                             " 3,7,1,0,12,5,9,2,11,4 7,1,0,12,5,9,2,11,4,6 " + l.str());
  MESSAGE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("torch ok") != std::string::npos);
  // And back in: the Hugging Face base with the PEFT adapter is the LoRA checkpoint, bit for bit.
  const Run back = attend_cmd("import --from " + (dir / "hf").string() + " --adapter " +
                              (dir / "peft").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(back.code == 0, back.out);
  const train::LoadedModel b = train::load_model((dir / "back").string());
  const train::LoadedModel lm = train::load_model((dir / "L").string());
  CHECK(b.config.model.lora_rank == 3);
  CHECK(b.config.model.lora_alpha == 5.0);
  CHECK(b.config.model.lora_targets == "q,k,v,o,gate,up,down,head");
  const auto want = by_name(lm.model->named_parameters());
  const auto have = b.model->named_parameters();
  REQUIRE(have.size() == want.size());
  for (const auto& [name, t] : have) {
    INFO(name);
    CHECK(test::bit_identical(t, want.at(name)));
  }
  fs::remove_all(dir);
}

TEST_CASE("import --adapter refuses what attend's LoRA is not, naming the file and field") {
  const fs::path dir = temp_dir("lora_peft_bad");
  const fs::path base = base_run(dir);
  const Run t =
      attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " + base.string() +
                 " --out " + (dir / "L").string() + " --lora_rank 2 --max_iters 1 --eval_iters 1");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  REQUIRE(
      attend_cmd("export --checkpoint " + base.string() + " --out " + (dir / "hf").string()).code ==
      0);
  REQUIRE(attend_cmd("export --checkpoint " + (dir / "L").string() + " --format peft --out " +
                     (dir / "peft").string())
              .code == 0);
  const std::string good = file_bytes(dir / "peft" / "adapter_config.json");
  struct Row {
    std::string from, to, error;
  };
  const std::vector<Row> rows = {
      {"\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"", "peft_type is \"IA3\""},
      {"\"bias\": \"none\"", "\"bias\": \"all\"", "bias is \"all\""},
      {"\"bias\": \"none\"", "\"bias\": \"none\", \"use_dora\": true", "use_dora is true"},
      {"\"r\": 2", "\"r\": 4", "has rank 2 but adapter_config.json says 4"},
      {"\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]", "modules_to_save"},
  };
  for (const Row& r : rows) {
    INFO(r.to);
    std::string bad = good;
    REQUIRE(bad.find(r.from) != std::string::npos);
    bad.replace(bad.find(r.from), r.from.size(), r.to);
    std::ofstream(dir / "peft" / "adapter_config.json", std::ios::binary) << bad;
    const Run i = attend_cmd("import --from " + (dir / "hf").string() + " --adapter " +
                             (dir / "peft").string() + " --out " + (dir / "x").string());
    CHECK(i.code != 0);
    CHECK(i.out.find(r.error) != std::string::npos);
    CHECK(i.out.find("adapter_config.json") != std::string::npos);
    CHECK(!fs::exists(dir / "x"));
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "export --format peft of GPT-2: q and v on the fused c_attn become one adapter of rank 2R") {
  const fs::path dir = temp_dir("lora_peft_gpt2");
  const fs::path corpus = make_corpus(dir);
  // MHA: GPT-2's Hugging Face layout has one key/value head per query head.
  const Run b0 =
      attend_cmd("train --data " + corpus.string() + " --out " + (dir / "base").string() +
                 " --n_layer 2 --n_head 2 --n_embd 16 --block_size 16 --batch_size 4" +
                 " --eval_iters 1 --max_iters 2");
  REQUIRE_MESSAGE(b0.code == 0, b0.out);
  const fs::path base = dir / "base";
  const Run t =
      attend_cmd("train --data " + corpus.string() + " --init_from " + base.string() + " --out " +
                 (dir / "L").string() + " --lora_rank 2 --lora_alpha 4" +
                 " --lora_targets q,v,proj --max_iters 2 --eval_iters 1 --learning_rate 3e-2");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  const Run pe = attend_cmd("export --checkpoint " + (dir / "L").string() +
                            " --format peft --out " + (dir / "peft").string());
  REQUIRE_MESSAGE(pe.code == 0, pe.out);
  const nlohmann::json cfg =
      nlohmann::json::parse(file_bytes(dir / "peft" / "adapter_config.json"));
  CHECK(cfg["fan_in_fan_out"] == true);
  CHECK(cfg["target_modules"] == nlohmann::json({"attn.c_attn", "mlp.c_proj"}));
  CHECK(cfg["rank_pattern"]["h.0.attn.c_attn"] == 4);
  CHECK(cfg["alpha_pattern"]["h.0.attn.c_attn"] == 8.0);
  CHECK(cfg["base_model_name_or_path"] ==
        fs::absolute(base / "ckpt_00000002.h5").lexically_normal().string());
  // The combined adapter's B A is the two adapters' B A in their rows, nothing elsewhere.
  const train::LoadedModel m = train::load_model((dir / "L").string());
  const io::SafetensorsFile f(dir / "peft" / "adapter_model.safetensors");
  const Tensor A = f.read("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
  const Tensor B = f.read("base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
  REQUIRE(A.shape() == Shape{4, 16});
  REQUIRE(B.shape() == Shape{3 * 16, 4});
  const Tensor ba = kernel::matmul(B, A);  // (rows, C)
  std::map<std::string, Tensor> p;
  for (const auto& [n, v] : m.model->named_parameters()) p[n] = v;
  const Tensor q = kernel::matmul(p.at("transformer.h.0.attn.c_attn.lora_q.B"),
                                  p.at("transformer.h.0.attn.c_attn.lora_q.A"));
  const Tensor v = kernel::matmul(p.at("transformer.h.0.attn.c_attn.lora_v.B"),
                                  p.at("transformer.h.0.attn.c_attn.lora_v.A"));
  const auto got = ba.to_vector<float>(), wq = q.to_vector<float>(), wv = v.to_vector<float>();
  double worst = 0;
  for (int64_t r = 0; r < 48; ++r)  // rows: q 0-15, k 16-31 (no adapter), v 32-47
    for (int64_t col = 0; col < 16; ++col) {
      const double want = r < 16 ? wq[r * 16 + col] : r < 32 ? 0.0 : wv[(r - 32) * 16 + col];
      worst = std::max(worst, std::abs(got[r * 16 + col] - want));
    }
  CHECK(worst < 1e-6);
  // Back in on GPT-2's Hugging Face base: c_attn's adapter becomes q, k and v adapters of rank
  // 2R sharing its A; the update is the same (to f32 rounding of the products).
  REQUIRE(
      attend_cmd("export --checkpoint " + base.string() + " --out " + (dir / "hf").string()).code ==
      0);
  const Run back = attend_cmd("import --from " + (dir / "hf").string() + " --adapter " +
                              (dir / "peft").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(back.code == 0, back.out);
  const train::LoadedModel b = train::load_model((dir / "back").string());
  CHECK(b.config.model.lora_targets == "q,k,v,proj");
  const auto want = by_name(nn::merged_state(*m.model));
  const auto have = nn::merged_state(*b.model);
  double merged_gap = 0;
  for (const auto& [name, w] : have) {
    const auto x = w.to_vector<float>(), y = want.at(name).to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i)
      merged_gap = std::max(merged_gap, std::abs(double(x[i]) - y[i]));
  }
  CHECK(merged_gap < 1e-6);
  fs::remove_all(dir);
}

TEST_CASE("a LoRA checkpoint records its base's hash: a changed base is refused, in the file or beside it") {
  const fs::path dir = temp_dir("lora_base_hash");
  const fs::path base = base_run(dir);
  // --save_base true: the base is in every checkpoint; one changed weight of it is refused on
  // resume, naming both hashes.
  const Run st = attend_cmd(lora_train(dir, base) + " --max_iters 2 --save_base true --out " +
                            (dir / "S").string());
  REQUIRE_MESSAGE(st.code == 0, st.out);
  const fs::path ckpt = train::newest_valid_checkpoint(dir / "S").path;
  io::CheckpointData d = io::load_checkpoint(ckpt);
  const train::TrainConfig c = train::from_values(d.config);
  REQUIRE(c.base_hash.size() == 16);
  // The default: the adapters alone, the base read back from --init_from's file. The same
  // run, so the same model: sample gives the same bytes from both.
  const Run lt = attend_cmd(lora_train(dir, base) + " --max_iters 2 --out " + (dir / "L").string());
  REQUIRE_MESSAGE(lt.code == 0, lt.out);
  const fs::path small = train::newest_valid_checkpoint(dir / "L").path;
  const io::CheckpointData raw = io::load_checkpoint(small);
  CHECK(raw.model.size() == 16);  // 2 layers x 4 targets x (A, B)
  for (const auto& [name, t] : raw.model) CHECK(name.find(".lora_") != std::string::npos);
  const std::string draw = " --max_new_tokens 20 --seed 3";
  const std::string from_full = attend_stdout("sample --checkpoint " + ckpt.string() + draw);
  CHECK(!from_full.empty());
  CHECK(attend_stdout("sample --checkpoint " + small.string() + draw) == from_full);
  CHECK(models_differing(dir / "S", dir / "L") == 0);

  for (auto& [name, t] : d.model)
    if (name == "transformer.h.0.attn.c_proj.weight") t.data<float>()[0] += 0.25f;
  fs::remove(ckpt);
  io::save_checkpoint(ckpt, d);
  const Run r = attend_cmd("train --resume " + (dir / "S").string() + " --max_iters 3");
  CHECK(r.code != 0);
  CHECK(r.out.find("are not those the adapters were trained on (hash " + c.base_hash + ")") !=
        std::string::npos);
  // The base file changed (a valid checkpoint, other weights): every reader of the
  // adapter-only checkpoint refuses it, naming both hashes; moved away, it says where it was.
  const fs::path base_file = c.init_from;
  REQUIRE(fs::exists(base_file));
  fs::copy_file(base_file, dir / "base_kept.h5");
  io::CheckpointData b = io::load_checkpoint(base_file);
  for (auto& [name, t] : b.model)
    if (name == "transformer.h.1.mlp.c_fc.weight") t.data<float>()[3] -= 0.5f;
  fs::remove(base_file);
  io::save_checkpoint(base_file, b);
  for (const std::string& cmd : {"sample --checkpoint " + small.string(),
                                "train --resume " + (dir / "L").string() + " --max_iters 3",
                                "export --merge --checkpoint " + small.string() + " --out " +
                                    (dir / "merged").string()}) {
    INFO(cmd);
    const Run x = attend_cmd(cmd);
    CHECK(x.code != 0);
    CHECK(x.out.find("holds LoRA adapters only, trained on a base of hash " + c.base_hash) !=
          std::string::npos);
    CHECK(x.out.find("now has hash") != std::string::npos);
  }
  fs::remove(base_file);
  const Run gone = attend_cmd("sample --checkpoint " + small.string());
  CHECK(gone.code != 0);
  CHECK(gone.out.find("their base " + base_file.string() + " (hash " + c.base_hash +
                      ") cannot be read") != std::string::npos);
  CHECK(gone.out.find("put the base back, or train with --save_base true") != std::string::npos);
  // put back, it reads again
  fs::copy_file(dir / "base_kept.h5", base_file);
  CHECK(attend_stdout("sample --checkpoint " + small.string() + draw) == from_full);
  // a checkpoint naming itself as its base (a crafted loop) is refused, not followed forever
  io::CheckpointData loop = io::load_checkpoint(small);
  for (auto& [name, v] : loop.config)
    if (name == "init_from") v = (dir / "loop.h5").string();
  io::save_checkpoint(dir / "loop.h5", loop);
  const Run looped = attend_cmd("sample --checkpoint " + (dir / "loop.h5").string());
  CHECK(looped.code != 0);
  CHECK(looped.out.find("the init_from entries form a loop") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("train --lora_targets head: the LM head's adapter trains, merges, and goes to PEFT and back") {
  const fs::path dir = temp_dir("lora_head");
  const fs::path base = base_run(dir);  // an untied Llama
  const Run t = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                           base.string() + " --out " + (dir / "H").string() +
                           " --lora_rank 2 --lora_targets q,head --max_iters 3 --eval_iters 1"
                           " --learning_rate 3e-2");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  const io::CheckpointData d = io::load_checkpoint(train::newest_valid_checkpoint(dir / "H").path);
  double moved = 0;
  for (const auto& [name, tensor] : d.model)
    if (name == "lm_head.lora_head.B")
      for (const float v : tensor.to_vector<float>()) moved = std::max(moved, double(std::abs(v)));
  CHECK(moved > 0.0);
  const Run sm = attend_cmd("summary --checkpoint " + (dir / "H").string());
  CHECK(sm.out.find("LoRA adapter on the LM head, R 2") != std::string::npos);
  const Run merged = attend_cmd("export --checkpoint " + (dir / "H").string() + " --merge --out " +
                                (dir / "merged").string());
  CHECK_MESSAGE(merged.code == 0, merged.out);
  // PEFT's LoRA on the module lm_head (beside q's), and back onto the base exactly
  const Run peft = attend_cmd("export --checkpoint " + (dir / "H").string() +
                              " --format peft --out " + (dir / "peft").string());
  REQUIRE_MESSAGE(peft.code == 0, peft.out);
  const nlohmann::json acfg = nlohmann::json::parse(file_bytes(dir / "peft" / "adapter_config.json"));
  CHECK(acfg["target_modules"] == nlohmann::json::array({"q_proj", "lm_head"}));
  REQUIRE(attend_cmd("export --checkpoint " + base.string() + " --out " + (dir / "hf").string())
              .code == 0);
  const Run back = attend_cmd("import --from " + (dir / "hf").string() + " --adapter " +
                              (dir / "peft").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(back.code == 0, back.out);
  const train::LoadedModel b = train::load_model((dir / "back").string());
  const train::LoadedModel h = train::load_model((dir / "H").string());
  CHECK(b.config.model.lora_targets == "q,head");
  const auto want = by_name(h.model->named_parameters());
  for (const auto& [name, p] : b.model->named_parameters()) {
    INFO(name);
    CHECK(test::bit_identical(p, want.at(name)));
  }
  // GPT-2's targets are not a Llama's (a tied head is refused in tests/nn/test_lora.cpp).
  const Run other = attend_cmd("train --data " + (dir / "corpus.txt").string() +
                               " --init_from " + base.string() + " --out " + (dir / "T").string() +
                               " --lora_rank 2 --lora_targets fc,head --max_iters 1");
  CHECK(other.code != 0);
  CHECK(other.out.find("'fc' is not a target of this Llama") != std::string::npos);
  fs::remove_all(dir);
}

// --base_weights bf16: the frozen base kept as bf16 bits trains what an f32 run from the
// base's bf16-rounded values trains, bit for bit; its checkpoints hold that rounded base as
// f32; resume is exact; the flag goes with --lora_rank only.
TEST_CASE("train --base_weights bf16 equals LoRA on the rounded f32 base, and resumes exactly") {
  const fs::path dir = temp_dir("lora_bf16_base");
  const fs::path base = base_run(dir);
  const std::string bf16 = " --base_weights bf16 --max_iters ";
  const Run a = attend_cmd(lora_train(dir, base) + bf16 + "6 --out " + (dir / "A").string());
  REQUIRE_MESSAGE(a.code == 0, a.out);
  CHECK(a.out.find("frozen base kept as bf16") != std::string::npos);
  // the base's matrices rounded to bf16 (gains stay f32), as an f32 checkpoint
  io::CheckpointData r = train::newest_valid_checkpoint(base).data;
  for (auto& [name, t] : r.model)
    if (t.dim() == 2) t = kernel::cast(kernel::cast(t, DType::BF16), DType::F32);
  fs::create_directories(dir / "R");
  io::save_checkpoint(dir / "R" / "ckpt_00000004.h5", r);
  const Run c = attend_cmd(lora_train(dir, dir / "R") + " --max_iters 6 --out " + (dir / "C").string());
  REQUIRE_MESSAGE(c.code == 0, c.out);
  CHECK(models_differing(dir / "A", dir / "C") == 0);
  const io::CheckpointData ca = train::newest_valid_checkpoint(dir / "A").data;
  const auto rounded = by_name(r.model);
  for (const auto& [name, t] : ca.model) {
    INFO(name);
    CHECK(t.dtype() == DType::F32);
    if (name.find(".lora_") == std::string::npos) CHECK(test::bit_identical(t, rounded.at(name)));
  }
  // 3 steps, then a resume to 6 (the format kept from the checkpoint): A's bits
  const Run b1 = attend_cmd(lora_train(dir, base) + bf16 + "3 --out " + (dir / "B").string());
  REQUIRE_MESSAGE(b1.code == 0, b1.out);
  const Run b2 = attend_cmd("train --resume " + (dir / "B").string() + " --max_iters 6");
  REQUIRE_MESSAGE(b2.code == 0, b2.out);
  CHECK(b2.out.find("frozen base kept as bf16") != std::string::npos);
  CHECK(models_differing(dir / "A", dir / "B") == 0);
  const io::CheckpointData cb = train::newest_valid_checkpoint(dir / "B").data;
  REQUIRE(ca.optimizer.tensors.size() == cb.optimizer.tensors.size());
  for (size_t i = 0; i < ca.optimizer.tensors.size(); ++i)
    CHECK(test::bit_identical(ca.optimizer.tensors[i].second, cb.optimizer.tensors[i].second));
  // refused: without LoRA, and a format that is not one
  const Run full = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                              base.string() + " --base_weights bf16 --max_iters 1 --out " +
                              (dir / "F").string());
  CHECK(full.code != 0);
  CHECK(full.out.find("--base_weights: is the format of a frozen base: give it with --lora_rank") !=
        std::string::npos);
  const Run bad = attend_cmd(lora_train(dir, base) + " --base_weights f16 --max_iters 1 --out " +
                             (dir / "G").string());
  CHECK(bad.code != 0);
  CHECK(bad.out.find("--base_weights: must be f32 or bf16, got f16") != std::string::npos);
  fs::remove_all(dir);
}
