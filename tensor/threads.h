// How many OpenMP threads attend uses, and how the count follows the machine's load.
//
// Note [Threads on a busy machine]
// Every OpenMP region ends at a barrier. When another process holds one of the cores,
// one of the team's threads is often off its core, and every region then waits for a
// scheduler time slice: a command running hundreds of small regions a second (sampling
// a token, scoring a batch of a small model) went 2-70x slower at 2 threads than at 1.
// Results never depend on the count (kernels split work into pieces fixed by the sizes,
// not by the thread count; tested bit for bit), so the count is free to follow the load:
//   - at start (start_threads_for_load), a command takes as many threads as there are
//     cores not running another process right now (/proc/stat's procs_running), at
//     least one: under a CPU hog a one-shot command (attention, diagram, ...) runs on
//     one thread from its first region;
//   - a command that repeats a unit of work (a training step, a sampled token, an eval
//     batch, an ablated head) times the units with a ThreadTuner, which now and then runs
//     one unit at another count and keeps it when it is 10% faster. A probe that was
//     much slower costs that much again at the next probe, so probes get rarer in
//     proportion (their cost stays a few percent), and a probe of more threads is not
//     made while the load sensor says no core is free.
// A count fixed by the user (--threads, OMP_NUM_THREADS) is never changed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

// The user fixed the count (attend --threads N, or OMP_NUM_THREADS in the environment).
bool threads_fixed();
void fix_threads(int n);  // --threads N: omp_set_num_threads(n), and remembered as fixed

// The count OpenMP chose for this machine (the cores this process may use, or
// OMP_NUM_THREADS), read once before attend changes it.
int machine_threads();

// Cores not running another process's thread at the moment: the cores online less
// (procs_running - ours), procs_running from /proc/stat (the least of `reads` reads 0.2 ms
// apart: a start takes three, a tuner's probe one, ~20 us) and `ours` the threads of this
// process counted in it. So, the size of a team that would take no core from anyone; -1
// where /proc/stat cannot be read.
int idle_cores(int ours = 1, int reads = 3);

// Unless the count is fixed: sets the OpenMP count to min(machine_threads(), idle cores),
// at least 1 (a no-op where the load cannot be read). Returns the count set.
int start_threads_for_load();

// OMP_NUM_THREADS and OMP_THREAD_LIMIT checked like the --threads flag (a list of
// integers in [1, 4096]); "" when fine, else the message naming the variable and value.
std::string omp_env_problem();

// Picks the count as a run of similar units goes (see the Note).
class ThreadTuner {
 public:
  // Starts at `start` (0: min(max_threads, omp_get_max_threads())); `idle` tells how
  // many threads a team may have without taking another process's core, given `ours`
  // running now (tests pass their own; nullptr: no sensor, probes always allowed).
  explicit ThreadTuner(int max_threads, int probe_every = 16, int start = 0,
                       std::function<int(int)> idle = [](int ours) { return idle_cores(ours, 1); });
  // The count for the next unit (already set with omp_set_num_threads).
  int begin_step();
  void end_step(double seconds);
  int current() const { return current_; }
  int switches() const { return switches_; }
  int probes() const { return probes_; }

 private:
  int max_, every_, current_, probe_ = 0, switches_ = 0, probes_ = 0;
  int64_t steps_ = 0, interval_, next_probe_;
  static constexpr size_t kProbeUnits = 3;
  std::vector<double> probe_times_;  // the running probe's units
  int probe_kind_ = 0;
  double baseline_ = 0;         // the current count's median when last judged
  std::vector<double> recent_;  // the current count's last unit times
  std::function<int(int)> idle_;
};

// A tuner for a command's repeated units, or none when the user fixed the count.
std::optional<ThreadTuner> command_tuner(int probe_every = 8);

// Times one unit for a tuner (nothing when it is null): begin_step on construction,
// end_step with the elapsed time on destruction.
class TunedUnit {
 public:
  explicit TunedUnit(std::optional<ThreadTuner>& tuner);
  ~TunedUnit();
  TunedUnit(const TunedUnit&) = delete;
  TunedUnit& operator=(const TunedUnit&) = delete;

 private:
  ThreadTuner* tuner_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace attend
#pragma GCC visibility pop
