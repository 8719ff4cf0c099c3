#include "train/model_io.h"

#include "nn/lora.h"

#include <spdlog/fmt/fmt.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "io/checkpoint.h"
#include "nn/summary.h"
#include "tensor/kernels.h"
#include "tensor/threads.h"
#include "tensor/util.h"

#include "train/step.h"

namespace attend::train {

namespace fs = std::filesystem;

LoadedModel load_model(const LoadedCheckpoint& ck) {
  const io::CheckpointData& d = ck.data;
  LoadedModel m;
  m.config = from_values(d.config);
  m.tokenizer = data::make_tokenizer(d.tokenizer);
  ATTEND_CHECK(m.config.model.vocab_size == m.tokenizer->vocab_size(), ck.path.string(),
               ": /config vocab_size ", m.config.model.vocab_size, " but the tokenizer has ",
               m.tokenizer->vocab_size());
  check_config_matches_model(ck, m.config.model);
  const std::string bad = first_non_finite(d.model);
  ATTEND_CHECK(bad.empty(), ck.path.string(), ": /model/", bad,
               " holds NaN or infinite values; this model cannot be used");
  // not initialised: load_state_dict sets every parameter (and throws if one is missing)
  m.model = std::make_unique<nn::GPT>(m.config.model, 0, false);
  std::map<std::string, Tensor> state(d.model.begin(), d.model.end());
  m.model->load_state_dict(state);
  m.model->eval();
  m.step = d.meta.step;
  m.checkpoint = ck.path;
  return m;
}

void check_config_matches_model(const LoadedCheckpoint& ck, const nn::GPTConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(str(ck.path.string(), ": /config: ", e.what()));
  }
  std::set<const TensorImpl*> seen;
  int64_t stored = 0;
  for (const auto& [_, t] : ck.data.model)
    if (seen.insert(t.impl()).second) stored += t.numel();
  const int64_t want = nn::count_parameters(c).total();
  ATTEND_CHECK(stored == want, ck.path.string(), ": /config describes a model of ", want,
               " parameters but /model stores ", stored);
}

// Data prepared with a chat template's special tokens added (data/instructions.h): the
// embedding (and an untied head) of a state gets one row per new token up to V, each the
// mean of the old rows (as Hugging Face's resize_token_embeddings draws them, here without
// noise), so a new token starts as an average token. Returns whether it grew.
bool grow_embedding_rows(std::map<std::string, Tensor>& state, int64_t V) {
  bool grew = false;
  for (const char* name : {"transformer.wte.weight", "lm_head.weight"}) {
    auto it = state.find(name);
    if (it == state.end() || it->second.size(0) >= V) continue;
    const Tensor old = kernel::cast(kernel::contiguous(it->second), DType::F64);
    const int64_t rows = old.size(0), C = old.size(1);
    std::vector<double> mean(static_cast<size_t>(C), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < C; ++j) mean[static_cast<size_t>(j)] += old.data<double>()[r * C + j];
    Tensor grown = empty({V, C}, it->second.dtype());
    const Tensor src = kernel::contiguous(it->second);
    std::copy_n(static_cast<const char*>(src.raw_data()),
                static_cast<size_t>(rows * C) * dtype_size(src.dtype()),
                static_cast<char*>(grown.raw_data()));
    for (int64_t r = rows; r < V; ++r)
      for (int64_t j = 0; j < C; ++j)
        grown.data<float>()[r * C + j] =
            static_cast<float>(mean[static_cast<size_t>(j)] / static_cast<double>(rows));
    it->second = grown;
    grew = true;
    if (std::string(name) == "transformer.wte.weight")
      spdlog::info("embedding grown from {} to {} rows for the data's special tokens", rows, V);
  }
  return grew;
}

std::string weights_hash(const nn::GPT& model, bool base_only) {
  uint64_t h = kFnvOffset;
  for (const auto& [name, t] : model.named_parameters()) {
    if (base_only && name.find(".lora_") != std::string::npos) continue;
    h = fnv1a64(name.data(), name.size(), h);
    // a bf16 base (--base_weights bf16) hashes as its f32 values: as its checkpoint holds it
    if (t.dtype() == DType::BF16) {
      kernel::for_each_f32_block(t, 1 << 16, [&](const float* v, int64_t, int64_t n) {
        h = fnv1a64(v, static_cast<size_t>(n) * sizeof(float), h);
      });
      continue;
    }
    const Tensor c = kernel::contiguous(t);
    h = fnv1a64(c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()), h);
  }
  return fmt::format("{:016x}", h);
}

void complete_lora_base(LoadedCheckpoint& ck) {
  const TrainConfig c = from_values(ck.data.config);
  if (c.model.lora_rank <= 0 || ck.data.model.empty()) return;
  for (const auto& [name, _] : ck.data.model)
    if (name.find(".lora_") == std::string::npos) return;  // it holds its base
  const std::string path = ck.path.string();
  ATTEND_CHECK(!c.init_from.empty() && c.base_hash.size() == 16, path,
               ": holds LoRA adapters only, and its /config names no base to read them onto "
               "(init_from '", printable(c.init_from, 80), "', base_hash '",
               printable(c.base_hash, 20), "'); it cannot be used");
  const std::string again = "; put the base back, or train with --save_base true for "
                            "checkpoints that stand alone";
  // A base may itself be such a checkpoint (train --init_from a LoRA run continues its
  // adapters); a chain that long can only be a loop of crafted files.
  static thread_local int depth = 0;
  ATTEND_CHECK(depth < 8, path, ": its base ", c.init_from, " is the 8th adapter-only LoRA "
               "checkpoint in a row: the init_from entries form a loop");
  struct Deeper {
    Deeper() { ++depth; }
    ~Deeper() { --depth; }
  } deeper;
  LoadedCheckpoint base;
  try {
    base = load_checkpoint_or_run(c.init_from, false);
  } catch (const Error& e) {
    throw Error(str(path, ": holds LoRA adapters only; their base ", c.init_from, " (hash ",
                    c.base_hash, ") cannot be read: ", e.what(), again));
  }
  // The base as the run held it: the position table cropped to block_size, the rows of a
  // template's tokens grown, a bf16 base rounded; then the adapters beside it.
  std::map<std::string, Tensor> state(base.data.model.begin(), base.data.model.end());
  base.data.model.clear();
  // What may grow is bounded by what the files hold before anything is sized from /config:
  // the base's token rows plus the rows the checkpoint's own deltas hold.
  const auto wte = state.find("transformer.wte.weight");
  const int64_t added = c.model.lora_new_tokens;
  ATTEND_CHECK(wte != state.end() && wte->second.dim() == 2 &&
                   wte->second.size(0) + added == c.model.vocab_size,
               path, ": /config vocab_size ", c.model.vocab_size, " with lora_new_tokens ", added,
               " does not fit its base ", c.init_from, " (",
               wte == state.end() ? std::string("no token embedding")
                                  : str("a token embedding of shape ", shape_str(wte->second.shape())),
               ")");
  if (added > 0) {
    const auto delta = std::find_if(ck.data.model.begin(), ck.data.model.end(), [](const auto& e) {
      return e.first == "transformer.wte.lora_tokens.delta";
    });
    ATTEND_CHECK(delta != ck.data.model.end() && delta->second.dim() == 2 &&
                     delta->second.size(0) == added,
                 path, ": /config lora_new_tokens ", added,
                 " but /model holds no delta of that many rows (transformer.wte.lora_tokens.delta)");
  }
  auto wpe = state.find("transformer.wpe.weight");
  if (wpe != state.end() && wpe->second.dim() == 2 && wpe->second.size(0) > c.model.block_size)
    wpe->second = kernel::narrow(wpe->second, 0, 0, c.model.block_size);
  grow_embedding_rows(state, c.model.vocab_size);
  for (auto& [name, t] : ck.data.model) state[name] = t;
  ck.data.model.clear();
  // Before a model is sized from the config: it must describe what base and adapters hold.
  try {
    c.model.validate();
  } catch (const Error& e) {
    throw Error(str(path, ": /config: ", e.what()));
  }
  int64_t stored = 0;
  for (const auto& [name, t] : state)
    if (name != "lm_head.weight" || !c.model.tied_head()) stored += t.numel();
  const int64_t want = nn::count_parameters(c.model).total();
  ATTEND_CHECK(stored == want, path, ": /config describes a model of ", want,
               " parameters, but its adapters and the base ", c.init_from, " hold ", stored);
  nn::GPT model(c.model, 0, nn::GPT::Init::none);
  try {
    model.take_state_dict(std::move(state), c.base_weights == "bf16");
  } catch (const Error& e) {
    throw Error(str(path, ": its base ", c.init_from, " does not fit its adapters: ", e.what()));
  }
  const std::string hash = weights_hash(model, true);
  ATTEND_CHECK(hash == c.base_hash, path, ": holds LoRA adapters only, trained on a base of hash ",
               c.base_hash, "; the base it names, ", c.init_from, ", now has hash ", hash,
               " (it changed after the adapters were trained)", again);
  // As a checkpoint with its base holds it: every name, the base as f32 values.
  for (auto& [name, t] : model.state_dict())
    ck.data.model.emplace_back(name, t.dtype() == DType::BF16 ? kernel::cast(t, DType::F32) : t);
  spdlog::debug("{}: LoRA adapters read onto their base {} (hash {})", path, c.init_from, hash);
}

LoadedModel load_model(const std::string& file_or_run_dir) {
  return load_model(load_checkpoint_or_run(file_or_run_dir, false));  // the model only
}

LoadedModel load_model_merged(const std::string& file_or_run_dir) {
  LoadedModel m = load_model(file_or_run_dir);
  if (m.config.model.lora_rank > 0) {
    m.model = nn::merge_lora(*m.model);
    m.model->eval();
    m.config.model = m.model->config;
    spdlog::info("{}: LoRA adapters merged into the weights for this view", m.checkpoint.string());
  }
  return m;
}

void check_made_by(const data::TokenFile& file, const data::TokenizerSpec& tokenizer) {
  const uint64_t want = data::tokenizer_hash(tokenizer);
  if (file.tokenizer_hash() == 0) {
    spdlog::warn("{}: a version-1 token file records no tokenizer; cannot check that {} made it",
                 file.path().string(), tokenizer.name);
    return;
  }
  ATTEND_CHECK(file.tokenizer_hash() == want, file.path().string(),
               ": made by another tokenizer (hash ", file.tokenizer_hash(), ") than ",
               tokenizer.name, " (hash ", want,
               "); the ids would mean other text. Prepare the text with this tokenizer.");
}

EvalResult evaluate_windows(const nn::GPT& model, const fs::path& token_file, int64_t batch_size) {
  data::TokenDataset ds(token_file, model.config.block_size);
  NoGradGuard no_grad;
  const int64_t n = ds.num_windows();
  double total = 0;
  int64_t scored = 0;  // targets the loss counted (instruction data: the responses')
  auto last = std::chrono::steady_clock::now();
  std::optional<ThreadTuner> tuner = command_tuner();  // Note [Threads on a busy machine]
  for (int64_t first = 0; first < n; first += batch_size) {
    TunedUnit unit(tuner);
    if (std::chrono::steady_clock::now() - last > std::chrono::seconds(5)) {
      spdlog::info("eval: {} of {} windows", first, n);
      last = std::chrono::steady_clock::now();
    }
    const int64_t count = std::min(batch_size, n - first);
    data::Batch b = ds.windows(first, count);
    // The mean over all targets is the mean of the batch means weighted by the targets
    // each counted: T per window of text, the responses' of instruction examples.
    int64_t counted = 0;
    const int64_t* y = b.y.data<int64_t>();
    for (int64_t i = 0; i < b.y.numel(); ++i) counted += y[i] != -100;
    total += model.forward(b.x, b.y).loss.item() * static_cast<double>(counted);
    scored += counted;
  }
  return {total / static_cast<double>(scored), scored};
}

double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size, Stream stream, Dist& dist) {
  NoGradGuard no_grad;
  model.eval();
  // Rank r scores batches r, r + W, ...; each batch's loss comes from one rank, so the
  // exchange is exact and the sum below is one process's.
  std::vector<double> losses(static_cast<size_t>(iters), 0.0);
  for (int64_t k = dist.rank(); k < iters; k += dist.size()) {
    data::Batch b = ds.random_batch(seed, static_cast<uint64_t>(step), static_cast<uint32_t>(k),
                                    batch_size, stream);
    losses[static_cast<size_t>(k)] = model.forward(b.x, b.y).loss.item();
  }
  dist.sum_disjoint(losses);
  double total = 0;
  for (const double l : losses) total += l;
  model.train();
  return total / static_cast<double>(iters);
}

double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size, Stream stream) {
  return estimate_loss(model, ds, seed, step, iters, batch_size, stream, Dist::world());
}

namespace {
// A new run folder, staged and moved into place whole: an existing --out must be empty.
bool import_owns(const std::string&) { return false; }
}  // namespace

std::filesystem::path write_imported(const std::string& out, const nn::GPT& model,
                        const data::TokenizerSpec& tokenizer, const std::string& source) {
  StagedFolder stage(out, "import", import_owns);
  TrainConfig c;
  c.model = model.config;
  c.preset = model.config.is_llama() ? "" : "gpt2";  // no preset made an imported Llama
  c.tokenizer = tokenizer.name;
  const std::unique_ptr<Optimizer> opt = make_optimizer(c, model);  // a fresh AdamW, as train's
  io::CheckpointData d;
  d.config = to_values(c);
  d.model = model.state_dict();
  d.optimizer = {c.optimizer, 0, opt->state()};
  d.seed = static_cast<uint64_t>(c.seed);
  d.tokenizer = tokenizer;
  d.meta.source = source;
  io::save_checkpoint(stage.path() / checkpoint_name(0), d);
  stage.commit();
  return std::filesystem::path(out) / checkpoint_name(0);
}


}  // namespace attend::train
