#include "train/step.h"

#include <cmath>

#include "tensor/kernels.h"

namespace attend::train {

std::string first_non_finite(const nn::NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    const Tensor c = kernel::contiguous(t);
    bool finite = true;
    dispatch_float(c.dtype(), "first_non_finite", [&]<typename T>() {
      const T* p = c.data<T>();
      for (int64_t i = 0; i < c.numel() && finite; ++i) finite = std::isfinite(p[i]);
    });
    if (!finite) return name;
  }
  return "";
}

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const nn::GPT& model) {
  const nn::NamedTensors named = model.named_parameters();
  if (c.optimizer == "sgd") return std::make_unique<SGD>(named, c.momentum, c.weight_decay);
  ATTEND_CHECK(c.optimizer == "adamw", "--optimizer: must be adamw or sgd, got ", c.optimizer);
  return std::make_unique<AdamW>(named, AdamWOptions{c.beta1, c.beta2, 1e-8, c.weight_decay});
}

LrSchedule make_schedule(const TrainConfig& c) {
  return {c.learning_rate, c.min_lr, c.warmup_iters, c.lr_decay_iters, c.decay_lr};
}

double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step) {
  model.zero_grad();
  const int64_t M = c.gradient_accumulation_steps;
  double loss_sum = 0;
  for (int64_t m = 0; m < M; ++m) {
    model.dropout_context->step = static_cast<uint64_t>(step);
    model.dropout_context->micro_step = static_cast<uint32_t>(m);
    const data::Batch b =
        train_data.random_batch(static_cast<uint64_t>(c.seed), static_cast<uint64_t>(step),
                                static_cast<uint32_t>(m), c.batch_size, Stream::Batch);
    Tensor loss = model.forward(b.x, b.y).loss;
    const double lv = loss.item();
    ATTEND_CHECK(std::isfinite(lv), "step ", step, ": the loss is ", lv, " (micro-step ", m,
                 "); stopping before the update");
    loss_sum += lv;
    mul(loss, 1.0 / static_cast<double>(M)).backward();
  }
  return loss_sum / static_cast<double>(M);
}

StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr) {
  StepResult r;
  r.lr = lr;
  r.loss = accumulate_gradients(model, train_data, c, step);
  r.grad_norm = clip_grad_norm(model.parameters(), c.grad_clip);
  ATTEND_CHECK(std::isfinite(r.grad_norm), "step ", step, ": the gradient norm is ", r.grad_norm,
               "; stopping before the update");
  NoGradGuard no_grad;
  optimizer.step(lr);
  ATTEND_CHECK(optimizer.non_finite().empty(), "step ", step, ": the update at lr ", lr, " made ",
               optimizer.non_finite(), " non-finite (the model diverged); stopping");
  return r;
}

}  // namespace attend::train
