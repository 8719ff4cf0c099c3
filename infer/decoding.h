// The weights in the form decoding reads them (see tensor/stored_weight.h).
#pragma once

#include <vector>

#include "nn/layers.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::infer {

// Decoding a token at a time reads every weight once per token; (1, in) x W^T reads W
// across its rows, W^T kept contiguous reads it in order (gemm_rows.cpp). While it lives,
// every Linear of `model` holds W^T: in f32, as much memory again as its weights; made
// under bf16 products, as bf16 (half that, and half the bytes a token reads), which only
// bf16 products may use. Skipped, with active() false, when the machine has less than
// twice that available. The weights must not change meanwhile: sampling holds one for its
// generation, nothing else.
class DecodingWeights {
 public:
  explicit DecodingWeights(nn::Module& model);
  ~DecodingWeights();
  DecodingWeights(const DecodingWeights&) = delete;
  DecodingWeights& operator=(const DecodingWeights&) = delete;
  bool active() const { return !layers_.empty(); }

 private:
  std::vector<nn::Linear*> layers_;
};

}  // namespace attend::infer
#pragma GCC visibility pop
