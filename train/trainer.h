// The training loop behind `attend train`.
//
// Each step it (0-based): lr = schedule(it); train_step (train/step.h): micro-steps keyed
// by (seed, it, m), gradients averaged, clipped, the update; a non-finite loss or norm
// stops the run before the update. Evaluation every eval_interval steps: mean loss over
// eval_iters batches of each split, eval mode, no-grad. Checkpoints every
// checkpoint_interval steps, at a new best val loss, at the end and on SIGINT/SIGTERM.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "train/config.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct TrainRequest {
  ResolvedConfig settings;  // with the fields the user set
  std::string run_dir;      // --out
  std::string resume;       // --resume RUN_DIR or FILE
  // Called on rank 0 with the run's settings (resume's included) before the run starts and
  // under the run's precision, which run_training holds for the run (the program logs it).
  std::function<void(const TrainConfig&)> on_start;
};

// What a call of run_training did.
struct TrainOutcome {
  int64_t first_step = 0, last_step = 0;  // steps done before and after this run
  std::vector<double> losses;             // per step of this run
  bool evaluated = false;                 // final_*_loss hold this run's last evaluation
  double final_val_loss = 0, final_train_loss = 0;
  std::filesystem::path last_checkpoint;
  bool interrupted = false;
};

TrainOutcome run_training(const TrainRequest& request);

}  // namespace attend::train
#pragma GCC visibility pop
