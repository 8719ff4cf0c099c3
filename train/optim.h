// Optimizers, learning-rate schedules and gradient clipping.
//
// AdamW, PyTorch's semantics (torch.optim.AdamW), for each parameter p with gradient g at
// step t (1-based):
//   p = p - lr * weight_decay * p                    decoupled decay (decayed params only)
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// Weight decay applies to parameters of rank >= 2 (matmul weights, embeddings; the tied
// wte/lm_head tensor is one parameter, decayed and updated once), never to biases or
// LayerNorm gains (nanoGPT's grouping).
//
// SGD with momentum (torch.optim.SGD, dampening 0, not Nesterov):
//   b = momentum b + g (b = g at the first step),  p = p - lr (b + weight_decay p)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update at lr from the parameters' gradients times grad_scale (the clipping factor;
  // AdamW applies it inside its loop, SGD scales the gradients in place first).
  virtual void step(double lr, double grad_scale = 1.0) = 0;
  int64_t steps() const { return steps_; }
  // The first parameter the last step left non-finite (NaN or inf), or "": checked inside
  // the update loop itself, so a diverging run costs no extra pass over the weights.
  const std::string& non_finite() const { return non_finite_; }
  // Named state tensors ("exp_avg.<param>", ...), for checkpoints; restore checks names
  // and shapes.
  virtual nn::NamedTensors state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state, int64_t steps) = 0;
  // For a state whose tensors were written in place (a distributed run's broadcast).
  void set_steps(int64_t steps) { steps_ = steps; }

 protected:
  int64_t steps_ = 0;
  std::string non_finite_;
};

class AdamW : public Optimizer {
 public:
  AdamW(const nn::NamedTensors& params, const AdamWOptions& options);
  void step(double lr, double grad_scale = 1.0) override;
  nn::NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> m_, v_;
  std::vector<bool> decay_;
  AdamWOptions o_;
};

class SGD : public Optimizer {
 public:
  SGD(const nn::NamedTensors& params, double momentum, double weight_decay);
  void step(double lr, double grad_scale = 1.0) override;
  nn::NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  nn::NamedTensors params_;
  std::vector<Tensor> buf_;
  std::vector<bool> decay_;
  double momentum_, weight_decay_;
};

// nanoGPT's schedule: linear warmup over warmup_iters (lr * (it + 1) / (warmup_iters + 1)),
// cosine from lr to min_lr until lr_decay_iters, then min_lr. With decay off, constant lr.
struct LrSchedule {
  double learning_rate = 1e-3, min_lr = 1e-4;
  int64_t warmup_iters = 100, lr_decay_iters = 2000;
  bool decay = true;
  double at(int64_t it) const;
};

// The global L2 norm of the gradients: squares summed in double (8 lanes), in fixed chunks combined
// in parameter order (the same bits at any thread count).
double grad_norm(const std::vector<Tensor>& params);
// The factor clipping multiplies the gradients by: max_norm / (norm + 1e-6) when
// max_norm > 0 and norm > max_norm (PyTorch's clip_grad_norm_), else 1.
double clip_scale(double norm, double max_norm);
// Scales all gradients so that their global L2 norm is at most max_norm (if max_norm > 0)
// and returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace attend::train
#pragma GCC visibility pop
