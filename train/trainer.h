// The training loop behind `attend train`.
//
// Each step it (0-based): lr = schedule(it); for each micro-step m the batch and the
// dropout masks are keyed by (seed, it, m); the loss of each micro-step is divided by the
// number of micro-steps and backpropagated (gradients add up); the global gradient norm
// is computed and clipped; a non-finite loss or norm stops the run before the update;
// then the optimizer steps. Evaluation every eval_interval steps: mean loss over
// eval_iters batches of each split, eval mode, no-grad. Checkpoints every
// checkpoint_interval steps, at a new best val loss, at the end and on SIGINT/SIGTERM.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "train/config.h"

namespace attend::train {

struct TrainRequest {
  TrainConfig config;
  std::set<std::string> explicit_fields;  // set by flags or the config file
  std::string run_dir;                    // --out
  std::string resume;                     // --resume RUN_DIR or FILE
};

struct TrainSummary {
  int64_t first_step = 0, last_step = 0;  // steps done before and after this run
  std::vector<double> losses;             // per step of this run
  bool evaluated = false;                 // final_*_loss hold this run's last evaluation
  double final_val_loss = 0, final_train_loss = 0;
  std::filesystem::path last_checkpoint;
  bool interrupted = false;
};

TrainSummary run_training(const TrainRequest& request);

// A model and its tokenizer rebuilt from a checkpoint, in eval mode.
struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  TrainConfig config;
  int64_t step = 0;
};
LoadedModel load_model(const std::filesystem::path& checkpoint);

// The newest checkpoint in a run folder that loads; corrupt ones are skipped with a
// warning. Throws if there is none.
std::filesystem::path newest_valid_checkpoint(const std::filesystem::path& run_dir);
std::vector<std::filesystem::path> list_checkpoints(
    const std::filesystem::path& run_dir);  // oldest first
// A checkpoint file as given, or a run folder's newest valid checkpoint.
std::filesystem::path resolve_checkpoint(const std::string& file_or_run_dir);

// Mean loss over every non-overlapping window of a token file (see TokenDataset::windows).
double evaluate_windows(const nn::GPT& model, const std::filesystem::path& token_file,
                        int64_t batch_size = 8);

}  // namespace attend::train
