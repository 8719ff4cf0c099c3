// A small encoder-decoder transformer, for the two kinds of attention a GPT does not have:
// the encoder's bidirectional self-attention (no mask: every position sees every other,
// rows still sum to 1) and the decoder's cross-attention (queries from the output so far,
// keys and values from the encoder's output, so the weights are Tt x Ts, not square).
// Vaswani et al.'s layout with GPT's pre-LayerNorm blocks and one tied embedding table.
//
//   src (B, Ts), tgt (B, Tt) token ids of one vocabulary
//   e = wte[src] + wpe_enc[0..Ts)
//   per encoder layer:  e = e + attn(ln_1(e))          bidirectional self-attention
//                       e = e + mlp(ln_2(e))
//   e = ln_enc(e)
//   d = wte[tgt] + wpe_dec[0..Tt)
//   per decoder layer:  d = d + attn(ln_1(d))          causal self-attention
//                       d = d + cross(ln_2(d), e)      cross-attention on the encoder
//                       d = d + mlp(ln_3(d))
//   logits = ln_f(d) wte^T,  loss = cross_entropy(logits, targets)
//
// No dropout. Initialised as GPT is (N(0, 0.02), c_proj scaled by 1/sqrt(2 n_layer)).
// train/toy.h trains one on copying or reversing strings; `attend attention --toy` shows it.
#pragma once

#include <vector>

#include "nn/gpt.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

struct Seq2SeqConfig {
  int64_t vocab_size = 32;
  int64_t block_size = 16;  // longest source and longest target
  int64_t n_layer = 2;      // encoder layers, and as many decoder layers
  int64_t n_head = 4;
  int64_t n_embd = 64;
  void validate() const;  // throws naming the field and its value
};

// One AttentionTrace per layer of each kind.
struct Seq2SeqTrace {
  std::vector<AttentionTrace> encoder, decoder, cross;
};

class EncoderBlock : public Module {
 public:
  explicit EncoderBlock(const Seq2SeqConfig& c);
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;  // causal = false
  std::shared_ptr<MLP> mlp;
};

class DecoderBlock : public Module {
 public:
  explicit DecoderBlock(const Seq2SeqConfig& c);
  Tensor forward(const Tensor& x, const Tensor& memory, AttentionTrace* self_trace = nullptr,
                 AttentionTrace* cross_trace = nullptr) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2, ln_3;
  std::shared_ptr<Attention> attn, cross;  // causal self-attention; cross-attention
  std::shared_ptr<MLP> mlp;
};

class Seq2Seq : public Module {
 public:
  explicit Seq2Seq(const Seq2SeqConfig& config, uint64_t seed = 0);
  // Logits (B, Tt, V); the loss when targets (B, Tt) are given.
  GPTOutput forward(const Tensor& src, const Tensor& tgt, const Tensor& targets = Tensor(),
                    Seq2SeqTrace* trace = nullptr) const;
  const Seq2SeqConfig config;
  std::shared_ptr<Embedding> wte, wpe_enc, wpe_dec;
  std::shared_ptr<ModuleList<EncoderBlock>> encoder;
  std::shared_ptr<ModuleList<DecoderBlock>> decoder;
  std::shared_ptr<LayerNorm> ln_enc, ln_f;
};

}  // namespace attend::nn
#pragma GCC visibility pop
