// Toy tasks that show the attention a GPT does not have: a small encoder-decoder
// (nn/seq2seq.h) trained in seconds to copy or to reverse a string of letters. Copying
// makes the cross-attention a diagonal (output position t reads source position t);
// reversing makes it the anti-diagonal (t reads Ts - 1 - t), which the decoder can only
// find through the encoder's bidirectional self-attention (a position must learn its
// distance from the end, which it cannot see under a causal mask).
//
// Vocabulary: the letters a-l (ids 0-11) and '^', the start symbol (id 12). Sources are
// 3 to 8 letters; each training batch has one length (uniform), so no padding is needed.
// Training is deterministic: batches from Philox keyed by (seed, step), AdamW at a constant
// learning rate, one thread count or another giving the same bits.
#pragma once

#include <memory>
#include <string>

#include "nn/seq2seq.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct ToyOptions {
  std::string task = "reverse";  // "copy" | "reverse"
  int64_t steps = 1500;          // loss ~0.0001 on reverse; ~10 s on 2 cores
  int64_t batch_size = 32;
  double learning_rate = 3e-3;
  uint64_t seed = 1;
};

struct ToyModel {
  ToyOptions options;
  std::unique_ptr<nn::Seq2Seq> model;
  double final_loss = 0;  // mean loss of the last 20 steps
};

inline constexpr const char* kToyAlphabet = "abcdefghijkl";
inline constexpr char kToyStart = '^';
inline constexpr int64_t kToyMinLength = 3, kToyMaxLength = 8;

// Throws naming --toy (unknown task), --toy_steps and the other options out of range.
ToyModel train_toy(const ToyOptions& options);

// The answer the task wants: the string itself, or reversed.
std::string toy_answer(const std::string& task, const std::string& source);

// Token ids of a source string; throws naming `flag` for a character outside the
// alphabet or a length outside [kToyMinLength, kToyMaxLength].
std::vector<int32_t> toy_encode(const std::string& source, const std::string& flag);

// The decoder's input for an answer (teacher forcing): the start symbol, then every letter
// of the answer but the last. Position t reads it and should write answer[t].
std::vector<int32_t> toy_decoder_input(const std::string& answer);

// Greedy decoding of as many letters as the source has.
std::string toy_decode(const ToyModel& toy, const std::string& source);

}  // namespace attend::train
#pragma GCC visibility pop
