// Using a trained model: rebuilding it from a checkpoint, and measuring its loss.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "train/config.h"
#include "train/dist.h"
#include "train/run_dir.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

// A model and its tokenizer rebuilt from a checkpoint, in eval mode.
struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  TrainConfig config;
  int64_t step = 0;
  std::filesystem::path checkpoint;
};
LoadedModel load_model(const LoadedCheckpoint& checkpoint);
// A checkpoint file, or a run folder's newest valid checkpoint.
LoadedModel load_model(const std::string& file_or_run_dir);
// The same, LoRA adapters merged into the weights (nn::merge_lora): for the views, which read
// weights (W_o's slices, W_q's rows) as well as activations. sample and eval keep them apart.
LoadedModel load_model_merged(const std::string& file_or_run_dir);

// Checks a checkpoint's /config against its /model before anything is built from it:
// the config is valid and implies exactly the parameters the file stores (so a crafted
// config cannot make us allocate a model the file does not hold).
void check_config_matches_model(const LoadedCheckpoint& checkpoint, const nn::GPTConfig& model);

// A model's weights as one hash (each name, then its bytes, in registration order); base_only:
// every weight but LoRA's (adapters and token rows), the frozen base. A bf16 tensor (a bf16
// base) hashes as its f32 values, as its checkpoint holds it.
std::string weights_hash(const nn::GPT& model, bool base_only = false);

// Data prepared with a chat template's special tokens (data/instructions.h): the embedding
// (and an untied head) in `state` gets one row per new token up to V, each the mean of the
// old rows. Returns whether it grew.
bool grow_embedding_rows(std::map<std::string, Tensor>& state, int64_t V);

// A LoRA checkpoint that holds its adapters only (train --save_base false, the default)
// gets its base: the /config's init_from read (weights only), made what the run held
// (position table cropped, template rows grown, a bf16 base rounded), checked against the
// /config's base_hash, and added, so the checkpoint is then as one holding its base. A
// missing or changed base is refused naming both. Anything else is left as it is.
// load_checkpoint_or_run calls it.
void complete_lora_base(LoadedCheckpoint& checkpoint);

// A token file must have been made by `tokenizer`: refused, naming both, when its
// recorded tokenizer hash differs; a version-1 file (no hash) is used with a warning.
void check_made_by(const data::TokenFile& file, const data::TokenizerSpec& tokenizer);

// Mean loss over every non-overlapping window of a token file (see TokenDataset::windows),
// and how many tokens were scored; progress on stderr every few seconds.
struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
};
EvalResult evaluate_windows(const nn::GPT& model, const std::filesystem::path& token_file,
                            int64_t batch_size = 8);

// The trainer's estimate: mean loss over `iters` random batches of `stream` (EvalTrain or
// EvalVal) at `step`, in eval mode and no-grad; the model is left in training mode. The
// batches are split across `dist`'s ranks; the result is the same bits at any world size.
double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size, Stream stream, Dist& dist);
double estimate_loss(nn::GPT& model, const data::TokenDataset& ds, uint64_t seed, int64_t step,
                     int64_t iters, int64_t batch_size, Stream stream);  // Dist::world()

// RUN/ckpt_00000000.h5 for an imported model (convert/: GPT-2's or a Llama): a fresh AdamW
// state, step 0, in a new run folder staged and moved into place whole (--out must be empty).
std::filesystem::path write_imported(const std::string& out, const nn::GPT& model,
                                     const data::TokenizerSpec& tokenizer,
                                     const std::string& source = "");

}  // namespace attend::train
#pragma GCC visibility pop
