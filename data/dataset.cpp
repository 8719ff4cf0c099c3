#include "data/dataset.h"

#include <algorithm>

#include "data/instructions.h"
#include "tensor/error.h"
#include "tensor/random.h"
#include "tensor/util.h"

namespace attend::data {

TokenDataset::TokenDataset(const std::filesystem::path& path, int64_t block_size)
    : file_(std::make_unique<TokenFile>(path)), block_size_(block_size) {
  ATTEND_CHECK(block_size > 0, "dataset: block_size must be positive, got ", block_size);
  const std::filesystem::path index = path.parent_path() / (path.stem().string() + ".examples");
  std::error_code ec;
  if (std::filesystem::exists(index, ec)) {
    int64_t start = 0;
    index_bytes_ = read_file(index);  // read once: parsed here, hashed by content_hash
    // A pair's two examples share their prompt: both are kept or both left out.
    for (const ExampleSpan& e : parse_examples_file(index_bytes_, index, file_->size(), &pairs_)) {
      if (e.prompt <= block_size)
        examples_.push_back({start, e.prompt, e.length});
      else
        ++dropped_;
      start += e.length;
    }
    ATTEND_CHECK(!examples_.empty(), index.string(), ": every example's prompt is longer than "
                 "block_size ", block_size, "; nothing to train on");
    if (pairs_) dropped_ /= 2;
    return;
  }
  ATTEND_CHECK(file_->size() >= block_size + 1, path.string(), ": ", file_->size(),
               " tokens is too short for block_size ", block_size, " (need at least ",
               block_size + 1, ")");
}

Batch TokenDataset::random_batch(uint64_t seed, uint64_t step, uint32_t micro_step, int64_t B,
                                 Stream stream) const {
  ATTEND_CHECK(B > 0 && B <= 0xffffffff, "dataset: batch_size must be in [1, 2^32), got ", B);
  ATTEND_CHECK(step < (1ull << 56), "dataset: step ", step, " is past the batch stream's 2^56");
  const int64_t T = block_size_;
  if (!examples_.empty()) {
    std::vector<const Example*> rows;
    const uint64_t per = pairs_ ? 2 : 1, n = examples_.size() / per;
    for (int64_t b = 0; b < B; ++b) {
      PhiloxCounter r = philox4x32(
          batch_counter(stream, static_cast<uint32_t>(b), micro_step, step), philox_key(seed));
      const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
      rows.push_back(&examples_[per * (bits % n)]);
    }
    if (pairs_)  // the rejected rows after the chosen ones, in the same order
      for (int64_t b = 0; b < B; ++b) rows.push_back(rows[static_cast<size_t>(b)] + 1);
    return example_rows(rows);
  }
  const uint64_t range = static_cast<uint64_t>(file_->size() - T);  // offsets 0 .. N-T-1
  Batch out{empty({B, T}, DType::I64), empty({B, T}, DType::I64)};
  int64_t* x = out.x.data<int64_t>();
  int64_t* y = out.y.data<int64_t>();
  const PhiloxKey key = philox_key(seed);
  for (int64_t b = 0; b < B; ++b) {
    PhiloxCounter r =
        philox4x32(batch_counter(stream, static_cast<uint32_t>(b), micro_step, step), key);
    const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    const int64_t o = static_cast<int64_t>(bits % range);
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = (*file_)[o + t];
      y[b * T + t] = (*file_)[o + t + 1];
    }
  }
  return out;
}

Batch TokenDataset::windows(int64_t first, int64_t count) const {
  ATTEND_CHECK(first >= 0 && count > 0 && first + count <= num_windows(), "dataset: windows [",
               first, ", ", first + count, ") out of range; the file has ", num_windows(),
               " windows of ", block_size_);
  if (!examples_.empty()) {
    std::vector<const Example*> rows;
    const size_t per = pairs_ ? 2 : 1;
    for (size_t side = 0; side < per; ++side)
      for (int64_t k = 0; k < count; ++k)
        rows.push_back(&examples_[per * static_cast<size_t>(first + k) + side]);
    return example_rows(rows);
  }
  const int64_t T = block_size_;
  Batch out{empty({count, T}, DType::I64), empty({count, T}, DType::I64)};
  int64_t* x = out.x.data<int64_t>();
  int64_t* y = out.y.data<int64_t>();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t o = (first + k) * T;
    for (int64_t t = 0; t < T; ++t) {
      x[k * T + t] = (*file_)[o + t];
      y[k * T + t] = (*file_)[o + t + 1];
    }
  }
  return out;
}

uint64_t TokenDataset::content_hash() const {
  const uint64_t h = file_->content_hash();
  return index_bytes_.empty() ? h : fnv1a64(index_bytes_.data(), index_bytes_.size(), h);
}

Batch TokenDataset::example_rows(const std::vector<const Example*>& rows) const {
  const int64_t B = static_cast<int64_t>(rows.size());
  int64_t W = 1;  // the longest row's inputs: at most T
  for (const Example* e : rows) W = std::max(W, std::min(e->length, block_size_ + 1) - 1);
  Batch out{zeros({B, W}, DType::I64), full({B, W}, -100.0, DType::I64)};
  int64_t* x = out.x.data<int64_t>();
  int64_t* y = out.y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const Example& e = *rows[static_cast<size_t>(b)];
    const int64_t n = std::min(e.length, block_size_ + 1) - 1;  // inputs of this row
    for (int64_t t = 0; t < n; ++t) {
      x[b * W + t] = (*file_)[e.start + t];
      if (t + 1 >= e.prompt) y[b * W + t] = (*file_)[e.start + t + 1];
    }
  }
  return out;
}

}  // namespace attend::data
