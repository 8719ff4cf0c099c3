// GPT-2 import and export (train/gpt2_io.h) from the command line: export -> import is
// bit-identical, an independent reader (python3 + numpy, no attend code) loads the export
// and its own GPT-2 forward matches attend's logits, and what GPT-2's layout cannot hold
// is refused.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_cmd.h"
#include "test_util.h"
#include "io/checkpoint.h"
#include "train/model_io.h"
#include "train/run_dir.h"

using namespace attend;
namespace fs = std::filesystem;

namespace {

using test::Run;
Run cli(const std::string& args) { return test::attend_cmd(args); }
Run run(const std::string& cmd) { return test::shell(cmd); }

using test::trained_run;

}  // namespace

TEST_CASE("export then import is bit-identical, and sample agrees") {
  const fs::path dir = test::temp_dir("gpt2_io");
  const fs::path r = trained_run(dir, "");
  Run e = cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  CHECK(fs::exists(dir / "hf" / "model.safetensors"));
  CHECK(fs::exists(dir / "hf" / "config.json"));
  Run i = cli("import --from " + (dir / "hf").string() + " --out " + (dir / "back").string());
  REQUIRE_MESSAGE(i.code == 0, i.out);
  const io::CheckpointData a = train::newest_valid_checkpoint(r).data;
  const io::CheckpointData b = train::newest_valid_checkpoint(dir / "back").data;
  REQUIRE(a.model.size() == b.model.size());
  for (size_t k = 0; k < a.model.size(); ++k) {
    INFO(a.model[k].first);
    CHECK(a.model[k].first == b.model[k].first);
    CHECK(test::bit_identical(a.model[k].second, b.model[k].second));
  }
  CHECK(a.tokenizer.tokens == b.tokenizer.tokens);
  const std::string s = " --prompt So --max_new_tokens 30 --seed 4";
  CHECK(cli("sample --checkpoint " + r.string() + s).out ==
        cli("sample --checkpoint " + (dir / "back").string() + s).out);
  // The imported run can be trained on (its AdamW state starts fresh at step 0).
  CHECK(train::newest_valid_checkpoint(dir / "back").data.meta.step == 0);
  fs::remove_all(dir);
}

TEST_CASE("an independent NumPy GPT-2 reads the export and matches attend's logits") {
  if (run("/usr/bin/python3 -c 'import numpy'").code != 0) {
    ATTEND_SKIP("python3 with numpy not found (apt-get install python3-numpy)");
  }
  const fs::path dir = test::temp_dir("gpt2_numpy");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  // attend's logits for a fixed sequence, as raw f32.
  train::LoadedModel m = train::load_model(r.string());
  const std::vector<double> ids = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4};
  Tensor logits = m.model->forward(tensor(ids, {1, 10}, DType::I64)).logits;  // (1, 10, V)
  std::vector<float> v = logits.to_vector<float>();
  std::ofstream(dir / "logits.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  Run py = run("/usr/bin/python3 " + (fs::path(ATTEND_SOURCE_DIR) / "tests/app/gpt2_numpy.py").string() + " " + (dir / "hf").string() +
               " 3,7,1,0,12,5,9,2,11,4 " + (dir / "logits.f32").string());
  CAPTURE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("numpy ok") != std::string::npos);
  MESSAGE(py.out);
  fs::remove_all(dir);
}

TEST_CASE("a PyTorch GPT-2 built from torch.nn loads the export and matches attend") {
  if (run("/usr/bin/python3 -c 'import torch, numpy'").code != 0) {
    ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  }
  const fs::path dir = test::temp_dir("gpt2_torch");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  train::LoadedModel m = train::load_model(r.string());
  m.model->keep_logits = true;
  const std::vector<double> ids = {3, 7, 1, 0, 12, 5, 9, 2, 11, 4};
  const std::vector<double> next = {7, 1, 0, 12, 5, 9, 2, 11, 4, 6};
  nn::GPTOutput out =
      m.model->forward(tensor(ids, {1, 10}, DType::I64), tensor(next, {1, 10}, DType::I64));
  std::vector<float> v = out.logits.to_vector<float>();
  std::ofstream(dir / "logits.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  // tests/app/gpt2_torch.py: bench/torch_twin.py's GPT (torch.nn modules: Linear,
  // LayerNorm, Embedding, GELU(tanh)) loads the weights from the safetensors bytes by name,
  // GPT-2's Conv1D layout transposed for nn.Linear, with strict=True so a missing or extra
  // name fails.
  std::ostringstream loss_text;
  loss_text.precision(9);
  loss_text << out.loss.item();
  const std::string loss = loss_text.str();
  Run py = run("/usr/bin/python3 " + (fs::path(ATTEND_SOURCE_DIR) / "tests/app/gpt2_torch.py").string() + " " +
               (dir / "hf").string() + " 3,7,1,0,12,5,9,2,11,4 7,1,0,12,5,9,2,11,4,6 " +
               (dir / "logits.f32").string() + " " + loss);
  CAPTURE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("torch ok") != std::string::npos);
  MESSAGE(py.out);
  fs::remove_all(dir);
}

TEST_CASE("what GPT-2's layout cannot hold is refused, and bad weight files are named") {
  const fs::path dir = test::temp_dir("gpt2_refuse");
  const fs::path gqa = trained_run(dir, " --n_kv_head 1");
  Run e = cli("export --checkpoint " + gqa.string() + " --out " + (dir / "hf").string());
  CHECK(e.code == 1);
  CHECK(e.out.find("(GQA/MQA); GPT-2's layout has one key/value head per query head") !=
        std::string::npos);
  fs::create_directories(dir / "bad");
  std::ofstream(dir / "bad" / "config.json")
      << R"({"n_layer": 1, "n_head": 2, "n_embd": 8, "n_positions": 4, "vocab_size": 5})";
  std::ofstream(dir / "bad" / "model.safetensors") << std::string("\xff\xff\xff\xff\0\0\0\0", 8);
  Run b = cli("import --from " + (dir / "bad").string() + " --out " + (dir / "x").string());
  CHECK(b.code == 1);
  CHECK(b.out.find("model.safetensors: header length") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE(
    "finetune: --init_from an exported and re-imported model lowers the loss on a new corpus") {
  const fs::path dir = test::temp_dir("finetune");
  const fs::path r = trained_run(dir, "");
  REQUIRE(cli("export --checkpoint " + r.string() + " --out " + (dir / "hf").string()).code == 0);
  REQUIRE(cli("import --from " + (dir / "hf").string() + " --out " + (dir / "imp").string()).code ==
          0);
  // A new corpus in the same alphabet.
  std::string text;
  for (int i = 0; i < 200; ++i) text += "we are so wan, so shaken with care.\n";
  std::ofstream(dir / "new.txt") << text;
  Run f = cli("train --init_from " + (dir / "imp").string() + " --data " +
              (dir / "new.txt").string() + " --out " + (dir / "ft").string() +
              " --block_size 8 --batch_size 4 --eval_iters 4 --max_iters 40 --eval_interval 40"
              " --learning_rate 3e-3 --warmup_iters 0");
  REQUIRE_MESSAGE(f.code == 0, f.out);
  CHECK(f.out.find("finetuning from") != std::string::npos);
  const io::CheckpointData d = train::newest_valid_checkpoint(dir / "ft").data;
  CHECK(d.meta.step == 40);
  std::map<std::string, io::ConfigValue> cfg(d.config.begin(), d.config.end());
  CHECK(std::get<std::string>(cfg.at("init_from")).find("imp") != std::string::npos);
  CHECK(std::get<int64_t>(cfg.at("block_size")) == 8);  // the position table cropped
  // The loss at step 0 (the imported weights) and after 40 steps, from metrics.csv.
  const auto rows = train::read_metrics(dir / "ft" / "metrics.csv");
  REQUIRE(rows.size() >= 2);
  CHECK(rows.back().val_loss < rows.front().val_loss - 0.2);
  MESSAGE("val loss ", rows.front().val_loss, " -> ", rows.back().val_loss);
  // What would change the model's meaning is refused, naming both values.
  Run layers = cli("train --init_from " + (dir / "imp").string() + " --data " +
                   (dir / "new.txt").string() + " --out " + (dir / "x").string() + " --n_layer 3");
  CHECK(layers.code == 1);
  CHECK(layers.out.find("n_layer (checkpoint 2, now 3)") != std::string::npos);
  Run tok =
      cli("train --init_from " + (dir / "imp").string() + " --data " + (dir / "new.txt").string() +
          " --out " + (dir / "y").string() + " --tokenizer bpe:300");
  CHECK(tok.code == 1);
  CHECK(tok.out.find("--tokenizer bpe:300: the --init_from checkpoint's tokenizer is char") !=
        std::string::npos);
  REQUIRE(cli("prepare --data " + (dir / "new.txt").string() + " --out " + (dir / "bpe").string() +
              " --tokenizer bpe:260")
              .code == 0);
  Run prep = cli("train --init_from " + (dir / "imp").string() + " --data " +
                 (dir / "bpe").string() + " --out " + (dir / "z").string());
  CHECK(prep.code == 1);
  CHECK(prep.out.find("prepared with tokenizer bpe:") != std::string::npos);
  fs::remove_all(dir);
}
