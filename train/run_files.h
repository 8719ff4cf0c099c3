// The files of a run folder besides checkpoints: the lock that keeps one trainer per
// folder, metrics.csv and loss.svg.
#pragma once

#include <filesystem>
#include <vector>

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

// One row of metrics.csv: step,train_loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s
// (NaN: not measured at that step, an empty cell in the file).
struct MetricsRow {
  int64_t step;
  double train_loss, val_loss, lr, grad_norm, tokens_per_s, elapsed_s;
};

std::vector<MetricsRow> read_metrics(const std::filesystem::path& csv);
// Rewrites RUN_DIR/metrics.csv (through a temporary file and a rename).
void write_metrics(const std::filesystem::path& dir, const std::vector<MetricsRow>& rows);
// RUN_DIR/loss.svg: train loss per step and val loss at evaluations against step.
void write_loss_plot(const std::filesystem::path& dir, const std::vector<MetricsRow>& rows,
                     bool log_y);

}  // namespace attend::train
