// LoRA: a low-rank update beside a frozen weight (Hu et al. 2021; PEFT's formula).
//
// An adapter on rows [lo, hi) of a Linear's output (its whole output, or one part of a fused
// projection: q, k or v of c_attn, gate or up of Llama's c_fc) adds
//   y[..., lo:hi] += (alpha / R) * dropout(x) A^T B^T       A (R, in), B (hi - lo, R)
// to y = x W^T + b. A starts Kaiming-uniform (PEFT: bound 1/sqrt(in)), B zero, so a fresh
// adapter changes nothing: y + 0 is y, bit for bit. Backward is the composition's (two
// linear products, a scale, a narrow and a cat), so dA and dB need no code of their own.
//
// Targets by name (--lora_targets, comma-separated), on every block:
//   q, k, v   attn.c_attn's query, key or value rows   (both families)
//   o         attn.c_proj                              (both)
//   gate, up  mlp.c_fc's gate or up rows               (Llama's SwiGLU)
//   down      mlp.c_proj                               (Llama)
//   fc, proj  mlp.c_fc, mlp.c_proj                     (GPT-2)
//   head      lm_head, once (not per block)            (an untied head only: a tied one is
//                                                       the embedding too, and a merged
//                                                       adapter would untie them)
// Parameter names: <linear>.lora_<target>.A and .B (transformer.h.0.attn.c_attn.lora_q.A,
// lm_head.lora_head.A).
// Trainable token rows (TokenRows below, GPTConfig::lora_new_tokens) let the tokens a chat
// template added train beside the adapters.
// A model with adapters trains only them: every other parameter is frozen
// (requires_grad false), so no gradient and no optimizer state exists for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

struct GPTConfig;
class GPT;

// An update on rows [lo, hi) of a weight with `in` columns: a LoRA adapter, or the
// trainable token rows below. Linear::forward adds delta(x) to its output's rows [lo, hi);
// a merge adds update() to the weight's rows.
class Adapter : public Module {
 public:
  virtual Tensor delta(const Tensor& x) const = 0;  // (..., in) -> (..., hi - lo)
  virtual Tensor update() const = 0;                // (hi - lo, in), no graph
  int64_t in = 0, lo = 0, hi = 0;
  bool enabled = true;  // false: Linear::forward skips it (AdaptersOff)
};

class LoraAdapter : public Adapter {
 public:
  // An adapter of rank r on rows [lo, hi) of a Linear with `in` inputs.
  LoraAdapter(int64_t in, int64_t lo, int64_t hi, int64_t rank, double alpha, double dropout);
  // (alpha / R) * dropout(x) A^T B^T: (..., in) -> (..., hi - lo).
  Tensor delta(const Tensor& x) const override;
  Tensor update() const override;  // (alpha / R) B A
  Tensor A, B;
  double scale = 1.0;  // alpha / R
  std::shared_ptr<Dropout> drop;
};

// Trainable token rows (GPTConfig::lora_new_tokens; PEFT's trainable_token_indices): the
// rows [lo, hi) of a frozen token table (the embedding, and the LM head, tied or not) plus
// a delta D (hi - lo, C) that trains, zero at the start so the model is the base's bit for
// bit. This is how the tokens a chat template adds learn under LoRA: they start as the mean
// row, all alike, so without it <|im_start|> and <|im_end|> could never be told apart.
// Parameter: <table>.lora_tokens.delta (transformer.wte.lora_tokens.delta).
class TokenRows : public Adapter {
 public:
  TokenRows(int64_t dim, int64_t lo, int64_t hi);
  Tensor delta(const Tensor& x) const override;  // x D^T: the head's logits of rows [lo, hi)
  Tensor update() const override;                // D
  // The embedding's part: (..., C) rows, D[id - lo] for ids in [lo, hi), zeros elsewhere.
  Tensor rows_of(const Tensor& ids) const;
  Tensor D;
};

// While it lives, the model's adapters are switched off: forward is the frozen base's, bit
// for bit (DPO's reference model, without a second copy of the weights).
class AdaptersOff {
 public:
  explicit AdaptersOff(const GPT& model);
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  std::vector<Adapter*> off_;
};

// y with every adapter's delta(x) added to its rows (Linear::forward's last step).
Tensor add_adapters(const Tensor& y, const Tensor& x,
                    const std::vector<std::shared_ptr<Adapter>>& adapters);

// The target names valid for a config's family, in the order above.
std::vector<std::string> lora_target_names(const GPTConfig& c);
// --lora_targets parsed and checked against the family: throws naming the flag and value.
std::vector<std::string> parse_lora_targets(const GPTConfig& c, const std::string& list);
// The adapters' parameters in one block: R (in + rows) for each target.
int64_t lora_parameters_per_layer(const GPTConfig& c);
// The head adapter's: R (C + V) when "head" is a target, else 0.
int64_t lora_head_parameters(const GPTConfig& c);
// The trainable token rows': lora_new_tokens * C, twice for an untied head.
int64_t lora_token_parameters(const GPTConfig& c);

// train --base_weights bf16: every frozen matrix of the model (the 2-D weights: Linear
// layers', the embeddings'; a tied one once) kept as bf16 bits (tensor/dtype.h) in place, so
// the frozen base takes half the bytes. Rounded as the bf16 products round (nearest even, a
// subnormal to zero); linear, linear_cross_entropy and embedding then read the rounded values,
// and give the bits an f32 base holding those values would give. Norm gains and biases
// stay f32. Each f32 buffer goes back to the system as its matrix is converted (the
// storage cache is emptied, tensor/tensor.h). Returns the bytes freed.
int64_t store_frozen_as_bf16(Module& model);

// Adds the config's adapters (lora_rank > 0) to a built model and freezes everything else;
// with gen, draws each A (Kaiming-uniform) and leaves B zero. lora_new_tokens > 0 adds the
// trainable token rows too: one TokenRows on wte, shared by a tied head, or one each. Their dropouts take indices
// after the model's own, so the base's dropout masks do not change.
void add_lora(GPT& model, Generator* gen);

// The weights with every adapter merged in, W[lo:hi] + update() (copies; the model is
// unchanged; a tied table merged once, its names sharing the copy): the state of a plain model (lora_rank 0), every name but the adapters'.
NamedTensors merged_state(const GPT& model);
// A plain model (lora_rank 0) holding merged_state(model): what export --merge writes.
std::unique_ptr<GPT> merge_lora(const GPT& model);

}  // namespace attend::nn
#pragma GCC visibility pop
