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
//
// Instruction data (an examples file beside the token file, data/instructions.h): a row is
// one whole example instead, the one the same Philox draw picks (r mod E), cut to T + 1
// tokens: x = its tokens, y = the next ones where they are the response's (position + 1 >=
// its prompt length), else -100 (ignored by the loss), and the batch as wide as its longest
// row (shorter rows padded: x with id 0, which only later positions could see, y with -100).
// An example whose prompt is longer than T has no target and is left out (counted, for the
// caller to say); windows are then the examples in order.
//
// Preference pairs (the examples file says so): a batch of B pairs is 2B rows, row b the
// chosen response of the pair the draw b picks (r mod P), row B + b its rejected one;
// windows are the pairs in order, laid out the same way. A pair whose prompt is longer than
// T is left out whole.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/token_file.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

struct Batch {
  Tensor x, y;  // (B, T) i64; y -100 where a position is not scored
};

class TokenDataset {
 public:
  // Throws if the file has fewer than block_size + 1 tokens (naming both numbers).
  TokenDataset(const std::filesystem::path& path, int64_t block_size);
  Batch random_batch(uint64_t seed, uint64_t step, uint32_t micro_step, int64_t batch_size,
                     Stream stream = Stream::Batch) const;
  int64_t num_windows() const {
    return examples_.empty() ? (file_->size() - 1) / block_size_
                             : static_cast<int64_t>(examples_.size()) / (pairs_ ? 2 : 1);
  }
  bool instructions() const { return !examples_.empty(); }
  bool pairs() const { return pairs_; }  // preference pairs: batches of 2B rows
  // Instruction data: the examples (pairs) left out, their prompt longer than block_size.
  int64_t dropped_examples() const { return dropped_; }
  // Windows [first, first + count) as one batch.
  Batch windows(int64_t first, int64_t count) const;
  const TokenFile& file() const { return *file_; }
  // The token file's content hash, continued over the examples file when there is one: what
  // a resumed run checks its data against.
  uint64_t content_hash() const;
  int64_t block_size() const { return block_size_; }

 private:
  // Rows of whole examples, [start, start + length) with the response from start + prompt.
  struct Example {
    int64_t start, prompt, length;
  };
  Batch example_rows(const std::vector<const Example*>& rows) const;
  std::unique_ptr<TokenFile> file_;
  int64_t block_size_;
  std::vector<Example> examples_;  // instruction data: the usable examples
  int64_t dropped_ = 0;
  bool pairs_ = false;
  std::string index_bytes_;  // the examples file, for content_hash
};

}  // namespace attend::data
#pragma GCC visibility pop
