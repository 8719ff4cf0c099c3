// What the program's end-to-end tests share (tests/app/test_*_cmd*.cpp): a small corpus,
// a tiny model trained on it, reading a metrics column, a file's bytes, and how many
// tensors of two runs differ.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "convert/peft_io.h"
#include "io/checkpoint.h"
#include "tensor/kernels.h"
#include "train/model_io.h"
#include "run_cmd.h"
#include "test_util.h"
#include "train/run_dir.h"

namespace attend::test {

namespace fs = std::filesystem;


// A small corpus made here: verse with enough variety to learn from.
inline fs::path make_corpus(const fs::path& dir) {
  std::string text;
  const char* lines[] = {"Now is the winter of our discontent\n",
                         "Made glorious summer by this sun of York;\n",
                         "And all the clouds that lour'd upon our house\n",
                         "In the deep bosom of the ocean buried.\n",
                         "Shall I compare thee to a summer's day?\n",
                         "Thou art more lovely and more temperate.\n"};
  for (int i = 0; i < 120; ++i) text += lines[(i * 7 + i / 6) % 6];
  std::ofstream(dir / "corpus.txt") << text;
  return dir / "corpus.txt";
}

inline const std::string kTiny =
    " --n_layer 2 --n_head 2 --n_kv_head 1 --n_embd 16 --block_size 16 --batch_size 4 --eval_iters "
    "2";

// kTiny's model trained `iters` steps (plus `extra` flags) on `data` into `run`: the
// preamble of most cases here.
inline fs::path tiny_run(const fs::path& data, const fs::path& run, int iters,
                  const std::string& extra = "") {
  const Run t = attend_cmd("train --data " + data.string() + " --out " + run.string() + kTiny +
                           " --max_iters " + std::to_string(iters) + extra);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  return run;
}

inline std::vector<std::string> column(const fs::path& csv, int col) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string cell;
    for (int i = 0; i <= col; ++i) std::getline(ss, cell, ',');
    if (!cell.empty()) out.push_back(cell);
  }
  return out;
}

inline std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// How many model tensors of the newest checkpoints of two runs differ in any bit, matched by
// name (an adapter-only LoRA checkpoint read with its base, as every reader reads it).
inline int models_differing(const fs::path& run_a, const fs::path& run_b) {
  const io::CheckpointData a = train::load_checkpoint_or_run(run_a.string(), false).data;
  const io::CheckpointData b = train::load_checkpoint_or_run(run_b.string(), false).data;
  REQUIRE(a.model.size() == b.model.size());
  std::map<std::string, Tensor> in_b(b.model.begin(), b.model.end());
  int differ = 0;
  for (const auto& [name, t] : a.model) {
    INFO(name);
    REQUIRE(in_b.count(name));
    differ += !test::bit_identical(t, in_b.at(name));
  }
  return differ;
}

// The adapter gradients of `trained` (a LoRA model after backward, any float dtype) written
// as PEFT files into `out`, under the adapters' own keys: what the PyTorch checkers
// compare theirs with. A copy of `checkpoint` (the run `trained` was loaded from) carries
// the gradients as its A and B. `expect`: how many adapter tensors there must be.
inline fs::path export_adapter_grads(const nn::GPT& trained, const fs::path& checkpoint,
                                     const fs::path& out, size_t expect) {
  std::map<std::string, Tensor> grads;
  for (const auto& [name, p] : trained.named_trainable_parameters()) grads[name] = p.grad();
  REQUIRE(grads.size() == expect);
  train::LoadedModel g = train::load_model(checkpoint.string());
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : g.model->named_parameters())
      if (grads.count(name)) p.set_data(kernel::cast(grads.at(name), DType::F32));
  }
  convert::export_peft({*g.model, *g.tokenizer, "grads"}, out, "grads");
  return out / "adapter_model.safetensors";
}

}  // namespace attend::test
