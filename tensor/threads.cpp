#include "tensor/threads.h"

#include <omp.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tensor/error.h"
#include "tensor/util.h"

namespace attend {

namespace {
bool g_fixed = false;

// procs_running from /proc/stat, or -1. Read with plain syscalls: this runs at probes.
int procs_running() {
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t at = text.find("\nprocs_running ");
  if (at == std::string::npos) return -1;
  return std::atoi(text.c_str() + at + 15);
}

// One entry of an OMP_* thread list: an integer in [1, 4096] (parse_int's strict rules).
bool valid_count(const std::string& s) {
  try {
    const int64_t v = parse_int(s, "count");
    return v >= 1 && v <= 4096;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

bool threads_fixed() { return g_fixed || std::getenv("OMP_NUM_THREADS") != nullptr; }

void fix_threads(int n) {
  omp_set_num_threads(n);
  g_fixed = true;
}

int machine_threads() {
  static const int n = omp_get_max_threads();
  return n;
}

int idle_cores(int ours, int reads) {
  int fewest = -1;
  for (int k = 0; k < reads; ++k) {
    const int r = procs_running();
    if (r < 0) return -1;
    fewest = fewest < 0 ? r : std::min(fewest, r);
    if (k + 1 < reads) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::max<long>(0, cores - std::max(0, fewest - ours)));
}

int start_threads_for_load() {
  const int max = machine_threads();
  if (threads_fixed() || max <= 1) return omp_get_max_threads();
  const int idle = idle_cores();
  const int n = idle < 0 ? max : std::clamp(idle, 1, max);
  omp_set_num_threads(n);
  return n;
}

std::string omp_env_problem() {
  for (const char* name : {"OMP_NUM_THREADS", "OMP_THREAD_LIMIT"}) {
    const char* v = std::getenv(name);
    if (!v) continue;
    const std::string value = v;
    bool ok = !value.empty();
    size_t from = 0;
    while (ok) {
      const size_t comma = value.find(',', from);
      ok = valid_count(value.substr(from, comma == std::string::npos ? comma : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    if (!ok)
      return str(name, "='", printable(value),
                 "': expected a thread count in [1, 4096] (or a comma-separated list of them)");
  }
  return "";
}

ThreadTuner::ThreadTuner(int max_threads, int probe_every, int start,
                         std::function<int(int)> idle)
    : max_(std::max(1, max_threads)),
      every_(std::max(2, probe_every)),
      current_(std::clamp(start > 0 ? start : omp_get_max_threads(), 1, max_)),
      interval_(every_),
      next_probe_(every_),
      idle_(std::move(idle)) {}

int ThreadTuner::begin_step() {
  ++steps_;
  if (probe_) {  // a probe runs kProbeUnits units
    omp_set_num_threads(probe_);
    return probe_;
  }
  if (max_ > 1 && steps_ >= next_probe_ && recent_.size() >= 3) {
    // Probes cycle through half, double and one thread (one: an intermediate count need
    // not be faster when the cores are busy), skipping those equal to the current count,
    // and more threads while no core is free for them.
    std::vector<int> options;
    for (const int c : {std::max(1, current_ / 2), std::min(max_, current_ * 2), 1})
      if (c != current_ && std::find(options.begin(), options.end(), c) == options.end())
        options.push_back(c);
    const int n = static_cast<int>(options.size());
    for (int k = 0; k < n && !probe_; ++k) {
      const int candidate = options[static_cast<size_t>((probe_kind_ + k) % n)];
      if (candidate > current_ && idle_) {
        const int usable = idle_(current_);  // cores that are ours or free
        if (usable >= 0 && candidate > usable) continue;
      }
      probe_ = candidate, probe_kind_ = probe_kind_ + k + 1;
    }
    if (!probe_) {  // nothing worth trying now: look again later, less often while it lasts
      interval_ = std::min<int64_t>(interval_ * 2, 16 * every_);
      next_probe_ = steps_ + interval_;
    } else {
      ++probes_;
    }
  }
  const int n = probe_ ? probe_ : current_;
  omp_set_num_threads(n);
  return n;
}

namespace {
double median_of(std::vector<double> r) {
  std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
  return r[r.size() / 2];
}
}  // namespace

void ThreadTuner::end_step(double seconds) {
  if (probe_) {
    const double median = median_of(recent_);
    probe_times_.push_back(seconds);
    // A probe twice as slow is judged at once; otherwise after kProbeUnits units, by
    // their median (one unit is noisy: the first after a change wakes sleeping threads).
    if (seconds < 2 * median && probe_times_.size() < kProbeUnits) return;
    seconds = median_of(probe_times_);
    const int tried = probe_;
    probe_ = 0;
    probe_times_.clear();
    baseline_ = median;
    if (seconds < 0.9 * median) {
      current_ = tried, ++switches_;
      recent_.assign(1, seconds);
      baseline_ = 0;
      interval_ = every_;
    } else {
      // A steady machine: probe less. A probe k times slower than the current count cost
      // k - 1 units; waiting 20 (k - 1) units before the next keeps probes under ~5%.
      const double slower = median > 0 ? seconds / median - 1 : 0;
      const int64_t by_cost = static_cast<int64_t>(std::ceil(20 * std::min(slower, 1e4)));
      interval_ = std::max(std::min<int64_t>(interval_ * 2, 16 * every_), by_cost);
    }
    next_probe_ = steps_ + interval_;
    return;
  }
  recent_.push_back(seconds);
  if (recent_.size() > 8) recent_.erase(recent_.begin());
  if (recent_.size() < 3) return;
  // The current count's units got much slower (another process started): probe soon,
  // whatever the interval had grown to.
  const double median = median_of(recent_);
  if (baseline_ <= 0) {
    baseline_ = median;
  } else if (median > 1.3 * baseline_) {
    baseline_ = median;
    interval_ = every_;
    next_probe_ = std::min(next_probe_, steps_ + 1);
  }
}

std::optional<ThreadTuner> command_tuner(int probe_every) {
  if (threads_fixed()) return std::nullopt;
  return ThreadTuner(machine_threads(), probe_every);
}

TunedUnit::TunedUnit(std::optional<ThreadTuner>& tuner)
    : tuner_(tuner ? &*tuner : nullptr), t0_(std::chrono::steady_clock::now()) {
  if (tuner_) tuner_->begin_step();
}

TunedUnit::~TunedUnit() {
  if (tuner_)
    tuner_->end_step(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
}

}  // namespace attend
