// The weights in the form decoding reads them (see tensor/stored_weight.h).
#pragma once

#include <optional>
#include <vector>

#include "nn/layers.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::infer {

// Decoding a token at a time reads every weight once per token; (1, in) x W^T reads W
// across its rows, W^T kept contiguous reads it in order (gemm_rows.cpp). While it lives,
// every Linear of `model` holds W^T: in f32, as much memory again as its weights; made
// under bf16 products, as bf16 (half that, and half the bytes a token reads), which only
// bf16 products may use. Skipped, with active() false, when the machine has less than
// twice that available (the products then read W itself: the same bits). The weights must
// not change meanwhile: sampling and eval hold one for their work, nothing else.
//
// f32 W^T only for a model whose f32 weights fit in kTransposeLimit: measured on a 2-core
// Zen 5 (docs/numbers.md, 2026-12-05), W^T decodes a 7M-parameter model (29 MB) ~1.35x
// faster than W, but GPT-2 124M (494 MB, read from DRAM) 1.8x slower at 2 threads: its
// threads split each row of W^T, so both stream every row, where W's rows split in two
// contiguous blocks, one per thread. Bigger f32 models read W as it is (no copy).
//
// Asked for q8_0 (sample's and eval's --weights q8_0), every Linear whose rows are a
// multiple of 32 long holds W as Q8_0 blocks (a quarter of f32's bytes; the values rounded
// to the blocks' grids, so results change: a choice, never a default) and the others W^T in
// f32, named in a warning; not enough memory for that is an error, not a silent f32.
class DecodingWeights {
 public:
  // format: the one asked for; none: the one products read fastest now
  // (StoredWeight::format_for_products).
  explicit DecodingWeights(nn::Module& model, std::optional<WeightFormat> format = std::nullopt);
  ~DecodingWeights();
  DecodingWeights(const DecodingWeights&) = delete;
  DecodingWeights& operator=(const DecodingWeights&) = delete;
  static constexpr int64_t kTransposeLimit = int64_t{64} << 20;  // bytes of f32 weights
  bool active() const { return !layers_.empty(); }
  int64_t bytes() const { return bytes_; }  // the Linear weights a token reads, in their format

 private:
  std::vector<nn::Linear*> layers_;
  int64_t bytes_ = 0;
};

}  // namespace attend::infer
#pragma GCC visibility pop
