// with_team's team (Note [One region for many loops], tensor/parallel.h).
#include "tensor/parallel.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor/error.h"

namespace attend::detail {

namespace {

// Looks a waiting thread makes at full speed before it yields its core between looks: the
// team's other threads wait through a token's serial steps (a norm, a few us) and should not
// sleep through them, but on a busy machine a thread that only spun would keep a core from
// the one it waits for (Note [Threads on a busy machine]).
constexpr int kSpins = 1 << 12;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename Ready>
void wait_until(Ready ready) {
  for (int i = 0; !ready(); ++i) {
    if (i < kSpins)
      relax();
    else
      std::this_thread::yield();
  }
}

thread_local Team* t_leading = nullptr;
std::atomic<bool> g_teams{true};

}  // namespace

// The job a leader posts: written before it bumps `generation` (release), read by the other
// threads after they see the bump (acquire). The leader posts the next one only when every
// other thread has acknowledged this one (`acks`), so a job is never rewritten under a reader.
struct Team {
  int size = 1;
  void (*piece)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t pieces = 0;
  bool exit = false;
  alignas(64) std::atomic<uint64_t> generation{0};
  // Each other thread's last acknowledged generation, a line apart: the leader reads them, each
  // thread writes only its own, so a job costs a line's trip each way.
  struct alignas(64) Ack {
    std::atomic<uint64_t> generation{0};
  };
  std::vector<Ack> acks;
  std::mutex error_mutex;
  std::exception_ptr error;  // the first a piece threw

  void keep(std::exception_ptr e) {
    const std::lock_guard lock(error_mutex);
    if (!error) error = std::move(e);
  }
  void post() { generation.fetch_add(1, std::memory_order_release); }
  bool all_done() const {
    const uint64_t g = generation.load(std::memory_order_relaxed);
    for (size_t t = 1; t < static_cast<size_t>(size); ++t)
      if (acks[t].generation.load(std::memory_order_acquire) != g) return false;
    return true;
  }
  void serve(int tid) {
    for (uint64_t seen = 0;;) {
      wait_until([&] { return generation.load(std::memory_order_acquire) != seen; });
      seen = generation.load(std::memory_order_acquire);
      if (exit) return;
      if (tid < pieces) {
        try {
          piece(ctx, tid);
        } catch (...) {
          keep(std::current_exception());
        }
      }
      acks[static_cast<size_t>(tid)].generation.store(seen, std::memory_order_release);
    }
  }
};

Team* leading_team() { return t_leading; }

int team_size(const Team* team) { return team->size; }

void team_run(Team* team, int64_t pieces, void (*piece)(void*, int64_t), void* ctx) {
  ATTEND_INTERNAL_CHECK(pieces >= 1 && pieces <= team->size, "team_run: ", pieces,
                        " pieces for a team of ", team->size);
  team->piece = piece, team->ctx = ctx, team->pieces = pieces;
  team->post();
  t_leading = nullptr;  // a parallel_for inside a piece runs serially, as on the other threads
  try {
    piece(ctx, 0);
  } catch (...) {
    team->keep(std::current_exception());
  }
  t_leading = team;
  // The others' pieces use the caller's stack: wait for them whatever piece 0 did.
  wait_until([&] { return team->all_done(); });
  if (team->error) {
    std::exception_ptr e = std::move(team->error);
    team->error = nullptr;
    std::rethrow_exception(e);
  }
}

bool set_teams(bool on) { return g_teams.exchange(on); }

void with_team(void (*f)(void*), void* ctx) {
  const int n = omp_in_parallel() || t_leading || !g_teams.load(std::memory_order_relaxed)
                    ? 1
                    : omp_get_max_threads();
  if (n <= 1) {
    f(ctx);
    return;
  }
  Team team;
  team.acks = std::vector<Team::Ack>(static_cast<size_t>(n));
  std::exception_ptr failed;
#pragma omp parallel num_threads(n)
  {
    if (omp_get_thread_num() == 0) {
      team.size = omp_get_num_threads();  // OpenMP may give fewer than asked
      t_leading = &team;
      try {
        f(ctx);
      } catch (...) {
        failed = std::current_exception();
      }
      t_leading = nullptr;
      team.exit = true;
      team.post();
    } else {
      team.serve(omp_get_thread_num());
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace attend::detail
