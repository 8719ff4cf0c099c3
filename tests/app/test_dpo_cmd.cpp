// Preference tuning and chat templates from the command line (train/dpo.h): `prepare --format preference`
// writes pairs, `train --dpo` tunes on them against a frozen reference (a model of its own,
// or a LoRA policy's base), resumes exactly and refuses what it cannot do; the loss and the
// adapters' gradients against DPO written in PyTorch.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "convert/peft_io.h"
#include "data/dataset.h"
#include "data/instructions.h"
#include "data/token_file.h"
#include "io/checkpoint.h"
#include "tensor/kernels.h"
#include "train/dpo.h"
#include "train/model_io.h"
#include "train/run_dir.h"

using namespace attend;
using namespace attend::test;
namespace fs = std::filesystem;

namespace {

// Made-up pairs: a short instruction, the answer wanted and one not wanted.
void write_pairs(const fs::path& file, int n, const std::string& empty_side = "") {
  const char* things[] = {"the sea", "a cat", "the moon", "bread", "a river", "snow"};
  nlohmann::json j = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const std::string t = things[i % 6];
    nlohmann::json e = {{"instruction", "Describe " + t + " in one line."},
                        {"input", i % 3 == 0 ? "Be brief." : ""},
                        {"chosen", "It is " + t + ", calm and plain."},
                        {"rejected", "Whatever, " + t + " is boring and so are you."}};
    if (i == n / 2 && !empty_side.empty()) e[empty_side] = "";
    j.push_back(e);
  }
  std::ofstream(file) << j.dump(1);
}

struct Fixture {
  fs::path dir, pairs, base;
  std::string env;
};

// Pairs prepared with GPT-2's tokenizer (it has the end-of-text token) and a tiny Llama
// trained a few steps on their text: the model DPO starts from. Empty when the tokenizer
// files are not there (the caller skips).
Fixture fixture(const std::string& name) {
  Fixture f;
  const fs::path gpt2 = test::shared_data("gpt2/encoder.json").parent_path();
  if (gpt2.empty()) return f;
  f.env = "ATTEND_GPT2_DIR=" + gpt2.string() + " ";
  f.dir = temp_dir(name);
  write_pairs(f.dir / "pairs.json", 40);
  const Run p = attend_cmd("prepare --data " + (f.dir / "pairs.json").string() +
                               " --format preference --tokenizer gpt2 --out " +
                               (f.dir / "pairs").string(),
                           f.env);
  REQUIRE_MESSAGE(p.code == 0, p.out);
  CHECK(p.out.find("36 train and 4 val preference pairs (template alpaca") != std::string::npos);
  f.pairs = f.dir / "pairs";
  const Run b = attend_cmd("train --data " + f.pairs.string() +
                               " --dpo false --arch llama --n_layer 2 --n_head 2 --n_kv_head 1"
                               " --n_embd 16 --block_size 96 --batch_size 2 --eval_iters 1"
                               " --max_iters 1 --out " + (f.dir / "base").string(),
                           f.env);
  // Pairs are refused without --dpo: the base learns from text instead.
  CHECK(b.code != 0);
  CHECK(b.out.find("holds preference pairs: train on them with --dpo") != std::string::npos);
  std::ofstream(f.dir / "text.txt") << file_bytes(f.dir / "pairs.json");
  const Run t = attend_cmd("train --data " + (f.dir / "text.txt").string() +
                               " --tokenizer gpt2 --arch llama --n_layer 2 --n_head 2"
                               " --n_kv_head 1 --n_embd 16 --block_size 96 --batch_size 2"
                               " --eval_iters 1 --max_iters 3 --learning_rate 1e-2 --out " +
                               (f.dir / "base").string(),
                           f.env);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  f.base = f.dir / "base";
  return f;
}

std::string dpo_flags(const Fixture& f, const std::string& extra) {
  return "train --data " + f.pairs.string() + " --init_from " + f.base.string() +
         " --dpo --beta 0.5 --batch_size 2 --gradient_accumulation_steps 2 --eval_iters 2"
         " --eval_interval 2 --log_interval 1 --learning_rate 1e-2 --warmup_iters 1"
         " --lr_decay_iters 6 --checkpoint_interval 100" +
         extra;
}

double first_val_loss(const fs::path& run) {
  const std::vector<train::MetricsRow> rows = train::read_metrics(run / "metrics.csv");
  REQUIRE(!rows.empty());
  REQUIRE(rows[0].step == 0);
  return rows[0].val_loss;
}

}  // namespace

TEST_CASE("train --dpo: starts at log 2, learns the pairs, and resumes exactly (LoRA and full)") {
  const Fixture f = fixture("dpo_train");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  for (const std::string mode : {" --lora_rank 4 --lora_targets q,k,v,o", ""}) {
    INFO(mode);
    const std::string tag = mode.empty() ? "full" : "lora";
    const Run a = attend_cmd(dpo_flags(f, mode) + " --max_iters 6 --out " +
                                 (f.dir / (tag + "A")).string(),
                             f.env);
    REQUIRE_MESSAGE(a.code == 0, a.out);
    // Before any update the policy is the reference, bit for bit: every margin is 0 and the
    // loss is -log sigmoid(0) = log 2 exactly.
    CHECK(first_val_loss(f.dir / (tag + "A")) == std::log(2.0));
    const std::vector<train::MetricsRow> rows = train::read_metrics(f.dir / (tag + "A") / "metrics.csv");
    CHECK(rows.front().val_reward_margin == 0.0);
    CHECK(rows.back().step == 6);
    CHECK(rows.back().val_reward_margin > 0.0);  // the chosen side pulls ahead
    CHECK(rows.back().val_loss < std::log(2.0));
    CHECK(!std::isnan(rows[1].reward_margin));
    CHECK(rows[1].reward_accuracy >= 0.0);
    CHECK(rows[1].reward_accuracy <= 1.0);
    CHECK(a.out.find("DPO train loss") != std::string::npos);
    // 3 steps, then resumed to 6: the same bits as 6 straight.
    const Run b1 = attend_cmd(dpo_flags(f, mode) + " --max_iters 3 --out " +
                                  (f.dir / (tag + "B")).string(),
                              f.env);
    REQUIRE_MESSAGE(b1.code == 0, b1.out);
    const Run b2 = attend_cmd("train --resume " + (f.dir / (tag + "B")).string() + " --max_iters 6",
                              f.env);
    REQUIRE_MESSAGE(b2.code == 0, b2.out);
    CHECK(models_differing(f.dir / (tag + "A"), f.dir / (tag + "B")) == 0);
  }
  fs::remove_all(f.dir);
}

TEST_CASE("train --dpo --ref: another reference, and a resumed run refuses a changed one") {
  const Fixture f = fixture("dpo_ref");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  fs::copy(f.base, f.dir / "ref", fs::copy_options::recursive);
  const Run a = attend_cmd(dpo_flags(f, " --ref " + (f.dir / "ref").string()) +
                               " --max_iters 2 --out " + (f.dir / "A").string(),
                           f.env);
  REQUIRE_MESSAGE(a.code == 0, a.out);
  CHECK(a.out.find("DPO reference: " + fs::absolute(f.dir / "ref").lexically_normal().string()) !=
        std::string::npos);
  // The reference's weights change under the run: its resume is refused, naming both hashes.
  const fs::path ref_ckpt = train::newest_valid_checkpoint(f.dir / "ref").path;
  fs::remove(ref_ckpt);
  fs::copy_file(train::newest_valid_checkpoint(f.dir / "A").path, ref_ckpt);
  const Run r = attend_cmd("train --resume " + (f.dir / "A").string() + " --max_iters 4", f.env);
  CHECK(r.code != 0);
  CHECK(r.out.find("are not those the run was tuned against") != std::string::npos);
  CHECK(r.out.find("(hash ") != std::string::npos);
  // A reference of another shape.
  const Run other = attend_cmd("train --data " + (f.dir / "text.txt").string() +
                                   " --tokenizer gpt2 --arch llama --n_layer 1 --n_head 2"
                                   " --n_embd 16 --block_size 96 --batch_size 2 --eval_iters 1"
                                   " --max_iters 1 --out " + (f.dir / "other").string(),
                               f.env);
  REQUIRE_MESSAGE(other.code == 0, other.out);
  const Run s = attend_cmd(dpo_flags(f, " --ref " + (f.dir / "other").string()) +
                               " --max_iters 1 --out " + (f.dir / "S").string(),
                           f.env);
  CHECK(s.code != 0);
  CHECK(s.out.find("of another shape than the model being tuned (n_layer 1 vs 2") !=
        std::string::npos);
  fs::remove_all(f.dir);
}

TEST_CASE("DPO's bad input is refused naming the entry, field, flag or file") {
  const Fixture f = fixture("dpo_bad");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  for (const char* side : {"chosen", "rejected"}) {
    write_pairs(f.dir / "empty.json", 10, side);
    const Run p = attend_cmd("prepare --data " + (f.dir / "empty.json").string() +
                                 " --format preference --tokenizer gpt2 --out " +
                                 (f.dir / "e").string(),
                             f.env);
    CHECK(p.code != 0);
    CHECK(p.out.find("example 5: \"" + std::string(side) + "\" is empty") != std::string::npos);
  }
  // A pair without a rejected side at all, and a template attend does not know.
  {
    std::ofstream(f.dir / "missing.json") << R"([{"instruction": "a", "chosen": "b"}])";
    const Run p = attend_cmd("prepare --data " + (f.dir / "missing.json").string() +
                                 " --format preference --tokenizer gpt2 --out " +
                                 (f.dir / "m").string(),
                             f.env);
    CHECK(p.code != 0);
    CHECK(p.out.find("example 0 has no \"rejected\"") != std::string::npos);
  }
  const Run no_init =
      attend_cmd("train --data " + f.pairs.string() + " --dpo --out " + (f.dir / "N").string(),
                 f.env);
  CHECK(no_init.code != 0);
  CHECK(no_init.out.find("--dpo: give --init_from") != std::string::npos);
  const Run beta = attend_cmd("train --data " + (f.dir / "text.txt").string() + " --init_from " +
                                  f.base.string() + " --beta 0.2 --out " + (f.dir / "M").string(),
                              f.env);
  CHECK(beta.code != 0);
  CHECK(beta.out.find("--beta 0.2: DPO's beta goes with --dpo") != std::string::npos);
  const Run neg = attend_cmd("train --data " + f.pairs.string() + " --init_from " +
                                 f.base.string() + " --dpo --beta -1 --out " +
                                 (f.dir / "B").string(),
                             f.env);
  CHECK(neg.code != 0);
  CHECK(neg.out.find("--beta: must be in (0, 1e4], got -1") != std::string::npos);
  const Run text = attend_cmd("train --data " + (f.dir / "text.txt").string() + " --init_from " +
                                  f.base.string() + " --dpo --max_iters 1 --out " +
                                  (f.dir / "T").string(),
                              f.env);
  CHECK(text.code != 0);
  CHECK(text.out.find("holds no preference pairs (prepare --format preference)") !=
        std::string::npos);
  fs::remove_all(f.dir);
}

TEST_CASE("a pairs file: chosen then rejected rows, a pair's prompt shared, checked on read") {
  const fs::path dir = temp_dir("dpo_pairs_file");
  // Two pairs over 32 tokens: (prompt 3: 3+4, 3+5), (prompt 2: 2+6, 2+7).
  std::vector<int32_t> ids(32);
  for (int i = 0; i < 32; ++i) ids[static_cast<size_t>(i)] = i;
  data::write_token_file(dir / "train.bin", ids, 64, 0);
  data::write_examples_file(dir / "train.examples", {{3, 7}, {3, 8}, {2, 8}, {2, 9}}, 32, true);
  bool pairs = false;
  CHECK(data::read_examples_file(dir / "train.examples", 32, &pairs).size() == 4);
  CHECK(pairs);
  const data::TokenDataset ds(dir / "train.bin", 16);
  CHECK(ds.pairs());
  CHECK(ds.num_windows() == 2);
  const data::Batch b = ds.windows(0, 2);  // chosen 0, chosen 1, rejected 0, rejected 1
  REQUIRE(b.x.shape() == Shape({4, 8}));
  const int64_t* x = b.x.data<int64_t>();
  const int64_t* y = b.y.data<int64_t>();
  CHECK(x[0 * 8] == 0);   // pair 0 chosen starts at 0
  CHECK(x[1 * 8] == 15);  // pair 1 chosen at 7 + 8
  CHECK(x[2 * 8] == 7);   // pair 0 rejected at 7
  CHECK(x[3 * 8] == 23);  // pair 1 rejected at 15 + 8
  CHECK(y[0 * 8 + 1] == -100);
  CHECK(y[0 * 8 + 2] == 3);  // the first response token of pair 0's chosen side
  // Writing or reading pairs whose prompts differ is refused.
  CHECK_THROWS_WITH(data::write_examples_file(dir / "bad.examples", {{3, 7}, {2, 8}}, 15, true),
                    doctest::Contains("pair 0 has prompts of 3 and 2 tokens"));
  std::string bytes = file_bytes(dir / "train.examples");
  const uint64_t two = 2;
  std::memcpy(bytes.data() + 32 + 16, &two, 8);  // the rejected prompt of pair 0: 3 -> 2
  std::ofstream(dir / "edited.examples", std::ios::binary) << bytes;
  CHECK_THROWS_WITH(data::read_examples_file(dir / "edited.examples", 32),
                    doctest::Contains("a pair shares its prompt"));
  fs::remove_all(dir);
}

TEST_CASE("DPO's loss and adapter gradients match DPO written in PyTorch on a LoRA Llama") {
  if (test::shell("/usr/bin/python3 -c 'import torch, numpy'").code != 0)
    ATTEND_SKIP("python3 with torch not found (apt-get install python3-torch)");
  const fs::path dir = temp_dir("dpo_torch");
  make_corpus(dir);
  const fs::path base =
      tiny_run(dir / "corpus.txt", dir / "base", 4, " --arch llama --tie_embeddings false");
  // Adapters moved off zero (B = 0 would make every gradient of A vanish).
  const Run t = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --init_from " +
                           base.string() + " --out " + (dir / "L").string() +
                           " --lora_rank 3 --lora_alpha 5 --lora_targets q,k,v,o,gate,up,down"
                           " --batch_size 4 --eval_iters 1 --max_iters 4 --learning_rate 3e-2");
  REQUIRE_MESSAGE(t.code == 0, t.out);
  REQUIRE(attend_cmd("export --checkpoint " + base.string() + " --out " + (dir / "hf").string())
              .code == 0);
  REQUIRE(attend_cmd("export --checkpoint " + (dir / "L").string() + " --format peft --out " +
                     (dir / "peft").string())
              .code == 0);
  // Two pairs: rows of different lengths (padding after the shorter), the responses scored.
  const std::vector<std::vector<int64_t>> xs = {{3, 7, 1, 0, 12, 5, 9, 2},
                                                {4, 4, 8, 1, 6, 0, 0, 0},
                                                {3, 7, 1, 0, 2, 11, 0, 0},
                                                {4, 4, 8, 1, 9, 10, 13, 2}};
  const std::vector<std::vector<int64_t>> ys = {{-100, -100, -100, 12, 5, 9, 2, 6},
                                                {-100, -100, 1, 6, 3, -100, -100, -100},
                                                {-100, -100, -100, 2, 11, 4, -100, -100},
                                                {-100, -100, 1, 9, 10, 13, 2, 5}};
  data::Batch b{empty({4, 8}, DType::I64), empty({4, 8}, DType::I64)};
  std::string xt, yt;
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 8; ++c) {
      b.x.data<int64_t>()[r * 8 + c] = xs[r][c];
      b.y.data<int64_t>()[r * 8 + c] = ys[r][c];
      const char* sep = c == 0 ? (r == 0 ? "" : "/") : ",";
      xt.append(sep).append(std::to_string(xs[r][c]));
      yt.append(sep).append(std::to_string(ys[r][c]));
    }
  train::LoadedModel m = train::load_model((dir / "L").string());
  m.model->to(DType::F64);
  m.model->train();
  const train::DpoStats s = train::dpo_backward(*m.model, nullptr, b, 0.7, 1.0);
  REQUIRE(s.pairs == 2);
  CHECK(s.margin != 0.0);
  const fs::path grads = export_adapter_grads(*m.model, dir / "L", dir / "grads", 2 * 7 * 2);
  std::ostringstream l;
  l.precision(17);
  l << s.loss / 2;
  const Run py = test::shell("/usr/bin/python3 " + std::string(ATTEND_SOURCE_DIR) +
                             "/tests/app/peft_torch.py dpo " + (dir / "hf").string() + " " +
                             (dir / "peft").string() + " " +
                             grads.string() + " " + xt +
                             " " + yt + " 0.7 " + l.str());
  MESSAGE(py.out);
  CHECK(py.code == 0);
  CHECK(py.out.find("torch ok") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("attention --instruction marks the response tokens, the ones the loss reads") {
  const Fixture f = fixture("attention_mask");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  const std::string flags = "attention --checkpoint " + f.base.string() +
                            " --instruction 'Name a fruit.' --input 'Be brief.' --response "
                            "'An apple.' --layer 0 --head 1 --out ";
  const Run j = attend_cmd(flags + (f.dir / "a.json").string(), f.env);
  REQUIRE_MESSAGE(j.code == 0, j.out);
  const nlohmann::json d = nlohmann::json::parse(file_bytes(f.dir / "a.json"));
  // The prompt as prepare renders and encodes it; the response after it, then the end token.
  const train::LoadedModel m = train::load_model(f.base.string());
  const data::TokenIds prompt =
      m.tokenizer->encode(data::instruction_prompt("alpaca", "Name a fruit.", "Be brief."));
  const data::TokenIds response = m.tokenizer->encode("An apple.");
  REQUIRE(d.contains("prompt_tokens"));
  CHECK(d["prompt_tokens"].get<size_t>() == prompt.size());
  CHECK(d["tokens"].size() == prompt.size() + response.size() + 1);
  CHECK(d["ids"].back().get<int32_t>() == data::end_of_text_id(m.tokenizer->spec()));
  CHECK(d["caption"].get<std::string>().find("tokens " + std::to_string(prompt.size()) + " to") !=
        std::string::npos);
  // In the SVG the response's labels, and only they, are marked: once along each axis.
  const Run s = attend_cmd(flags + (f.dir / "a.svg").string(), f.env);
  REQUIRE_MESSAGE(s.code == 0, s.out);
  const std::string svg = file_bytes(f.dir / "a.svg");
  size_t marked = 0;
  for (size_t p = 0; (p = svg.find(" response\" fill=\"#c2410c\"", p)) != std::string::npos; ++p)
    ++marked;
  CHECK(marked == 2 * (response.size() + 1));
  // Plain text has no mask; --response without --instruction and the reverse are refused.
  const Run plain = attend_cmd("attention --checkpoint " + f.base.string() +
                                   " --prompt 'An apple.' --out " + (f.dir / "p.json").string(),
                               f.env);
  REQUIRE_MESSAGE(plain.code == 0, plain.out);
  CHECK(!nlohmann::json::parse(file_bytes(f.dir / "p.json")).contains("prompt_tokens"));
  const Run lone = attend_cmd("attention --checkpoint " + f.base.string() +
                                  " --instruction 'Name a fruit.' --out " +
                                  (f.dir / "x.json").string(),
                              f.env);
  CHECK(lone.code != 0);
  CHECK(lone.out.find("--instruction needs --response") != std::string::npos);
  fs::remove_all(f.dir);
}

TEST_CASE("prepare --template chatml adds its tokens, train grows the embedding, chat keeps turns") {
  const Fixture f = fixture("chatml");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  nlohmann::json inst = nlohmann::json::array();
  for (int i = 0; i < 20; ++i)
    inst.push_back({{"instruction", "Count to " + std::to_string(i % 4 + 1) + "."},
                    {"output", i % 2 ? "One." : "One, two."}});
  std::ofstream(f.dir / "inst.json") << inst.dump();
  const Run p = attend_cmd("prepare --data " + (f.dir / "inst.json").string() +
                               " --format alpaca --template chatml --system 'Be terse.'"
                               " --tokenizer gpt2 --out " + (f.dir / "chatml").string(),
                           f.env);
  REQUIRE_MESSAGE(p.code == 0, p.out);
  CHECK(p.out.find("added the template's tokens <|im_start|>, <|im_end|> to the tokenizer (now "
                   "gpt2+chatml, vocab_size 50259)") != std::string::npos);
  // Step 0 of a finetune: the two new rows are the mean of the base's rows.
  const Run t0 = attend_cmd("train --data " + (f.dir / "chatml").string() + " --init_from " +
                                f.base.string() + " --max_iters 0 --eval_iters 1 --out " +
                                (f.dir / "C0").string(),
                            f.env);
  REQUIRE_MESSAGE(t0.code == 0, t0.out);
  CHECK(t0.out.find("embedding grown from 50257 to 50259 rows") != std::string::npos);
  const train::LoadedModel base = train::load_model(f.base.string());
  const train::LoadedModel grown = train::load_model((f.dir / "C0").string());
  CHECK(grown.tokenizer->spec().name == "gpt2+chatml");
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    INFO(name);
    Tensor before, after;
    for (const auto& [n, t] : base.model->state_dict())
      if (n == name) before = kernel::contiguous(t);
    for (const auto& [n, t] : grown.model->state_dict())
      if (n == name) after = kernel::contiguous(t);
    REQUIRE(after.size(0) == 50259);
    const int64_t C = before.size(1);
    CHECK(std::equal(before.data<float>(), before.data<float>() + 50257 * C, after.data<float>()));
    for (int64_t j = 0; j < C; ++j) {
      double mean = 0;
      for (int64_t r = 0; r < 50257; ++r) mean += before.data<float>()[r * C + j];
      const float want = static_cast<float>(mean / 50257);
      CHECK(after.data<float>()[50257 * C + j] == want);
      CHECK(after.data<float>()[50258 * C + j] == want);
    }
  }
  // Trained a few steps under LoRA: the new rows train too (a delta on the mean row), so the
  // model tells <|im_start|> from <|im_end|>, which a frozen mean row never could; then chat.
  const Run t = attend_cmd("train --data " + (f.dir / "chatml").string() + " --init_from " +
                               f.base.string() + " --lora_rank 4 --max_iters 3 --eval_iters 1"
                               " --batch_size 2 --out " + (f.dir / "C").string(),
                           f.env);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  CHECK(t.out.find("the 2 new tokens' rows train, as a delta on their starting value") !=
        std::string::npos);
  {
    const train::LoadedModel tuned = train::load_model((f.dir / "C").string());
    CHECK(tuned.config.model.lora_new_tokens == 2);
    Tensor delta;
    for (const auto& [n, v] : tuned.model->state_dict())
      if (n == "transformer.wte.lora_tokens.delta") delta = v;
    REQUIRE(delta.defined());
    CHECK(delta.shape() == Shape({2, tuned.config.model.n_embd}));
    double moved = 0;
    for (const float v : delta.to_vector<float>()) moved = std::max(moved, std::abs(double(v)));
    CHECK(moved > 0.0);
    NoGradGuard no_grad;
    const Tensor ids = tensor({50257, 40, 50258}, {1, 3}, DType::I64);
    const std::vector<float> logits = tuned.model->forward(ids).logits.to_vector<float>();
    const size_t last = 2 * 50259;
    CHECK(logits[last + 50257] != logits[last + 50258]);
    // and the untrained start could not tell them apart
    const std::vector<float> start = grown.model->forward(ids).logits.to_vector<float>();
    CHECK(start[last + 50257] == start[last + 50258]);
  }
  // 2 steps and a resume to 3 equal 3 straight, the rows' deltas and their moments included
  REQUIRE(attend_cmd("train --data " + (f.dir / "chatml").string() + " --init_from " +
                         f.base.string() + " --lora_rank 4 --max_iters 2 --eval_iters 1"
                         " --batch_size 2 --out " + (f.dir / "R").string(),
                     f.env)
              .code == 0);
  const Run r = attend_cmd("train --resume " + (f.dir / "R").string() + " --max_iters 3", f.env);
  REQUIRE_MESSAGE(r.code == 0, r.out);
  CHECK(models_differing(f.dir / "C", f.dir / "R") == 0);
  const Run peft = attend_cmd("export --checkpoint " + (f.dir / "C").string() +
                                  " --format peft --out " + (f.dir / "peft").string(),
                              f.env);
  CHECK(peft.code != 0);
  CHECK(peft.out.find("trains the rows of 2 added tokens (lora_new_tokens)") != std::string::npos);
  // Three turns; the second too long for the context: refused, and the chat goes on.
  std::string long_turn;
  for (int i = 0; i < 150; ++i) long_turn += " word";
  std::ofstream(f.dir / "lines.txt") << "Count to 2.\n" << long_turn << "\nAnd 3?\n";
  const Run chat = attend_cmd("chat --checkpoint " + (f.dir / "C").string() +
                                  " --template chatml --system 'Be terse.' --max_new_tokens 4"
                                  " < " + (f.dir / "lines.txt").string(),
                              f.env);
  REQUIRE_MESSAGE(chat.code == 0, chat.out);
  CHECK(chat.out.find("tokens; the model's context is 96: shorten it") != std::string::npos);
  CHECK(attend_stdout("chat --checkpoint " + (f.dir / "C").string() +
                      " --template chatml --max_new_tokens 4 < " + (f.dir / "lines.txt").string())
            .size() > 0);
  const Run wrong = attend_cmd("chat --checkpoint " + (f.dir / "C").string() +
                                   " --template llama3 --prompt hi",
                               f.env);
  CHECK(wrong.code != 0);
  CHECK(wrong.out.find("its tokenizer gpt2+chatml has no <|eot_id|> to end a reply") !=
        std::string::npos);
  const Run alpaca_sys = attend_cmd("chat --checkpoint " + (f.dir / "C").string() +
                                        " --system x --prompt hi",
                                    f.env);
  CHECK(alpaca_sys.code != 0);
  CHECK(alpaca_sys.out.find("the alpaca template has no system message") != std::string::npos);
  // DPO on pairs rendered with the template: the reference (the --init_from base) grows as
  // the policy does, so step 0 is still log 2 exactly.
  const Run pp = attend_cmd("prepare --data " + (f.dir / "pairs.json").string() +
                                " --format preference --template chatml --tokenizer gpt2 --out " +
                                (f.dir / "cpairs").string(),
                            f.env);
  REQUIRE_MESSAGE(pp.code == 0, pp.out);
  const Run d = attend_cmd("train --data " + (f.dir / "cpairs").string() + " --init_from " +
                               f.base.string() + " --dpo --max_iters 1 --eval_iters 2"
                               " --batch_size 2 --out " + (f.dir / "D").string(),
                           f.env);
  REQUIRE_MESSAGE(d.code == 0, d.out);
  CHECK(first_val_loss(f.dir / "D") == std::log(2.0));
  fs::remove_all(f.dir);
}

// prepare --format chat: conversations become one example per assistant message (its history
// as the prompt), the validation split keeps conversations whole, the loss tokens are each
// answer and its <|im_end|>, and a LoRA finetune runs on it.
TEST_CASE("prepare --format chat: an example per answer with its history, then a LoRA finetune") {
  const Fixture f = fixture("chat_format");
  if (f.dir.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  nlohmann::json conv = nlohmann::json::array();
  for (int i = 0; i < 10; ++i) {
    nlohmann::json m = nlohmann::json::array();
    if (i % 3 == 0) m.push_back({{"role", "system"}, {"content", "Be terse."}});
    m.push_back({{"role", "user"}, {"content", "Count to " + std::to_string(i % 4 + 1) + "."}});
    m.push_back({{"role", "assistant"}, {"content", "One."}});
    m.push_back({{"role", "user"}, {"content", "And then?"}});
    m.push_back({{"role", "assistant"}, {"content", "Two, " + std::to_string(i) + "."}});
    conv.push_back({{"messages", m}});
  }
  std::ofstream(f.dir / "conv.json") << conv.dump();
  const Run p = attend_cmd("prepare --data " + (f.dir / "conv.json").string() +
                               " --format chat --template chatml --tokenizer gpt2 --val_fraction 0.2"
                               " --out " + (f.dir / "chat").string(),
                           f.env);
  REQUIRE_MESSAGE(p.code == 0, p.out);
  CHECK(p.out.find("16 train and 4 val examples, one per assistant message") != std::string::npos);
  const data::TokenFile val(f.dir / "chat" / "val.bin");
  const auto spans = data::read_examples_file(f.dir / "chat" / "val.examples", val.size());
  REQUIRE(spans.size() == 4);  // conversations 8 and 9, two answers each
  const train::LoadedModel tok = train::load_model(f.base.string());
  const auto wider = data::make_tokenizer(
      data::with_template_tokens(tok.tokenizer->spec(), data::chat_template("chatml")));
  int64_t at = 0;
  const char* answers[4] = {"One.", "Two, 8.", "One.", "Two, 9."};
  for (int k = 0; k < 4; ++k) {
    INFO("val example ", k);
    std::vector<int32_t> ids;
    for (int64_t i = at; i < at + spans[k].length; ++i) ids.push_back(static_cast<int32_t>(val[i]));
    const std::vector<int32_t> counted(ids.begin() + spans[k].prompt, ids.end());
    CHECK(wider->decode(counted) == std::string(answers[k]) + "<|im_end|>");
    // the second answer's prompt holds the first answer and its end of turn
    if (k % 2 == 1)
      CHECK(wider->decode(std::vector<int32_t>(ids.begin(), ids.begin() + spans[k].prompt))
                .find("One.<|im_end|>\n<|im_start|>user\nAnd then?") != std::string::npos);
    at += spans[k].length;
  }
  CHECK(at == val.size());
  const Run t = attend_cmd("train --data " + (f.dir / "chat").string() + " --init_from " +
                               f.base.string() + " --lora_rank 4 --max_iters 2 --eval_iters 1"
                               " --batch_size 2 --out " + (f.dir / "C").string(),
                           f.env);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  const Run bad = attend_cmd("prepare --data " + (f.dir / "conv.json").string() +
                                 " --format chat --template alpaca --tokenizer gpt2 --out " +
                                 (f.dir / "bad").string(),
                             f.env);
  CHECK(bad.code != 0);
  CHECK(bad.out.find("--template alpaca has one turn and no history; use chatml or llama3") !=
        std::string::npos);
  fs::remove_all(f.dir);
}
