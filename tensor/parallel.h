// OpenMP helpers. Kernels parallelise only where the work pays for it; below a grain the
// loop runs serially. Partitioning never changes a result: elementwise work is independent,
// and reductions split into chunks of a fixed size (not a fixed count per thread) that are
// combined in order, so 1 and N threads give bit-identical results.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <omp.h>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

inline constexpr int64_t kElementwiseGrain = 1 << 15;  // elements
inline constexpr int64_t kReduceChunk = 1 << 13;       // elements per reduction partial

// Note [One region for many loops]. A parallel_for is an OpenMP region: a fork and a join,
// 2.9-4.4 us at 2 threads on the 2-core Zen 5 (docs/numbers.md 2026-12-07 19:31), where a
// token of GPT-2 runs 61 of them (4 products and attention a layer, and the head): 4% of a
// bf16 token at 2 threads. with_team(f) runs f on the calling thread inside one region, the
// region's other threads waiting beside it; each parallel_for f calls hands its pieces to
// them (piece p to thread p, as the region's static schedule would) and waits for them: a
// post (a counter the others watch) and an acknowledgement (each thread's own line, which
// only the caller reads), 0.23 us there. A shared count of acknowledgements, reset by the
// caller at each post, took 1.2 us: three trips of contended lines, not two. The pieces are
// the ones a region would run, so the bits are the same. Outside f, and on the team's other
// threads, nothing changes; with one thread, or inside another region, with_team calls f.
namespace detail {
struct Team;
Team* leading_team();  // the team this thread leads (inside with_team's f), or null
int team_size(const Team* team);
// Runs piece(ctx, p) for p in [0, pieces), piece p on the team's thread p (the caller's is
// 0), and returns when all have; rethrows the first exception a piece threw.
void team_run(Team* team, int64_t pieces, void (*piece)(void*, int64_t), void* ctx);
void with_team(void (*f)(void*), void* ctx);
// For measurements (bench_decode_step): off, with_team just calls f and every parallel_for
// is a region of its own, as before teams. Returns the setting it replaced.
bool set_teams(bool on);
}  // namespace detail

inline int max_threads() {
  if (const detail::Team* team = detail::leading_team()) return detail::team_size(team);
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

// Whether a parallel_for here runs on a team (a post, 0.2 us at 2 threads) rather than in a
// region of its own (3 us): for loops worth splitting only at the lower price.
inline bool team_active() { return detail::leading_team() != nullptr; }

// Calls f() with max_threads() threads kept for the parallel_for calls it makes: Note [One
// region for many loops]. f's exception is rethrown once the region has ended.
template <typename F>
void with_team(F&& f) {
  detail::with_team([](void* c) { (*static_cast<std::remove_reference_t<F>*>(c))(); }, &f);
}

// Calls f(begin, end) over [0, n) in contiguous pieces, in parallel when n > grain.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int threads = max_threads();
  if (n <= grain || threads == 1) {
    f(int64_t{0}, n);
    return;
  }
  int64_t pieces = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (detail::Team* team = detail::leading_team()) {
    auto piece = [&](int64_t p) { f(n * p / pieces, n * (p + 1) / pieces); };
    detail::team_run(
        team, pieces, [](void* c, int64_t p) { (*static_cast<decltype(piece)*>(c))(p); }, &piece);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < pieces; ++p) {
    int64_t b = n * p / pieces, e = n * (p + 1) / pieces;
    f(b, e);
  }
}

}  // namespace attend
#pragma GCC visibility pop
