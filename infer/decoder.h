// A token at a time without tensors: GPT's forward for one new position (B 1, T 1) on
// buffers made once, the key/value cache in arrays of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::infer {

// Note [Decoding without tensors]. GPT::forward with caches makes a few dozen tensors a
// layer for one position (outputs, views, shapes, the cache's narrowed stores), and runs its
// norms, adds and activations through kernels built for any shape. For one position that
// bookkeeping, not arithmetic, was the fixed cost of a token: on the main job's model most
// of the time outside the products. Decoder runs the same steps on f32 buffers sized once:
// every step calls the kernel code its tensor op runs for one row (the norms' and SwiGLU's
// rows, GELU, RoPE's row, attention for one query, the products of the layers' stored
// weights), so the logits are GPT::forward's bits, at any thread count (the products and
// attention split work as they do there). It takes the model as sampling has it: eval mode
// (no dropout), f32 parameters, no adapter, no replaced head, every Linear held by an
// infer::DecodingWeights in a format its products take; `unsupported` names what else
// it meets, and sampling then decodes through GPT::forward.
class Decoder {
 public:
  // Empty when the model can be decoded here, else why not (for a debug line).
  static std::string unsupported(const nn::GPT& model);
  explicit Decoder(const nn::GPT& model);  // unsupported(model) must be empty
  // Takes the positions GPT::forward put in `caches` (a prompt's); the next step runs the
  // position after them. The caches are copied, not kept. `more`: the steps the caller
  // expects to run from here (sampling's tokens still to come), so the cache is sized once
  // for them (Note [The cache sized once]); more steps than that regrow it, the same bits.
  void start(const std::vector<nn::KVCache>& caches, int64_t more = 0);
  // The logits (V) of `token` at the next position; valid until the next step or start.
  // Outside the context (past block_size without a sliding window) it throws.
  const float* step(int64_t token);
  int64_t position() const { return position_; }
  // Positions the cache holds before a step regrows it (the kept ones included).
  int64_t capacity() const { return capacity_; }
  // Puts the positions decoded here back into `caches` (replacing what they held), so that
  // GPT::forward continues from them: what it would have kept, the same bits.
  void finish(std::vector<nn::KVCache>& caches) const;

 private:
  // The kept keys and values: a block per layer's keys and one per its values ([K_0 | V_0 |
  // K_1 | V_1 | ...]), each `capacity_` positions of KVH HS floats. The values a row per
  // position (heads side by side): a head's values are a few hundred bytes from rows KVH HS
  // floats apart; with every layer in a position's row (the layout before) they were rows tens
  // of KB apart, which the prefetchers do not follow (GPT-2's shape took 1.4-1.6x as long a
  // layer from 64 keys on: bench_decode_attention, docs/numbers.md 2026-12-07 09:38). The keys
  // as columns (K^T): KVH HS rows of `capacity_`, element j of position t at j capacity_ + t,
  // so the scores' product reads each of a head's HS rows in order, with no 8x8 transposes
  // (kernel::attention_one_query; 1.6-1.8x faster from DRAM on GPT-2's shape than the keys as
  // rows, docs/numbers.md 2026-12-07 16:18; under bf16 products the bits are the columns and
  // the f32 keys rows). One mapping (past 2 MB, huge pages, Storage's
  // mapping); growing it copies each block's kept rows (values, and the f32 keys under bf16) or
  // columns (keys).
  float* keys(size_t l) const {
    return kv_.data<float>() + static_cast<int64_t>(2 * l) * capacity_ * kvd_;
  }
  float* values(size_t l) const { return keys(l) + capacity_ * kvd_; }
  // Under bf16 products, the same rows again as bf16 bits (kvb_, laid out as kv_), which
  // attention reads: Note [A bf16 cache beside the f32 one].
  uint16_t* key_bits(size_t l) const {
    return kvb_.data<uint16_t>() + static_cast<int64_t>(2 * l) * capacity_ * kvd_;
  }
  uint16_t* value_bits(size_t l) const { return key_bits(l) + capacity_ * kvd_; }
  // Element j of position t's f32 key in a layer's block `k`: a column, or under bf16 products
  // (attention reading the bits) a row as the values (Note [A bf16 cache beside the f32 one]).
  template <typename F>
  F& key_at(F* k, int64_t t, int64_t j) const {
    return key_columns_ ? k[j * capacity_ + t] : k[t * kvd_ + j];
  }
  // Room for `capacity` rows, the kept rows moved to the front.
  void regrow(int64_t capacity);
  // The capacity to regrow to for `needed` rows, or for `expected` ones (start's) if more.
  int64_t rows_for(int64_t needed, int64_t expected = 0) const;
  void product(const nn::Linear& lin, const float* x, float* y) const;
  void run(int64_t token);  // step's work, once its checks have passed

  const nn::GPT& model_;
  const int64_t C_, NH_, KVH_, HS_, H_, V_, window_;
  int64_t capacity_ = 0;   // rows a layer's arrays hold
  int64_t start_ = 0;      // the first kept row (the same in every layer)
  int64_t length_ = 0;     // rows kept now
  int64_t position_ = 0;   // the next position
  size_t layers_ = 0;
  int64_t kvd_ = 0;  // KVH HS: a layer's key (or value) row
  Tensor kv_;        // (2 L, capacity, kvd_)
  bool bf16_ = false;  // bf16 products when made: kvb_ kept
  bool key_columns_ = true;  // the f32 keys as columns (attention reads them), else as rows
  Tensor kvb_;               // (2 L, capacity, kvd_) bf16 as flat whole huge pages, or undefined
  std::vector<uint16_t> key_row_;  // a new key's bits, before they go to their columns
  std::vector<float> x_, h_, qkv_, rot_, att_, y_, mlp_, act_, logits_;
};

}  // namespace attend::infer
#pragma GCC visibility pop
