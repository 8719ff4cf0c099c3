// The thread-count policy (Note [Threads on a busy machine]): the tuner's choices, the
// load sensor, and the environment's thread counts checked like flags.
#include <omp.h>

#include <cstdlib>

#include "tensor/threads.h"
#include "test_util.h"

using namespace attend;

namespace {
// Runs `steps` units whose time with n threads is cost(n); checks each unit gets the
// count the tuner set.
template <typename Cost>
void run_units(ThreadTuner& t, Cost cost, int steps) {
  for (int i = 0; i < steps; ++i) {
    const int n = t.begin_step();
    CHECK(omp_get_max_threads() == n);
    t.end_step(cost(n));
  }
}
}  // namespace

TEST_CASE("ThreadTuner moves to the thread count whose units are faster, and back") {
  const int saved = omp_get_max_threads();
  ThreadTuner t(4, 4, 4, nullptr);
  run_units(t, [](int n) { return 1.0 / n; }, 40);  // an idle machine: more threads are faster
  CHECK(t.current() == 4);
  CHECK(t.switches() == 0);
  run_units(t, [](int n) { return n == 1 ? 0.5 : 1.0; }, 60);  // loaded: one thread is fastest
  CHECK(t.current() == 1);
  run_units(t, [](int n) { return 1.0 / n; }, 60);  // the load went away
  CHECK(t.current() == 4);
  omp_set_num_threads(saved);
}

TEST_CASE("ThreadTuner makes no probe of more threads while the sensor says no core is free") {
  const int saved = omp_get_max_threads();
  int usable = 1;  // two cores, another process on one of them
  ThreadTuner t(2, 4, 1, [&](int) { return usable; });
  int at_two = 0;
  // Two threads would be 50 times slower: they must never be tried while no core is free.
  for (int i = 0; i < 200; ++i) {
    const int n = t.begin_step();
    at_two += n == 2;
    t.end_step(n == 2 ? 0.05 : 0.001);
  }
  CHECK(at_two == 0);
  CHECK(t.current() == 1);
  // A core frees up and two threads are faster: the tuner finds them.
  usable = 2;
  run_units(t, [](int n) { return n == 2 ? 0.0006 : 0.001; }, 200);
  CHECK(t.current() == 2);
  omp_set_num_threads(saved);
}

TEST_CASE("ThreadTuner spaces probes by their cost: a probe 50x slower is followed by ~1000 units") {
  const int saved = omp_get_max_threads();
  ThreadTuner t(2, 8, 1, nullptr);  // no sensor: probes are allowed, and cost 49 units each
  double total = 0;
  for (int i = 0; i < 2000; ++i) {
    const int n = t.begin_step();
    const double s = n == 2 ? 0.05 : 0.001;
    total += s;
    t.end_step(s);
  }
  CHECK(t.current() == 1);
  CHECK(t.probes() <= 3);
  CHECK(total < 1.1 * 2000 * 0.001);  // within 10% of never probing
  omp_set_num_threads(saved);
}

TEST_CASE("the load sensor reads this machine's idle cores") {
  const int idle = idle_cores(0);
  if (idle < 0) ATTEND_SKIP("/proc/stat is not readable here");
  CHECK(idle <= static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

TEST_CASE("OMP_NUM_THREADS and OMP_THREAD_LIMIT are checked like --threads") {
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string keep = saved ? saved : "";
  struct Case {
    const char* value;
    bool ok;
  };
  for (const Case c : {Case{"2", true}, Case{"4,2", true}, Case{"4096", true},
                       Case{"100000", false}, Case{"0", false}, Case{"-1", false},
                       Case{"", false}, Case{"two", false}, Case{"2,", false},
                       Case{"99999999999999999999", false}}) {
    setenv("OMP_NUM_THREADS", c.value, 1);
    const std::string p = omp_env_problem();
    INFO("OMP_NUM_THREADS='", c.value, "': ", p);
    CHECK(p.empty() == c.ok);
    if (!c.ok) CHECK(p.find("OMP_NUM_THREADS") != std::string::npos);
  }
  if (saved) {
    setenv("OMP_NUM_THREADS", keep.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
}
