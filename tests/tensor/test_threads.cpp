// The thread-count policy (Note [Threads on a busy machine]): the tuner's choices, the
// load sensor, and the environment's thread counts checked like flags.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensor/parallel.h"
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

TEST_CASE("with_team: parallel_for's pieces on the team's threads, piece p on thread p") {
  // Note [One region for many loops]: inside with_team a parallel_for runs the pieces a region
  // would (the same bounds) without a fork; piece p on thread p; one region for all of them;
  // nested loops serial; exceptions from any piece, or from f, come back to the caller.
  const int saved = omp_get_max_threads();
  for (const int threads : {1, 2, 3}) {
    CAPTURE(threads);
    omp_set_num_threads(threads);
    // The pieces parallel_for makes outside a team, as (begin, end, thread).
    auto pieces_of = [](int64_t n, int64_t grain) {
      std::vector<std::array<int64_t, 3>> got(static_cast<size_t>(max_threads()), {-1, -1, -1});
      std::atomic<int> calls{0};
      parallel_for(n, grain, [&](int64_t b, int64_t e) {
        const int p = calls++;
        if (p < static_cast<int>(got.size()))
          got[static_cast<size_t>(p)] = {b, e, omp_get_thread_num()};
      });
      std::sort(got.begin(), got.end());
      return std::pair(got, calls.load());
    };
    for (const auto& [n, grain] : {std::pair<int64_t, int64_t>{1000, 1}, {7, 3}, {2, 1}, {5, 10}}) {
      CAPTURE(n);
      const auto outside = pieces_of(n, grain);
      std::pair<std::vector<std::array<int64_t, 3>>, int> inside;
      int size = 0;
      with_team([&] {
        size = max_threads();
        inside = pieces_of(n, grain);
        inside = pieces_of(n, grain);  // the same team again: a second post
      });
      CHECK(size == threads);
      CHECK(inside.second == outside.second);
      CHECK(inside.first == outside.first);  // bounds, and piece p on thread p
      if (threads > 1 && n >= 2 * grain)
        CHECK(outside.second == std::min<int64_t>(threads, (n + grain - 1) / grain));
    }
    CHECK(max_threads() == threads);  // the team is gone
    // One region: every loop's thread 1 is the same OS thread as the first's.
    if (threads > 1) {
      std::vector<std::thread::id> ids;
      std::mutex m;
      with_team([&] {
        for (int k = 0; k < 50; ++k)
          parallel_for(2, 1, [&](int64_t b, int64_t) {
            if (b == 1) {
              const std::lock_guard lock(m);
              ids.push_back(std::this_thread::get_id());
            }
          });
      });
      REQUIRE(ids.size() == 50);
      CHECK(std::count(ids.begin(), ids.end(), ids[0]) == 50);
      CHECK(ids[0] != std::this_thread::get_id());
    }
    // A parallel_for inside a piece runs serially on that piece's thread, on every thread.
    with_team([&] {
      std::atomic<int> nested{0}, bad{0};
      parallel_for(threads, 1, [&](int64_t, int64_t) {
        const int me = omp_get_thread_num();
        parallel_for(100, 1, [&](int64_t b, int64_t e) {
          nested += static_cast<int>(e - b);
          if (omp_get_thread_num() != me || b != 0 || e != 100) ++bad;
        });
      });
      CHECK(nested == 100 * threads);
      CHECK(bad == 0);
      // and with_team inside a team is f itself
      int inner = 0;
      with_team([&] { inner = max_threads(); });
      CHECK(inner == threads);
    });
    // Exceptions: from the last piece (another thread's when threads > 1), from the caller's
    // piece, and from f; the team stays usable after a piece threw.
    for (const int64_t thrower : {int64_t{threads - 1}, int64_t{0}}) {
      CAPTURE(thrower);
      int after = 0;
      CHECK_THROWS_WITH(with_team([&] {
                          try {
                            parallel_for(threads, 1, [&](int64_t b, int64_t) {
                              if (b == thrower) throw std::runtime_error("piece");
                            });
                          } catch (const std::runtime_error&) {
                            std::atomic<int> count{0};
                            parallel_for(threads, 1, [&](int64_t b, int64_t e) {
                              count += static_cast<int>(e - b);
                            });
                            after = count;
                            throw std::runtime_error("f");
                          }
                        }),
                        "f");
      CHECK(after == threads);
    }
  }
  omp_set_num_threads(saved);
}
