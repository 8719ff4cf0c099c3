#include "train/progress.h"

#include <omp.h>

#include <unistd.h>

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

namespace attend::train {

namespace {
std::atomic<int> g_stop_signal{0};
// The first SIGINT/SIGTERM asks for a stop after the step (and a checkpoint); the handler
// then steps aside (SA_RESETHAND), so a second one ends the process at once, as Ctrl-C
// usually does. No SA_RESTART: a write blocked on a stdout nobody reads any more (mpirun
// stops forwarding output when it is signalled) returns EINTR instead of blocking again.
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

struct sigaction install(int sig, void (*handler)(int), int flags) {
  struct sigaction act {
  }, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  act.sa_flags = flags;
  ::sigaction(sig, &act, &old);
  return old;
}
}  // namespace

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  const auto t = static_cast<int64_t>(s);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, t % 3600 / 60)
                   : fmt::format("{}m{:02d}s", t / 60, t % 60);
}

Progress::Progress(int64_t max_iters, int64_t tokens_per_step, bool shown)
    : max_iters_(max_iters),
      tokens_per_step_(tokens_per_step),
      shown_(shown),
      tty_(::isatty(STDOUT_FILENO)) {}

double Progress::step_done(int64_t step, double loss, double lr, double grad_norm, double seconds,
                           bool log_line) {
  window_time_ += seconds;
  ++window_steps_;
  const double tok_s = static_cast<double>(tokens_per_step_ * window_steps_) / window_time_;
  // Nothing once a stop signal arrived: under mpirun, SIGTERM also stops the forwarding of
  // output, and a write to the full pipe would block until mpirun's SIGKILL.
  if (!shown_ || g_stop_signal != 0) {
    if (log_line) window_time_ = 0, window_steps_ = 0;
    return tok_s;
  }
  if (log_line && !tty_)
    fmt::print("step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f} {:.0f} tok/s {:.1f} ms/step\n",
               step, max_iters_, loss, lr, grad_norm, tok_s, 1000.0 * window_time_ / window_steps_);
  if (tty_) {
    const int width = 24;
    const int filled =
        static_cast<int>(width * static_cast<double>(step) / std::max<int64_t>(1, max_iters_));
    fmt::print("\r{}/{} [{}{}] loss {:.4f} lr {:.2e} {:.0f} tok/s ETA {}   ", step, max_iters_,
               std::string(filled, '#'), std::string(width - filled, '.'), loss, lr, tok_s,
               format_duration(static_cast<double>(max_iters_ - step) * seconds));
    bar_open_ = true;
  }
  std::fflush(stdout);
  if (log_line) window_time_ = 0, window_steps_ = 0;
  return tok_s;
}

void Progress::close_bar() {
  if (bar_open_) std::printf("\n");
  std::fflush(stdout);
  bar_open_ = false;
}

StopOnSignal::StopOnSignal() {
  g_stop_signal = 0;
  old_int_ = install(SIGINT, on_stop_signal, SA_RESETHAND);
  old_term_ = install(SIGTERM, on_stop_signal, SA_RESETHAND);
  // A closed stdout (a terminal gone, mpirun shutting its forwarding down after a SIGTERM)
  // must not kill the run before it writes its checkpoint: writes fail instead.
  old_pipe_ = install(SIGPIPE, SIG_IGN, 0);
}

StopOnSignal::~StopOnSignal() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

int StopOnSignal::signal() const { return g_stop_signal; }
const char* StopOnSignal::name() const { return g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace attend::train
