// One training step, the only one: the trainer, bench/bench_train and the tests call it.
//
//   for m in 0 .. M-1 (M = gradient_accumulation_steps):
//     batch and dropout masks keyed by (seed, step, m)     see Note [Random streams]
//     loss_m = cross_entropy(model(x_m), y_m);  backward of loss_m / M   (gradients add up)
//   norm = clip_grad_norm(params, grad_clip)                the norm before clipping
//   optimizer.step(lr)                                      under no-grad
// A non-finite loss or norm throws before the update, so the parameters stay as they were.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "nn/gpt.h"
#include "train/config.h"
#include "train/optim.h"

namespace attend::train {

struct StepResult {
  double loss = 0;       // mean of the micro-steps' losses
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the learning rate of the update
};

// The name of the first parameter holding a NaN or an infinity, or "" if all are finite.
std::string first_non_finite(const nn::NamedTensors& tensors);

// The model's optimizer as the config asks (AdamW or SGD over its named parameters).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const nn::GPT& model);
LrSchedule make_schedule(const TrainConfig& c);

// The micro-steps of `step`: zeroes the gradients, then accumulates mean-loss gradients
// over the M micro-steps; returns the mean loss. The model must be in training mode.
double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step);

// accumulate_gradients, clipping, the update at lr = schedule(step); the optimizer checks
// every parameter it writes (a diverging update throws naming the parameter, so no
// non-finite model is ever checkpointed).
StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr);

}  // namespace attend::train
