// The machine's read bandwidth, the roof a token's decoding runs under (issue #40): every
// weight is read once per token, so tokens/s <= bandwidth / bytes of weights. For working
// sets from L2's size to well past the last-level cache, at 1 and 2 threads (each thread
// sums its own contiguous half, as the decoding products split W), the best of several
// passes: GB/s read. A plain reduction the compiler vectorizes (64 independent lanes:
// four AVX-512 or eight AVX2 sums), no stores; once as it is and once with software
// prefetch 8 KB ahead (as the decoding products do). The roof is the better of the two:
// on a 2-core Zen 5 VM (2026-12-07) the prefetched reads were 1.5x the plain ones at 48 MB
// (94.6 against 58.5 GB/s, 2 threads) and 1.2x from DRAM, so a roof from plain reads alone
// flattered every fraction of it. The buffer is a Storage, as a model's weights are (past
// 2 MB: mapped 2 MB aligned, advised as transparent huge pages): in a std::vector (4 KB
// pages, as before 2026-12-07 10:30 UTC) one thread read DRAM at 26-28 GB/s, below the 34
// GB/s the f32 decoding panels read from huge pages, and the roof was under the figures it
// bounds. Columns: MB, the roof at 1 and 2 threads, then the plain and the prefetched
// reads apart.
//
//   build/bench/bench_bandwidth [MAX_MB (default 1024)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/read_bandwidth.h"
#include "tensor/tensor.h"

int main(int argc, char** argv) {
  const size_t max_mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  const attend::Storage held(max_mb << 20);
  float* const buf = static_cast<float*>(held.data);
  std::fill(buf, buf + (max_mb << 20) / 4, 1.0f);
  std::printf("read bandwidth, GB/s (best of the passes); %d cores\n", omp_get_num_procs());
  std::printf("%-10s %-10s %-10s %-10s %-10s %-10s %-10s\n", "MB", "1 thread", "2 threads",
              "1 plain", "2 plain", "1 prefetch", "2 prefetch");
  // powers of two and the sizes half way between (1.5x): a model's weights fall between
  // two of them, where the bandwidth changes most (a last-level cache's edge)
  for (size_t step = 0;; ++step) {
    const size_t kb = (size_t{256} << (step / 2)) * (step % 2 ? 3 : 2) / 2;
    if (kb > max_mb * 1024) break;
    const size_t n = kb * 1024 / 4;
    double best[2][2] = {};  // [prefetch][threads - 1]
    for (int threads = 1; threads <= 2; ++threads)
      for (int pf = 0; pf < 2; ++pf) {
        const int passes = std::max<int>(3, static_cast<int>((size_t{1} << 32) / (n * 4)));
        for (int rep = 0; rep < 3; ++rep) {
          double& b = best[pf][threads - 1];
          b = std::max(b, attend::bench::read_gbs(buf, n, threads, pf != 0, passes));
        }
      }
    std::printf("%-10.2f %-10.1f %-10.1f %-10.1f %-10.1f %-10.1f %-10.1f\n",
                static_cast<double>(kb) / 1024, std::max(best[0][0], best[1][0]),
                std::max(best[0][1], best[1][1]), best[0][0], best[0][1], best[1][0], best[1][1]);
  }
  return 0;
}
