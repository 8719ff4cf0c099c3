// Fuzzing the training-side parsers (see tests/fuzz.h): checkpoints (byte mutations of a
// real HDF5 file, through io::load_checkpoint and load_model), config JSON, metrics.csv, and the model importers (Hugging Face, GGUF).
#include <filesystem>
#include <fstream>

#include "fuzz.h"
#include "nn/gpt.h"
#include "io/checkpoint.h"
#include "train/config.h"
#include "train/model_io.h"
#include "train/optim.h"
#include "train/run_dir.h"
#include "convert/gguf_io.h"
#include "convert/gpt2_io.h"
#include "convert/hf_llama_io.h"
#include "convert/peft_io.h"
#include "tensor/util.h"
#include "data/tokenizer.h"

using namespace attend;
using namespace attend::train;
using attend::nn::NamedTensors;
namespace fs = std::filesystem;

TEST_CASE("fuzz: checkpoints are refused cleanly or load exactly what was saved") {
  const fs::path dir = test::temp_dir("fuzz_ckpt");
  TrainConfig c;
  c.model = nn::GPTConfig{.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 2, .n_kv_head = 1, .n_embd = 4, .dropout = 0.0, .bias = true};
  nn::GPT m(c.model, 3);
  AdamW opt(m.named_parameters(), {});
  io::CheckpointData d;
  d.config = to_values(c);
  d.model = m.state_dict();
  d.optimizer = {"adamw", 0, opt.state()};
  d.tokenizer = {"char", "char", {"a", "b", "c", "d", "e"}, {}};
  io::save_checkpoint(dir / "good.h5", d);
  const std::string good = read_file(dir / "good.h5");
  const io::CheckpointData want = io::load_checkpoint(dir / "good.h5");
  const auto n = test::fuzz_file(
      "checkpoint", good, dir / "c.h5", 2, test::fuzz_cases(300),
      [](const fs::path& p) {
        load_model(LoadedCheckpoint{p, io::load_checkpoint(p)});
      },
      [&](const fs::path& p) -> std::string {
        // Everything is hashed: what loads must be what was saved, bit for bit.
        const io::CheckpointData got = io::load_checkpoint(p);
        if (got.config != want.config) return "/config differs";
        if (got.model.size() != want.model.size()) return "/model differs";
        for (size_t i = 0; i < got.model.size(); ++i)
          if (got.model[i].first != want.model[i].first ||
              !test::bit_identical(got.model[i].second, want.model[i].second))
            return "/model/" + want.model[i].first + " differs";
        if (got.meta.step != want.meta.step || got.tokenizer.tokens != want.tokenizer.tokens)
          return "/meta or /tokenizer differs";
        return "";
      });
  CHECK(n.refused > 0);
  fs::remove_all(dir);
}

// An adapter-only LoRA checkpoint names its base (/config init_from, base_hash): byte
// mutations of the file, and /config entries crafted one at a time (saved with a valid
// checksum, so they reach the base's reading), are refused cleanly or read the right base.
TEST_CASE("fuzz: adapter-only LoRA checkpoints are refused cleanly or read their base") {
  const fs::path dir = test::temp_dir("fuzz_lora");
  TrainConfig c;
  c.model = nn::GPTConfig{.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 2, .n_kv_head = 1, .n_embd = 4, .dropout = 0.0, .bias = true};
  const data::TokenizerSpec chars = {"char", "char", {"a", "b", "c", "d", "e"}, {}};
  auto save = [&](const TrainConfig& cfg, const NamedTensors& model, const fs::path& p) {
    io::CheckpointData d;
    d.config = to_values(cfg);
    d.model = model;
    d.optimizer = {"adamw", 0, {}};
    d.tokenizer = chars;
    io::save_checkpoint(p, d);
  };
  const nn::GPT base(c.model, 3);
  save(c, base.state_dict(), dir / "base.h5");
  TrainConfig lc = c;
  lc.model.lora_rank = 2;
  nn::GPT lora(lc.model, 3);
  lc.init_from = (dir / "base.h5").string();
  lc.base_hash = weights_hash(lora, true);
  NamedTensors adapters;
  for (const auto& [name, t] : lora.state_dict())
    if (name.find(".lora_") != std::string::npos) adapters.emplace_back(name, t);
  save(lc, adapters, dir / "good.h5");
  const LoadedModel want = load_model(load_checkpoint_or_run((dir / "good.h5").string(), false));
  const auto same_model = [&](const fs::path& p) -> std::string {
    const LoadedModel got = load_model(load_checkpoint_or_run(p.string(), false));
    const NamedTensors a = got.model->state_dict(), b = want.model->state_dict();
    if (a.size() != b.size()) return "a model of other tensors";
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].first != b[i].first || !test::bit_identical(a[i].second, b[i].second))
        return a[i].first + " differs";
    return "";
  };
  CHECK(same_model(dir / "good.h5").empty());
  const auto n = test::fuzz_file(
      "adapter-only LoRA checkpoint", read_file(dir / "good.h5"), dir / "c.h5", 6,
      test::fuzz_cases(200),
      [](const fs::path& p) { load_model(load_checkpoint_or_run(p.string(), false)); },
      same_model);
  CHECK(n.refused > 0);
  // Crafted entries, each valid as a value: every one refused with attend::Error.
  std::vector<std::pair<std::string, std::function<void(TrainConfig&)>>> crafted = {
      {"init_from a missing file", [&](TrainConfig& x) { x.init_from = (dir / "nope.h5").string(); }},
      {"init_from not a checkpoint", [&](TrainConfig& x) { x.init_from = (dir / "c.json").string(); }},
      {"init_from a folder with none", [&](TrainConfig& x) { x.init_from = dir.string() + "/empty"; }},
      {"init_from empty", [](TrainConfig& x) { x.init_from.clear(); }},
      {"base_hash of another base", [](TrainConfig& x) { x.base_hash = "0123456789abcdef"; }},
      {"base_hash malformed", [](TrainConfig& x) { x.base_hash = "zz"; }},
      {"vocab_size below the base's", [](TrainConfig& x) { x.model.vocab_size = 4; }},
      {"vocab_size far above it", [](TrainConfig& x) { x.model.vocab_size = int64_t{1} << 30; }},
      {"block_size above the base's", [](TrainConfig& x) { x.model.block_size = 8; }},
      {"n_embd not the base's", [](TrainConfig& x) { x.model.n_embd = 8; }},
      {"lora_new_tokens without their rows", [](TrainConfig& x) { x.model.lora_new_tokens = 2; }},
      {"vocab_size and lora_new_tokens grown together, no deltas",
       [](TrainConfig& x) { x.model.vocab_size = 7, x.model.lora_new_tokens = 2; }},
      {"a 2^30-row vocabulary to grow into (must not be sized)",
       [](TrainConfig& x) {
         x.model.vocab_size = int64_t{1} << 30, x.model.lora_new_tokens = (int64_t{1} << 30) - 5;
       }},
      {"base_weights bf16 (the hash is of f32 values)", [](TrainConfig& x) { x.base_weights = "bf16"; }},
  };
  std::ofstream(dir / "c.json") << "{}";
  fs::create_directories(dir / "empty");
  for (const auto& [what, change] : crafted) {
    INFO(what);
    TrainConfig x = lc;
    change(x);
    save(x, adapters, dir / "crafted.h5");
    CHECK_THROWS_AS(load_model(load_checkpoint_or_run((dir / "crafted.h5").string(), false)),
                    attend::Error);
  }
  fs::remove_all(dir);
}

TEST_CASE("fuzz: config files are refused cleanly or give a valid config") {
  const fs::path dir = test::temp_dir("fuzz_cfg");
  const std::string good =
      R"({"n_layer": 2, "n_head": 2, "n_embd": 32, "learning_rate": 3e-4, "bias": false,)"
      R"( "preset": "cpu-char", "max_iters": 100, "min_lr": "1e-5", "optimizer": "adamw"})";
  test::fuzz_file(
      "config JSON", good, dir / "c.json", 3, test::fuzz_cases(1000),
      [](const fs::path& p) { resolve_config({read_config_file(p.string())}).config.validate(); });
  fs::remove_all(dir);
}

TEST_CASE("fuzz: metrics.csv is refused cleanly or read") {
  const fs::path dir = test::temp_dir("fuzz_csv");
  std::vector<MetricsRow> rows = {{0, NAN, 4.17, 1e-5, NAN, NAN, 0.1},
                                  {10, 3.2, NAN, 1e-3, 1.5, 12000, 2.5},
                                  {20, 2.9, 2.95, 9e-4, 1.2, 12500, 5.0}};
  write_metrics(dir, rows);
  const std::string good = read_file(dir / "metrics.csv");
  test::fuzz_file("metrics.csv", good, dir / "m.csv", 4, test::fuzz_cases(1000),
                  [](const fs::path& p) { read_metrics(p); });
  fs::remove_all(dir);
}

TEST_CASE("fuzz: a Hugging Face folder's config.json is refused cleanly or imports its model") {
  const fs::path dir = test::temp_dir("fuzz_hf");
  nn::GPT model(nn::GPTConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2,
                              .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true},
                3);
  // An exported folder: model.safetensors and config.json (with a char tokenizer's file).
  const std::string text = "abcdefghij\n";
  auto tok = data::build_char_tokenizer(text);
  REQUIRE(tok->vocab_size() == 11);
  io::CheckpointData d;
  TrainConfig c;
  c.model = model.config;
  d.config = to_values(c);
  d.model = model.state_dict();
  d.optimizer = {"adamw", 0, AdamW(model.named_parameters(), {}).state()};
  d.tokenizer = tok->spec();
  io::save_checkpoint(dir / "c.h5", d);
  convert::export_gpt2({model, *tok, "c.h5"}, dir / "hf");
  const std::string good = read_file(dir / "hf" / "config.json");
  test::fuzz_file(
      "config.json", good, dir / "hf" / "config.json", 9, test::fuzz_cases(300),
      [&](const fs::path&) {
        fs::remove_all(dir / "out");
        convert::ImportOptions o;
        o.from = (dir / "hf").string();
        const convert::Imported m = convert::import_gpt2(o);
        train::write_imported((dir / "out").string(), *m.model, m.tokenizer->spec());
      },
      [&](const fs::path&) -> std::string {
        const train::LoadedModel m = train::load_model((dir / "out").string());
        return m.model->config == model.config ? "" : "imported another model's config";
      });
  fs::remove_all(dir);
}

TEST_CASE("fuzz: a sharded Hugging Face Llama folder (index, config, shards) is refused cleanly or imports consistently") {
  const fs::path dir = test::temp_dir("fuzz_hf_llama");
  nn::GPTConfig mc = nn::gpt_preset("llama-char");
  mc.vocab_size = 11, mc.block_size = 8, mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 1;
  mc.n_embd = 8, mc.hidden_dim = 12, mc.tie_embeddings = false;
  nn::GPT model(mc, 3);
  auto tok = data::build_char_tokenizer("abcdefghij\n");
  io::CheckpointData d;
  TrainConfig c;
  c.model = model.config;
  d.config = to_values(c);
  d.model = model.state_dict();
  d.optimizer = {"adamw", 0, AdamW(model.named_parameters(), {}).state()};
  d.tokenizer = tok->spec();
  io::save_checkpoint(dir / "c.h5", d);
  // BF16 in shards of at most 600 bytes: several files and an index, as 7B models come.
  convert::export_hf_llama({model, *tok, "c.h5"}, {dir / "hf", "bf16", 600});
  REQUIRE(fs::exists(dir / "hf" / "model.safetensors.index.json"));
  const fs::path shard = dir / "hf" / "model-00002-of-00005.safetensors";
  REQUIRE(fs::exists(shard));
  auto import = [&] {
    fs::remove_all(dir / "out");
    convert::ImportOptions o;
    o.from = (dir / "hf").string();
    const convert::Imported m = convert::import_hf_llama(o);
    train::write_imported((dir / "out").string(), *m.model, m.tokenizer->spec());
  };
  import();
  const io::CheckpointData want = train::newest_valid_checkpoint(dir / "out").data;
  const nn::GPTConfig want_config = train::load_model((dir / "out").string()).config.model;
  // What an accepted folder must give: a model that loads, of the shapes its config implies;
  // when only the index or config changed, the very weights of the good folder.
  auto same_weights = [&](const fs::path&) -> std::string {
    const train::LoadedModel m = train::load_model((dir / "out").string());
    const io::CheckpointData got = train::newest_valid_checkpoint(dir / "out").data;
    if (got.model.size() != want.model.size()) return "another number of tensors";
    for (size_t i = 0; i < got.model.size(); ++i)
      if (got.model[i].first != want.model[i].first ||
          !test::bit_identical(got.model[i].second, want.model[i].second))
        return "tensor " + want.model[i].first + " differs";
    return "";
  };
  const int64_t cases = test::fuzz_cases(200);
  for (const char* name : {"model.safetensors.index.json", "config.json"}) {
    const fs::path p = dir / "hf" / name;
    const std::string good = read_file(p);
    test::fuzz_file(
        name, good, p, 11, cases, [&](const fs::path&) { import(); },
        [&](const fs::path& f) -> std::string {
          if (std::string(name) == "model.safetensors.index.json") return same_weights(f);
          // A config that still imports may change what the weights mean (eps, theta,
          // window), never what they are.
          const train::LoadedModel m = train::load_model((dir / "out").string());
          return m.model->state_dict().size() == want.model.size() ? ""
                                                                     : "another set of tensors";
        });
    write_file_atomic(p, good);
  }
  test::fuzz_file(
      "a BF16 shard", read_file(shard), shard, 12, cases, [&](const fs::path&) { import(); },
      [&](const fs::path&) -> std::string {
        const train::LoadedModel m = train::load_model((dir / "out").string());
        return m.model->config == want_config ? "" : "another model";
      });
  fs::remove_all(dir);
}

TEST_CASE("fuzz: a GGUF model (keys, tokenizer, tensors) is refused cleanly or imports consistently") {
  const fs::path dir = test::temp_dir("fuzz_gguf_model");
  // Both architectures' files: a Llama with a char vocabulary, a GPT-2 with a BPE one.
  nn::GPTConfig mc = nn::gpt_preset("llama-char");
  mc.vocab_size = 11, mc.block_size = 8, mc.n_layer = 1, mc.n_head = 2, mc.n_kv_head = 1;
  mc.n_embd = 32, mc.hidden_dim = 32, mc.tie_embeddings = false;
  const nn::GPT llama(mc, 3);
  auto chars = data::build_char_tokenizer("abcdefghi\n\xc3\xa9");
  auto bpe = data::train_bpe_tokenizer("abab abab cdcd abcd", 260);
  const nn::GPT gpt2(nn::GPTConfig{.vocab_size = bpe->vocab_size(), .block_size = 8, .n_layer = 1,
                                   .n_head = 2, .n_kv_head = 2, .n_embd = 32, .dropout = 0.0},
                     4);
  const std::pair<const nn::GPT*, const data::Tokenizer*> models[] = {{&llama, chars.get()},
                                                                      {&gpt2, bpe.get()}};
  uint64_t seed = 21;
  for (const auto& [model, tok] : models) {
    const fs::path good_file = dir / "good.gguf";
    convert::export_gguf({*model, *tok, "m.h5"}, {good_file, "q8_0"});
    const std::string good = read_file(good_file);
    test::fuzz_file(
        "gguf model", good, dir / "m.gguf", seed++, test::fuzz_cases(150),
        [&](const fs::path& p) {
          convert::ImportOptions o;
          o.from = p.string();
          const convert::Imported m = convert::import_gguf(o);
          fs::remove_all(dir / "out");
          train::write_imported((dir / "out").string(), *m.model, m.tokenizer->spec());
        },
        [&](const fs::path&) -> std::string {
          const train::LoadedModel m = train::load_model((dir / "out").string());
          return m.model->config.n_layer == model->config.n_layer &&
                         m.tokenizer->vocab_size() == m.model->config.vocab_size
                     ? ""
                     : "imported a model its file does not describe";
        });
  }
  fs::remove_all(dir);
}

TEST_CASE("fuzz: a PEFT adapter (config and tensors) is refused cleanly or read consistently") {
  const fs::path dir = test::temp_dir("fuzz_peft");
  // A Llama with adapters on every target (q and k permuted on the way out and back).
  nn::GPTConfig mc = nn::gpt_preset("llama-char");
  mc.vocab_size = 11, mc.block_size = 8, mc.n_layer = 2, mc.n_head = 2, mc.n_kv_head = 1;
  mc.n_embd = 16, mc.hidden_dim = 24;
  const nn::GPT base(mc, 3);
  mc.lora_rank = 2, mc.lora_targets = "q,k,v,o,gate,up,down";
  const nn::GPT lora(mc, 3);
  auto tok = data::build_char_tokenizer("abcdefghij\n");
  convert::export_peft({lora, *tok, "l.h5"}, dir / "good", "base.h5");
  const std::string config = read_file(dir / "good" / "adapter_config.json");
  const std::string tensors = read_file(dir / "good" / "adapter_model.safetensors");
  fs::create_directories(dir / "a");
  // Mutate one file at a time; the other stays good.
  const std::pair<std::string, std::string> files[] = {{"adapter_config.json", config},
                                                       {"adapter_model.safetensors", tensors}};
  uint64_t seed = 31;
  for (const auto& [name, good] : files) {
    for (const auto& [other, bytes] : files)
      if (other != name) std::ofstream(dir / "a" / other, std::ios::binary) << bytes;
    test::fuzz_file(
        "peft " + name, good, dir / "a" / name, seed++, test::fuzz_cases(300),
        [&](const fs::path&) { convert::import_peft(base, dir / "a"); },
        [&](const fs::path&) -> std::string {
          const auto m = convert::import_peft(base, dir / "a");
          return m->config.lora_rank >= 1 && m->config.n_layer == 2 ? "" : "an impossible model";
        });
  }
  fs::remove_all(dir);
}
