// `attend export --format gguf` and `attend import --from X.gguf`, checked by llama.cpp's own
// code: node-llama-cpp's prebuilt CPU llama.cpp (scripts/setup.sh --test-extras installs it;
// tests that need it are reported skipped without it) loads attend's file and reports its
// log-probabilities, greedy continuation and tokenization (tests/app/llama_cpp_check.mjs).
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "convert/gguf_io.h"
#include "data/token_file.h"
#include "io/gguf.h"
#include "tensor/kernels.h"
#include "tensor/quant.h"
#include "train/model_io.h"

using namespace attend;
namespace fs = std::filesystem;

namespace {

// Where node-llama-cpp is installed: $ATTEND_NODE_LLAMA_CPP, else the cache folder
// scripts/setup.sh --test-extras fills. Empty when node or the package is missing.
fs::path node_llama_cpp() {
  if (test::shell("node --version").code != 0) return {};
  const char* env = std::getenv("ATTEND_NODE_LLAMA_CPP");
  fs::path dir;
  if (env && *env) {
    dir = env;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    dir = (xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : ".") / ".cache") / "attend" /
          "node-llama-cpp";
  }
  return fs::exists(dir / "node_modules" / "node-llama-cpp" / "package.json") ? dir : fs::path();
}

#define REQUIRE_LLAMA_CPP(dir)                                                         \
  const fs::path dir = node_llama_cpp();                                               \
  if (dir.empty())                                                                     \
  ATTEND_SKIP(                                                                         \
      "node-llama-cpp is missing (scripts/setup.sh --test-extras installs it, or set " \
      "ATTEND_NODE_LLAMA_CPP)")

// What llama.cpp computes on `gguf` for `request` (tests/app/llama_cpp_check.mjs).
nlohmann::json llama_cpp(const fs::path& pkg, const fs::path& gguf, const nlohmann::json& request) {
  const fs::path req = gguf.parent_path() / "request.json";
  std::ofstream(req) << request.dump();
  const test::Run r =
      test::shell("node " + std::string(ATTEND_SOURCE_DIR) + "/tests/app/llama_cpp_check.mjs " +
                      pkg.string() + " " + gguf.string() + " " + req.string(),
                  " 2>/dev/null");
  INFO("llama_cpp_check: ", r.out);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

// attend's log p(ids[i+1] | ids[0..i]) for every i, from the checkpoint.
std::vector<double> attend_logprobs(const fs::path& run, const data::TokenIds& ids) {
  const train::LoadedModel m = train::load_model(run.string());
  NoGradGuard no_grad;
  std::vector<double> v(ids.begin(), ids.end());
  Tensor idx = empty({1, static_cast<int64_t>(ids.size())}, DType::I64);
  for (size_t i = 0; i < ids.size(); ++i) idx.data<int64_t>()[i] = ids[i];
  const Tensor logits = kernel::contiguous(m.model->forward(idx).logits);  // (1, T, V)
  const int64_t V = logits.size(2);
  std::vector<double> out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = logits.data<float>() + static_cast<int64_t>(i) * V;
    double mx = row[0], sum = 0;
    for (int64_t k = 0; k < V; ++k) mx = std::max(mx, static_cast<double>(row[k]));
    for (int64_t k = 0; k < V; ++k) sum += std::exp(row[k] - mx);
    out.push_back(row[ids[i + 1]] - mx - std::log(sum));
  }
  return out;
}

// The largest |a - b| / |b| over the log-probs, and the mean log-probs' relative gap.
struct Agreement {
  double worst = 0, mean_rel = 0;
};
Agreement compare(const nlohmann::json& theirs, const std::vector<double>& ours) {
  REQUIRE(theirs.size() == ours.size());
  Agreement a;
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    REQUIRE(!theirs[i].is_null());
    const double t = theirs[i].get<double>();
    a.worst = std::max(a.worst, std::abs(t - ours[i]));
    s1 += t, s2 += ours[i];
  }
  a.mean_rel = std::abs(s1 - s2) / std::abs(s2);
  return a;
}

// A trained model of `flags` on the verse corpus, its tokenizer `tokenizer`.
fs::path trained(const fs::path& dir, const std::string& name, const std::string& flags) {
  const fs::path corpus = test::make_corpus(dir);
  const test::Run t = test::attend_cmd("train --data " + corpus.string() + " --out " +
                                       (dir / name).string() + " --batch_size 4 --eval_iters 1 " +
                                       "--max_iters 40 --learning_rate 3e-3 " + flags);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  return dir / name;
}

fs::path exported(const fs::path& run, const std::string& dtype) {
  const fs::path out = run.parent_path() / (run.filename().string() + "_" + dtype + ".gguf");
  const test::Run e =
      test::attend_cmd("export --checkpoint " + run.string() + " --format gguf --dtype " + dtype +
                       " --out " + out.string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  return out;
}

// The first n ids of a text in the corpus's words, by the model's tokenizer.
data::TokenIds sample_ids(const fs::path& run, int64_t n) {
  const train::LoadedModel m = train::load_model(run.string());
  data::TokenIds ids = m.tokenizer->encode(
      "Shall I compare thee to a summer's day? Thou art more lovely and more temperate. Now is "
      "the winter of our discontent made glorious summer by this sun of York;");
  REQUIRE(static_cast<int64_t>(ids.size()) >= n);
  ids.resize(static_cast<size_t>(n));
  return ids;
}

std::string greedy_text(const fs::path& run, const std::string& prompt, int n) {
  const fs::path file = run.parent_path() / "prompt.txt";
  std::ofstream(file, std::ios::binary) << prompt;
  return test::attend_stdout("sample --checkpoint " + run.string() + " --prompt_file " +
                             file.string() + " --temperature 0 --max_new_tokens " +
                             std::to_string(n));
}

// The three shapes the issue names: a Llama with GQA (tied and untied) and a GPT-2.
const std::string kLlamaTied =
    "--preset llama-char --n_layer 2 --n_head 4 --n_kv_head 2 --n_embd 32 --block_size 48";
const std::string kLlamaUntied = kLlamaTied + " --tie_embeddings false";
const std::string kGpt2 = "--n_layer 2 --n_head 2 --n_embd 32 --block_size 48 --tokenizer bpe:300";
// Rows of two Q8_0 blocks: llama.cpp's AMX kernels compute NaN on rows of one (export warns,
// tested below), so the formats are compared on a model where every llama.cpp build is right.
const std::string kLlamaC64 =
    "--preset llama-char --n_layer 2 --n_head 4 --n_kv_head 2 --n_embd 64 --block_size 48 "
    "--tie_embeddings false";

}  // namespace

TEST_CASE("gguf: export then import gives the checkpoint back bit for bit (F32)") {
  const fs::path dir = test::temp_dir("gguf_rt");
  for (const std::string& flags : {kLlamaUntied, kGpt2, kGpt2 + " --bias false"}) {
    INFO(flags);
    const fs::path run = trained(dir, "a", flags);
    const fs::path g = exported(run, "f32");
    const test::Run i =
        test::attend_cmd("import --from " + g.string() + " --out " + (dir / "b").string());
    REQUIRE_MESSAGE(i.code == 0, i.out);
    CHECK(test::models_differing(run, dir / "b") == 0);
    const train::LoadedModel a = train::load_model(run.string()),
                             b = train::load_model((dir / "b").string());
    CHECK(data::tokenizer_hash(a.tokenizer->spec()) == data::tokenizer_hash(b.tokenizer->spec()));
    CHECK(a.config.model.bias == b.config.model.bias);
    CHECK(a.config.model.tie_embeddings == b.config.model.tie_embeddings);
    CHECK(a.config.model.norm_eps == b.config.model.norm_eps);
    fs::remove_all(dir / "a");
    fs::remove_all(dir / "b");
  }
  fs::remove_all(dir);
}

TEST_CASE("gguf: a Q8_0 export imports as its blocks dequantized, exactly") {
  const fs::path dir = test::temp_dir("gguf_q8");
  const fs::path run = trained(dir, "a", kLlamaUntied);
  const fs::path g = dir / "a_q8_0.gguf";
  const test::Run e = test::attend_cmd("export --checkpoint " + run.string() +
                                       " --format gguf --dtype q8_0 --out " + g.string());
  REQUIRE_MESSAGE(e.code == 0, e.out);
  // C 32: the matrices read by C-wide rows are one block (docs/formats.md, llama.cpp's AMX).
  const size_t warned = e.out.find("rows of one block (32 values):");
  REQUIRE(warned != std::string::npos);
  CHECK(e.out.find(" blk.0.attn_q.weight", warned) != std::string::npos);
  CHECK(e.out.find(" blk.0.ffn_down.weight", warned) == std::string::npos);  // rows of 352
  const io::GgufFile f(g);
  CHECK(f.get_uint("general.file_type") == 7);
  CHECK(f.tensors().at("blk.0.attn_q.weight").type == io::GgmlType::q8_0);
  CHECK(f.tensors().at("blk.0.attn_norm.weight").type == io::GgmlType::f32);  // norms stay f32
  REQUIRE(test::attend_cmd("import --from " + g.string() + " --out " + (dir / "b").string()).code ==
          0);
  // The checkpoint says where its weights came from.
  const std::string source = train::newest_valid_checkpoint(dir / "b").data.meta.source;
  CHECK(source.find(fs::absolute(g).string() + " (GGUF llama;") == 0);
  CHECK(source.find(" q8_0 tensors") != std::string::npos);
  const train::LoadedModel a = train::load_model(run.string()),
                           b = train::load_model((dir / "b").string());
  const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    const Tensor w = kernel::contiguous(pa[k].second);
    Tensor want = w;
    if (w.shape().size() == 2) {  // every matrix: its Q8_0 blocks, dequantized
      std::vector<uint8_t> blocks(static_cast<size_t>(w.numel() / 32 * 34));
      want = empty(w.shape());
      quant::quantize_q8_0(w.data<float>(), w.numel(), blocks.data());
      quant::dequantize_q8_0(blocks.data(), w.numel(), want.data<float>());
    }
    INFO(pa[k].first);
    CHECK(test::bit_identical(pb[k].second, want));
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "gguf: llama.cpp's greedy text and log-probs equal attend's, F32 (Llama tied, untied, GPT-2)") {
  REQUIRE_LLAMA_CPP(pkg);
  const fs::path dir = test::temp_dir("gguf_lc");
  for (const std::string& flags : {kLlamaTied, kLlamaUntied, kGpt2}) {
    INFO(flags);
    const fs::path run = trained(dir, "m", flags);
    const fs::path g = exported(run, "f32");
    const data::TokenIds ids = sample_ids(run, 48);  // a whole block_size
    const Agreement a =
        compare(llama_cpp(pkg, g, {{"tokens", ids}})["logprobs"], attend_logprobs(run, ids));
    MESSAGE(flags, ": worst |log p| gap ", a.worst, ", mean's relative gap ", a.mean_rel);
    // Measured: Llama worst 3.6e-7, mean 1.6e-8; GPT-2 worst 1.0e-5, mean 1.2e-7. GPT-2's
    // GELU in llama.cpp is a table indexed by the f16-rounded input (ggml's GGML_GELU_FP16),
    // hence its 30x wider worst gap; the Llama's SiLU is computed in f32.
    // Bounds a few times the measurement (training and llama.cpp on one thread are
    // deterministic here): the 1e-5 for the mean; the worst token 2e-6 (Llama) and
    // 5e-5 (GPT-2, the GELU table).
    CHECK(a.mean_rel < 1e-5);
    CHECK(a.worst < (flags == kGpt2 ? 5e-5 : 2e-6));
    // Greedy: 16 tokens of prompt and 32 more, within GPT-2's 48 positions; attend's sample
    // continues the same prompt with the same 32 tokens.
    const data::TokenIds prompt_ids(ids.begin(), ids.begin() + 16);
    const nlohmann::json r = llama_cpp(pkg, g, {{"tokens", prompt_ids}, {"generate", 32}});
    const train::LoadedModel m = train::load_model(run.string());
    const std::string prompt = m.tokenizer->decode(prompt_ids);
    const std::string ours = greedy_text(run, prompt, 32);
    const std::string theirs = prompt + m.tokenizer->decode(r["greedy"].get<data::TokenIds>());
    INFO("attend: ", ours, "\nllama.cpp: ", theirs);
    CHECK(ours.find(theirs) != std::string::npos);
    fs::remove_all(run);
  }
  fs::remove_all(dir);
}

TEST_CASE("gguf: llama.cpp agrees within each format's rounding at F16, BF16 and Q8_0") {
  REQUIRE_LLAMA_CPP(pkg);
  const fs::path dir = test::temp_dir("gguf_lc16");
  const fs::path run = trained(dir, "m", kLlamaC64);
  const data::TokenIds ids = sample_ids(run, 48);
  const std::vector<double> ours = attend_logprobs(run, ids);
  for (const std::string dtype : {"f16", "bf16", "q8_0"}) {
    const fs::path g = exported(run, dtype);
    const Agreement a = compare(llama_cpp(pkg, g, {{"tokens", ids}})["logprobs"], ours);
    MESSAGE(dtype, ": worst |log p| gap ", a.worst, ", mean's relative gap ", a.mean_rel);
    // Against attend's f32 model, the weights' rounding plus llama.cpp's rounding of each
    // product's activations to the weights' type (f16, bf16, or Q8_0 blocks of 32 with a
    // scale: ggml's vec_dot kernels for these types take both operands in it; attend keeps
    // f32 activations). Measured on this C 64 model (2026-12-06, Intel Xeon with AMX, and
    // llama.cpp's sapphirerapids build): f16 7.6e-6, bf16 4.5e-5, q8_0 2.1e-4; bounds 4-5x
    // that, all within the 3e-3.
    const double bound = dtype == "f16" ? 3e-5 : dtype == "bf16" ? 2e-4 : 1e-3;
    CHECK(a.mean_rel < bound);
    // Against the file imported back (the same weights in f32), only the activations'
    // rounding remains: measured f16 5.8e-6, bf16 2.0e-5, q8_0 1.4e-4; bounds 4-5x that.
    const fs::path back = dir / ("back_" + dtype);
    REQUIRE(test::attend_cmd("import --from " + g.string() + " --out " + back.string()).code == 0);
    const Agreement same =
        compare(llama_cpp(pkg, g, {{"tokens", ids}})["logprobs"], attend_logprobs(back, ids));
    MESSAGE(dtype, " imported back: worst gap ", same.worst, ", mean's relative gap ",
            same.mean_rel);
    CHECK(same.mean_rel < (dtype == "f16" ? 3e-5 : dtype == "bf16" ? 1e-4 : 6e-4));
  }
  fs::remove_all(dir);
}

TEST_CASE("gguf: a Mistral's sliding window: llama.cpp agrees within the window, export warns") {
  REQUIRE_LLAMA_CPP(pkg);
  const fs::path dir = test::temp_dir("gguf_swa");
  const fs::path run = trained(dir, "m", kLlamaTied + " --sliding_window 24");
  const fs::path out = dir / "m.gguf";
  const test::Run e = test::attend_cmd("export --checkpoint " + run.string() +
                                       " --format gguf --out " + out.string());
  REQUIRE(e.code == 0);
  CHECK(e.out.find("sliding window of 24") != std::string::npos);
  const data::TokenIds ids = sample_ids(run, 24);  // within the window
  const Agreement a =
      compare(llama_cpp(pkg, out, {{"tokens", ids}})["logprobs"], attend_logprobs(run, ids));
  CHECK(a.mean_rel < 1e-5);
  fs::remove_all(dir);
}

TEST_CASE("gguf: llama.cpp tokenizes text as attend does (char and byte-level BPE vocabularies)") {
  REQUIRE_LLAMA_CPP(pkg);
  const fs::path dir = test::temp_dir("gguf_tok");
  for (const std::string& flags : {kLlamaTied, kGpt2}) {
    const fs::path run = trained(dir, "m", flags);
    const fs::path g = exported(run, "f32");
    const std::string text = "Shall I compare thee to a summer's day?\nThou art more lovely";
    const train::LoadedModel m = train::load_model(run.string());
    const nlohmann::json r = llama_cpp(pkg, g, {{"text", text}});
    CHECK(r["tokenized"].get<data::TokenIds>() == m.tokenizer->encode(text));
    fs::remove_all(run);
  }
  fs::remove_all(dir);
}

TEST_CASE("gguf: export refuses what the format or llama.cpp cannot hold, naming it") {
  const fs::path dir = test::temp_dir("gguf_refuse");
  const fs::path run = trained(dir, "m", kLlamaTied);
  const test::Run hf = test::attend_cmd("export --checkpoint " + run.string() +
                                        " --dtype q8_0 --out " + (dir / "hf").string());
  CHECK(hf.code != 0);
  CHECK(hf.out.find("--dtype q8_0 is for --format gguf") != std::string::npos);
  const test::Run shard =
      test::attend_cmd("export --checkpoint " + run.string() +
                       " --format gguf --max_shard_mb 1 --out " + (dir / "x.gguf").string());
  CHECK(shard.code != 0);
  CHECK(!fs::exists(dir / "x.gguf"));
  fs::remove_all(dir);
}
