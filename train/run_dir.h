// A run folder, everything in it but the checkpoint format (io/checkpoint.h):
//
//   RUN_DIR/ckpt_00000250.h5   checkpoints, named by step (8 digits, so names sort by step)
//   RUN_DIR/metrics.csv        step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s,
//                              eval_train_loss (train_loss: the step's own loss; val_loss
//                              and eval_train_loss: the evaluation's, on eval steps)
//   RUN_DIR/loss.svg           train and val loss against step
//   RUN_DIR/lock               an flock held by the one trainer using the folder; its pid
//   RUN_DIR/data/              the prepared data, when the run prepared it from text
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

// An exclusive flock on RUN_DIR/lock, which holds the owner's pid; a second trainer is
// refused with an error naming that pid. Released when destroyed (or the process dies).
class RunLock {
 public:
  explicit RunLock(const std::filesystem::path& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// ---- checkpoints in the folder ----
std::string checkpoint_name(int64_t step);  // ckpt_00000250.h5
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& run_dir);
// Deletes all but the newest `keep` checkpoints and the one named `also_keep` (if any).
void prune_checkpoints(const std::filesystem::path& run_dir, int64_t keep,
                       const std::string& also_keep);

// Removes ckpt_*.h5.tmp left by a write that was killed (call holding the RunLock).
void remove_stale_temporaries(const std::filesystem::path& run_dir);
// Resuming from an older checkpoint abandons the later ones: they move into
// RUN_DIR/abandoned_after_<step>/ (kept, not deleted), so the folder's newest checkpoint
// is always the live run's and pruning never deletes the live run. Returns what moved.
std::vector<std::filesystem::path> set_aside_later_checkpoints(const std::filesystem::path& run_dir,
                                                               int64_t step);

struct LoadedCheckpoint {
  std::filesystem::path path;
  io::CheckpointData data;
};
// The newest checkpoint of a run folder that loads, loaded once; corrupt ones are skipped
// with a warning. Throws if there is none. (load: for tests, to stage a race; it is given
// the path of the reader's link.)
//
// Note [Readers and pruning]: a trainer prunes old checkpoints every checkpoint_interval
// steps, after the new one is in place, so the folder always holds a loadable checkpoint.
// A reader reads the file it chose
// through a hard link of its own in the run folder (".attend-read.<pid>.<name>", removed
// when it is done; a dead reader's is removed by the next trainer): a file pruned once
// linked stays readable until the reader is done, as the data of a file lives while any
// name does. A file pruned between the listing and the link makes the reader list again
// (a newer one replaced it). Where no link can be made (a read-only folder) the reader
// reads the file itself and lists again if it vanishes meanwhile.
// (An open descriptor would pin it too, but HDF5 failed to open /proc/self/fd/N once the
// file's name was gone: every reader of the race test did.)
LoadedCheckpoint newest_valid_checkpoint(
    const std::filesystem::path& run_dir,
    const std::function<io::CheckpointData(const std::filesystem::path&)>& load = io::load_checkpoint);
// A checkpoint file as given, or a run folder's newest valid checkpoint, loaded (without
// its optimizer state unless with_optimizer).
LoadedCheckpoint load_checkpoint_or_run(const std::string& file_or_run_dir,
                                        bool with_optimizer = true);

// ---- metrics.csv and loss.svg ----
// One row (NaN: not measured at that step, an empty cell in the file).
struct MetricsRow {
  int64_t step = 0;
  double train_loss = NAN, val_loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_s = NAN,
         elapsed_s = NAN, eval_train_loss = NAN;
  // DPO (train/dpo.h): the step's mean reward margin and accuracy, and the evaluation's on
  // the val pairs; empty otherwise.
  double reward_margin = NAN, reward_accuracy = NAN, val_reward_margin = NAN,
         val_reward_accuracy = NAN;
};
// Throws naming the file, line and column of a cell that is not a number. A missing file
// reads as no rows.
std::vector<MetricsRow> read_metrics(const std::filesystem::path& csv);
// Rewrites RUN_DIR/metrics.csv atomically; numbers with 17 significant digits.
void write_metrics(const std::filesystem::path& dir, const std::vector<MetricsRow>& rows);
// RUN_DIR/loss.svg from the rows (atomically): the loss panel (each step's train loss as a
// thin line, the evaluations' train and val losses as points joined), then learning rate
// and gradient norm panels.
void write_loss_plot(const std::filesystem::path& dir, const std::vector<MetricsRow>& rows,
                     bool log_y);

}  // namespace attend::train
#pragma GCC visibility pop
