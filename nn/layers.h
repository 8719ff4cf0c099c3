// The basic layers, with PyTorch's parameter names and layouts.
//
//   Linear     y = x W^T + b          W (out, in), b (out,)     x (..., in) -> (..., out)
//   Embedding  y = W[ids]             W (V, C)                  ids (...) -> (..., C)
//   LayerNorm  y = (x - mean) / sqrt(var + eps) * w + b over the last dim, eps 1e-5
//   RMSNorm    y = x / sqrt(mean(x^2) + eps) * w over the last dim (Llama's; no mean, no bias)
//   GELU       GPT-2's tanh approximation
//   SwiGLU     packed [gate | up] (..., 2H) -> silu(gate) * up (..., H), Llama's MLP gate
//   Dropout    inverted dropout: each element kept with probability 1-p and scaled by
//              1/(1-p); identity in eval mode or with p = 0
//
// Dropout masks are a pure function of (seed, step, micro-step, the dropout's index in
// its model, element): element e of the mask uses word e % 4 of the Philox block
// dropout_counter(e/4, step, index, micro_step) of stream Dropout (see Note [Random
// streams] in tensor/random.h) with key seed. So
// a run is reproducible and a resumed run draws exactly the masks an uninterrupted run
// would have, whatever the thread count.
#pragma once

#include <memory>
#include <vector>

#include "nn/module.h"
#include "tensor/random.h"
#include "tensor/stored_weight.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

class Adapter;    // nn/lora.h
class TokenRows;  // nn/lora.h

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // x W^T + b, plus each LoRA adapter's update on its rows (nn/lora.h).
  Tensor forward(const Tensor& x) const;
  // Shares w (same shape) as this layer's weight: one tensor, two names.
  void tie_weight(const Tensor& w);
  Tensor weight, bias;  // bias undefined when disabled
  // While a DecodingWeights holds the model: W in the format decoding reads (W^T in f32, or
  // as bf16 bits under bf16 products; tensor/stored_weight.h). Forward without grad then
  // multiplies by it where its format takes x, else by the weight: the same bits either way.
  std::shared_ptr<const StoredWeight> decoding;
  // Registers an adapter under `name` (a LoRA adapter's parameters name.A, name.B).
  void add_adapter(const std::string& name, std::shared_ptr<Adapter> adapter);
  // Uses an adapter another module registered (a tied head's token rows, which are wte's):
  // its parameters keep their one name.
  void share_adapter(std::shared_ptr<Adapter> adapter);
  std::vector<std::shared_ptr<Adapter>> adapters;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);
  // weight's rows, plus the token rows' delta where they are on (nn/lora.h)
  Tensor forward(const Tensor& ids) const;
  // Registers trainable token rows as "lora_tokens" (parameter lora_tokens.delta).
  void add_token_rows(std::shared_ptr<TokenRows> rows);
  Tensor weight;
  std::shared_ptr<TokenRows> tokens;
};

// A normalisation over the last dim with a gain: LayerNorm or RMSNorm (a block holds
// either, as its architecture says).
class Norm : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  virtual const char* kind() const = 0;  // "LayerNorm" or "RMSNorm"
  Tensor weight;
  double eps = 1e-5;
};

class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, bool bias = true, double eps = 1e-5);
  Tensor forward(const Tensor& x) const override;
  const char* kind() const override { return "LayerNorm"; }
  Tensor bias;
};

class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const override { return rms_norm(x, weight, eps); }
  const char* kind() const override { return "RMSNorm"; }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return gelu(x); }
};

class SwiGLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return swiglu(x); }
};

// Where the dropout masks of one model come from; the trainer sets step and micro_step
// before each forward.
struct DropoutContext {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint32_t micro_step = 0;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) const;
  // The mask this module would apply to a tensor of `shape` now (values 0 or 1/(1-p)).
  Tensor mask(const Shape& shape, DType dtype) const;
  // The stream mask() draws from now; p = 0 when the module is off (eval mode or p = 0).
  // Fused kernels take it to draw the same masks themselves.
  DropoutStream stream() const;
  double p;
  std::shared_ptr<DropoutContext> context = std::make_shared<DropoutContext>();
  uint32_t index = 0;  // distinct per dropout in a model (assigned by the model)

 private:
  DropoutStream stream_at_any_mode() const;  // mask()'s stream, whatever the mode
};

// Gives every Dropout under `root` the shared context and its index (in module order).
void attach_dropout_context(Module& root, const std::shared_ptr<DropoutContext>& ctx);

}  // namespace attend::nn
#pragma GCC visibility pop
