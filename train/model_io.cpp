#include "train/model_io.h"

#include "nn/lora.h"

#include <spdlog/fmt/fmt.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "nn/summary.h"
#include "tensor/threads.h"

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
