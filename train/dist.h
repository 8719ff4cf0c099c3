// Data-parallel training over MPI: the process's world and the few collectives the
// trainer needs. Without MPI in the build, or when the process was not started by an MPI
// launcher, the world is one process and every collective is a no-op.
//
// Note [Data-parallel training]
// The same run at any world size W gives the same bits. An optimizer step has M micro-steps
// (gradient_accumulation_steps), whose batches and dropout masks are keyed by
// (seed, step, m) whatever rank runs them (Note [Random streams]); rank r runs the block
// [r*M/W, (r+1)*M/W). The M micro-step gradients g_m are summed in one fixed binary tree,
//   sum(lo, hi) = g_lo                                 if hi - lo == 1
//               = sum(lo, mid) + sum(mid, hi)          mid = lo + (hi - lo) / 2
// whatever W is. When W is a power of two dividing M, every rank's block is a subtree:
// the rank sums it locally (step.cpp), and the levels above are the cross-rank levels of
// sum_blocks: a reduce-scatter by recursive halving (ranks paired at distance 1, 2, 4...,
// each level summing the two halves of the pair's subtree) and an all-gather by recursive
// doubling. IEEE addition is commutative, so a + b computed on either rank of a pair gives
// the same bits; only the association matters, and it is the tree's. Each rank moves
// 2 (W-1)/W of the gradient's bytes, as a ring all-reduce would. Other world sizes are
// refused (no tree can make blocks of both W = 2 and W = 3 subtrees of one tree).
//
// Everything else that crosses ranks is exact in any order: per-micro-step losses and
// per-batch evaluation losses are vectors where each element has one contributing rank
// (sum_disjoint), then summed in index order on every rank, as one process would.
// Rank 0 alone owns the run folder (lock, metrics, checkpoints); the state it loads is
// broadcast. Every blocking collective is watched: a peer that does not answer within
// timeout_s seconds ends the job with a message naming what was awaited (a dead rank
// is noticed sooner, by mpirun).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

class Dist {
 public:
  // The world: MPI's when this build has MPI and an MPI launcher started the process
  // (MPI is initialised on the first call); otherwise one process. A build without MPI
  // started by a launcher with more than one process throws, saying so.
  static Dist& world();
  // Ends MPI if world() started it; main calls it before returning.
  static void finalize();
  static bool built_with_mpi();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }

  // Seconds a rank waits on its peers in one collective before ending the job.
  double timeout_s = 600;
  // What the trainer is doing, for timeout messages ("step 12").
  std::string where;
  // Wall seconds spent in sum_blocks (the gradient exchange, waiting for peers included).
  double exchange_seconds = 0;

  // The cross-rank levels of Note [Data-parallel training]: on entry each rank holds its
  // block's sum, on return every rank holds the sum of all blocks, the same bits on each.
  // The size must be a power of two.
  void sum_blocks(float* data, int64_t n);
  void sum_blocks(double* data, int64_t n);
  // Element-wise sum of vectors in which every element is non-zero on at most one rank
  // (exact, whatever the order).
  void sum_disjoint(std::vector<double>& v);
  // The largest of the ranks' values (to agree on stopping).
  int max(int v);
  // Rank 0's bytes to every rank.
  void broadcast(void* data, size_t bytes);
  void broadcast(std::string& s);
  // Prints `message` (naming this rank) to stderr and ends every rank with `code`.
  [[noreturn]] void abort(const std::string& message, int code = 1);

  Dist(const Dist&) = delete;
  Dist& operator=(const Dist&) = delete;

 private:
  Dist() = default;
  template <typename T>
  void sum_blocks_impl(T* data, int64_t n);
  int rank_ = 0, size_ = 1;
};

// Whether a world of `world` ranks can run `micro_steps` micro-steps per step exactly
// (a power of two dividing it); throws naming both otherwise.
void check_world_size(int world, int64_t micro_steps);

}  // namespace attend::train
#pragma GCC visibility pop
