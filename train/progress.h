// What the trainer shows while it runs, and how it is stopped.
//
// Progress: on a terminal, one progress bar line redrawn each step (step, loss, lr,
// tokens/s, ETA); otherwise one log line per log_interval steps. Both on stdout (data:
// the run's numbers); diagnostics go through spdlog to stderr.
// StopOnSignal: while alive, SIGINT and SIGTERM set a flag instead of killing the
// process, so the loop can finish its step and write a checkpoint; SIGPIPE is ignored.
#pragma once

#include <signal.h>
#include <chrono>

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

namespace attend::train {

class Progress {
 public:
  // shown = false: counts, prints nothing (the ranks other than 0 of a distributed run).
  Progress(int64_t max_iters, int64_t tokens_per_step, bool shown = true);
  // After a step: its loss, lr, gradient norm and duration. Returns the tokens/s of the
  // current logging window.
  double step_done(int64_t step, double loss, double lr, double grad_norm, double seconds,
                   bool log_line);
  void close_bar();  // before anything else is printed

 private:
  int64_t max_iters_, tokens_per_step_;
  bool shown_, tty_, bar_open_ = false;
  double window_time_ = 0;
  int64_t window_steps_ = 0;
};

// "1h05m" or "4m07s".
std::string format_duration(double seconds);

class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  int signal() const;  // 0 while none arrived
  const char* name() const;

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_pipe_{};
};

// Seconds since construction.
class Stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace attend::train

namespace attend::train {

// Picks the OpenMP thread count as a run goes. Results do not depend on it (every kernel
// is bit-identical at any thread count, tested), so the count may change between steps.
// Every `probe_every` steps one step runs with another count (half, double, or one thread,
// in turn, within [1, max_threads]); if it took less than 0.9 of the median of the current
// count's recent steps, that count becomes the current one.
// On a machine whose cores are busy with other work, fewer threads than cores often win:
// an OpenMP barrier waits for the slowest thread, and a thread sharing a core with another
// process is slow.
class ThreadTuner {
 public:
  explicit ThreadTuner(int max_threads, int probe_every = 16);
  // The count for the next step (already set with omp_set_num_threads).
  int begin_step();
  void end_step(double seconds);
  int current() const { return current_; }
  int switches() const { return switches_; }

 private:
  int max_, every_, current_, probe_ = 0, switches_ = 0;
  int64_t steps_ = 0, interval_, next_probe_;
  int probe_kind_ = 0;
  std::vector<double> recent_;  // the current count's last step times
};

}  // namespace attend::train
