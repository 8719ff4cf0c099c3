// Sampling text from a trained model, with a key/value cache.
//
// The prompt runs through the model once, filling each layer's cache; every new token
// then costs one position. Tokens are drawn from softmax(logits / temperature) after
// keeping the top_k most likely (0: all) and the smallest set whose probability reaches
// top_p (1: all); temperature 0 takes the most likely token. Token i of a sample uses
// the uniform number of Philox block sample_counter(i) keyed by the seed (stream Sample,
// Note [Random streams]): same seed, same text. The context is the last block_size tokens, as
// nanoGPT's: once the sequence outgrows it, positions shift and each token recomputes the window
// (no cache). A sliding-window model (Mistral) instead decodes on from its rolling caches,
// at any length: its query i never saw keys older than i - W + 1 anyway.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "tensor/random.h"
#include "tensor/stored_weight.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::infer {

struct SampleOptions {
  std::string prompt = "\n";
  int64_t max_new_tokens = 500;
  double temperature = 0.8;
  int64_t top_k = 200;
  double top_p = 1.0;
  uint64_t seed = 1337;
  std::string stop;         // end a sample once its text contains this (it is kept)
  int32_t stop_token = -1;  // end a sample at this token, not emitted (chat: end-of-text)
  // When set, checked before each new token: true ends the sample there (chat's Ctrl-C).
  const std::atomic<bool>* cancel = nullptr;
  int64_t num_samples = 1;  // sample k draws from its own numbers: (seed, k, token i)
  // The weights' format while sampling (infer/decoding.h); none: what the products read
  // fastest (bf16 under bf16 products, else f32; both the model's own bits).
  std::optional<WeightFormat> weights;
};

// Where a sample's time went: the prompt's one forward, then the new tokens.
struct SampleTiming {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prompt_seconds = 0, new_seconds = 0;  // new: from the first draw to the last
  int64_t weight_bytes = 0;                    // the Linear weights a token reads
};

// Sample number `index` (0-based): calls emit with the text of each new token as it is
// drawn; returns the new token ids.
data::TokenIds sample(const nn::GPT& model, const data::Tokenizer& tokenizer,
                      const SampleOptions& options,
                      const std::function<void(const std::string&)>& emit, uint32_t index = 0,
                      SampleTiming* timing = nullptr);

// A conversation decoded on across turns (chat): the tokens so far and the key/value
// caches that hold them, so a turn runs only its own tokens through the model. Holds the
// weights in their decoding format while it lives (infer/decoding.h).
class DecodingWeights;
class Conversation {
 public:
  explicit Conversation(const nn::GPT& model, std::optional<WeightFormat> weights = std::nullopt);
  ~Conversation();
  Conversation(const Conversation&) = delete;
  Conversation& operator=(const Conversation&) = delete;
  // Whether a turn of new_tokens plus a reply of max_new_tokens fits the context after what
  // the conversation holds (a sliding-window model always fits: its caches roll).
  bool fits(int64_t new_tokens, int64_t max_new_tokens) const;
  void reset();  // forget every turn
  // Appends ids (the next turn: the previous reply's end marker, the user's message, the
  // assistant's header) and draws the reply as sample() does, options.prompt unused; the
  // reply joins the conversation. The same numbers as sample(index) draws.
  data::TokenIds reply(const data::Tokenizer& tokenizer, const data::TokenIds& ids,
                       const SampleOptions& options,
                       const std::function<void(const std::string&)>& emit, uint32_t index = 0);
  const data::TokenIds& tokens() const { return seq_; }

 private:
  const nn::GPT& model_;
  std::unique_ptr<DecodingWeights> weights_;
  data::TokenIds seq_;
  std::vector<nn::KVCache> caches_;
};
// Token i of sample k (k = 0 keeps the numbers every earlier attend drew for one sample).
inline PhiloxCounter sample_counter(uint64_t i, uint32_t k = 0) {
  return stream_counter(Stream::Sample, static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), k,
                        0);
}

// One draw from logits (V,) f32 with the options' filters; u in [0, 1).
int32_t choose_token(const float* logits, int64_t V, const SampleOptions& options, double u);

}  // namespace attend::infer
#pragma GCC visibility pop
