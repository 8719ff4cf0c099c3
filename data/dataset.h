// Batches from a token file.
//
// Random batches: for (step, micro_step), row b of the batch starts at offset
//   o_b = r mod (N - T)   with r the 64 bits of Philox block
//         batch_counter(stream, b, micro_step, step), key seed (Note [Random streams]:
//         stream Batch for training, EvalTrain/EvalVal for the trainer's estimates)
// so a batch is a pure function of (seed, step, micro_step): a run resumed at step k sees
// exactly the batches the uninterrupted run would have. x[b] = t[o_b .. o_b + T),
// y[b] = t[o_b + 1 .. o_b + T], both (B, T) i64.
//
// Sequential windows (a full evaluation pass): window k has x = t[kT .. kT + T),
// y = t[kT + 1 .. kT + T], for k = 0 .. (N - 1) / T - 1: every target counted once.
#pragma once

#include <memory>
#include <utility>

#include "data/token_file.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

struct Batch {
  Tensor x, y;  // (B, T) i64
};

class TokenDataset {
 public:
  // Throws if the file has fewer than block_size + 1 tokens (naming both numbers).
  TokenDataset(const std::filesystem::path& path, int64_t block_size);
  Batch random_batch(uint64_t seed, uint64_t step, uint32_t micro_step, int64_t batch_size,
                     Stream stream = Stream::Batch) const;
  int64_t num_windows() const { return (file_->size() - 1) / block_size_; }
  // Windows [first, first + count) as one batch.
  Batch windows(int64_t first, int64_t count) const;
  const TokenFile& file() const { return *file_; }
  int64_t block_size() const { return block_size_; }

 private:
  std::unique_ptr<TokenFile> file_;
  int64_t block_size_;
};

}  // namespace attend::data
#pragma GCC visibility pop
