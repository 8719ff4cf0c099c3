#include "data/dataset.h"

#include "tensor/error.h"
#include "tensor/random.h"

namespace attend::data {

TokenDataset::TokenDataset(const std::filesystem::path& path, int64_t block_size)
    : file_(std::make_unique<TokenFile>(path)), block_size_(block_size) {
  ATTEND_CHECK(block_size > 0, "dataset: block_size must be positive, got ", block_size);
  ATTEND_CHECK(file_->size() >= block_size + 1, path.string(), ": ", file_->size(),
               " tokens is too short for block_size ", block_size, " (need at least ",
               block_size + 1, ")");
}

Batch TokenDataset::random_batch(uint64_t seed, uint64_t step, uint32_t micro_step, int64_t B,
                                 Stream stream) const {
  ATTEND_CHECK(B > 0 && B <= 0xffffffff, "dataset: batch_size must be in [1, 2^32), got ", B);
  ATTEND_CHECK(step < (1ull << 56), "dataset: step ", step, " is past the batch stream's 2^56");
  const int64_t T = block_size_;
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

}  // namespace attend::data
