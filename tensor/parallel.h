// OpenMP helpers. Kernels parallelise only where the work pays for it; below a grain the
// loop runs serially. Partitioning never changes a result: elementwise work is independent,
// and reductions split into chunks of a fixed size (not a fixed count per thread) that are
// combined in order, so 1 and N threads give bit-identical results.
#pragma once

#include <algorithm>
#include <cstdint>

#include <omp.h>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

inline constexpr int64_t kElementwiseGrain = 1 << 15;  // elements
inline constexpr int64_t kReduceChunk = 1 << 13;       // elements per reduction partial

inline int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

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
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < pieces; ++p) {
    int64_t b = n * p / pieces, e = n * (p + 1) / pieces;
    f(b, e);
  }
}

}  // namespace attend
#pragma GCC visibility pop
