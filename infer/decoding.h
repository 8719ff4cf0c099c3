// The weights in the form decoding reads them (see tensor/stored_weight.h).
#pragma once

#include <optional>
#include <vector>

#include "nn/layers.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::infer {

// Decoding a token at a time reads every weight once per token. While it lives, every
// Linear of `model` holds W^T in column panels (tensor/stored_weight.h): in f32, as much
// memory again as its weights; made under bf16 products, as bf16 pair words (half that, and
// half the bytes a token reads), which only bf16 products may use. gemm_rows.cpp streams a
// panel row by row with the blocked GEMM's summation order (the same bits as without it),
// and threads split the columns evenly, a share reading its columns of each panel row.
// Panels, not W^T's own rows: measured on a
// 2-core Zen 5 (docs/numbers.md, 2026-12-05), threads splitting W^T's rows each read a share
// of every row, and at 2 threads reading W itself was then 1.2-1.8x faster (stories15m's
// shape to GPT-2 124M); W itself, eight rows at a time through 8x8 transposes, was up to
// 1.5x slower than W^T on one thread. Skipped, with active() false, when the machine has
// less than twice the bytes available (the products then read W itself: the same bits).
// The weights must not change meanwhile: sampling and eval hold one for their work.
//
// Asked for q8_0 (sample's and eval's --weights q8_0), every Linear whose rows are a
// multiple of 32 long holds W as Q8_0 blocks (a quarter of f32's bytes; the values rounded
// to the blocks' grids, so results change: a choice, never a default) and the others f32
// panels, named in a warning; not enough memory for that is an error, not a silent f32.
class DecodingWeights {
 public:
  // format: the one asked for; none: the one products read fastest now
  // (StoredWeight::format_for_products).
  explicit DecodingWeights(nn::Module& model, std::optional<WeightFormat> format = std::nullopt);
  ~DecodingWeights();
  DecodingWeights(const DecodingWeights&) = delete;
  DecodingWeights& operator=(const DecodingWeights&) = delete;
  bool active() const { return !layers_.empty(); }
  int64_t bytes() const { return bytes_; }  // the Linear weights a token reads, in their format

 private:
  std::vector<nn::Linear*> layers_;
  int64_t bytes_ = 0;
};

}  // namespace attend::infer
#pragma GCC visibility pop
