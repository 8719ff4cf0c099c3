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

