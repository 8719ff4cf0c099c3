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
  // position after them. The caches are copied, not kept.
  void start(const std::vector<nn::KVCache>& caches);
  // The logits (V) of `token` at the next position; valid until the next step or start.
  // Outside the context (past block_size without a sliding window) it throws.
  const float* step(int64_t token);
  int64_t position() const { return position_; }
  // Puts the positions decoded here back into `caches` (replacing what they held), so that
  // GPT::forward continues from them: what it would have kept, the same bits.
  void finish(std::vector<nn::KVCache>& caches) const;

 private:
  // The kept keys and values, position-major: row r of the buffer holds every layer's key
  // and value rows of one position ([k_0 | v_0 | k_1 | v_1 | ...], each KVH HS floats), so a
  // token writes one contiguous stretch, the buffer fills in position order (a mapping past
  // 2 MB takes huge pages as it fills, Storage's mapping), and growing it is one copy.
  // Layer l's keys start at keys(l), a row (stride_ floats) per position.
  float* keys(size_t l) const { return kv_.data<float>() + static_cast<int64_t>(2 * l) * kvd_; }
  float* values(size_t l) const { return keys(l) + kvd_; }
  // Room for `capacity` rows, the kept rows moved to the front.
  void regrow(int64_t capacity);
  int64_t rows_for(int64_t needed) const;  // the capacity to regrow to for `needed` rows
  void product(const nn::Linear& lin, const float* x, float* y) const;

  const nn::GPT& model_;
  const int64_t C_, NH_, KVH_, HS_, H_, V_, window_;
  int64_t capacity_ = 0;   // rows a layer's arrays hold
  int64_t start_ = 0;      // the first kept row (the same in every layer)
  int64_t length_ = 0;     // rows kept now
  int64_t position_ = 0;   // the next position
  size_t layers_ = 0;
  int64_t kvd_ = 0, stride_ = 0;  // KVH HS: a layer's key (or value) row; 2 L kvd_: a position's
  Tensor kv_;                     // (capacity, 2 L kvd_)
  std::vector<float> x_, h_, qkv_, rot_, att_, y_, mlp_, act_, logits_;
};

}  // namespace attend::infer
#pragma GCC visibility pop
