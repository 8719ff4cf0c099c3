#include "train/model_io.h"

#include <map>

#include "train/step.h"

namespace attend::train {

namespace fs = std::filesystem;

LoadedModel load_model(const LoadedCheckpoint& ck) {
  const CheckpointData& d = ck.data;
  LoadedModel m;
  m.config = from_values(d.config);
  m.tokenizer = data::make_tokenizer(d.tokenizer);
  ATTEND_CHECK(m.config.model.vocab_size == m.tokenizer->vocab_size(), ck.path.string(),
               ": /config vocab_size ", m.config.model.vocab_size, " but the tokenizer has ",
               m.tokenizer->vocab_size());
  const std::string bad = first_non_finite(d.model);
  ATTEND_CHECK(bad.empty(), ck.path.string(), ": /model/", bad,
               " holds NaN or infinite values; this model cannot be used");
  m.model = std::make_unique<nn::GPT>(m.config.model, 0);
  std::map<std::string, Tensor> state(d.model.begin(), d.model.end());
  m.model->load_state_dict(state);
  m.model->eval();
  m.step = d.meta.step;
  m.checkpoint = ck.path;
  return m;
}

LoadedModel load_model(const std::string& file_or_run_dir) {
  return load_model(load_checkpoint_or_run(file_or_run_dir));
}

double evaluate_windows(const nn::GPT& model, const fs::path& token_file, int64_t batch_size) {
  data::TokenDataset ds(token_file, model.config.block_size);
  NoGradGuard no_grad;
  const int64_t n = ds.num_windows();
  double total = 0;
  for (int64_t first = 0; first < n; first += batch_size) {
    const int64_t count = std::min(batch_size, n - first);
    data::Batch b = ds.windows(first, count);
    // Every window has T targets, so the mean over all targets is the count-weighted
    // mean of the batch means.
    total += model.forward(b.x, b.y).loss.item() * static_cast<double>(count);
  }
  return total / static_cast<double>(n);
}

double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size, Stream stream) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t k = 0; k < iters; ++k) {
    data::Batch b = ds.random_batch(seed, static_cast<uint64_t>(step), static_cast<uint32_t>(k),
                                    batch_size, stream);
    total += model.forward(b.x, b.y).loss.item();
  }
  model.train();
  return total / static_cast<double>(iters);
}

}  // namespace attend::train
