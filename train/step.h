// One training step, the only one: the trainer, bench/bench_train and the tests call it.
//
//   for m in this rank's block of 0 .. M-1 (M = gradient_accumulation_steps):
//     batch and dropout masks keyed by (seed, step, m)     see Note [Random streams]
//     loss_m = cross_entropy(model(x_m), y_m);  g_m = gradient of loss_m / M
//   gradient = the g_m summed in one fixed tree, across ranks too (Note [Data-parallel
//              training]): the same bits whatever the world size and thread count
//   norm = grad_norm(params)                                logged: before clipping
//   optimizer.step(lr, clip_scale(norm, grad_clip))         under no-grad; the clipping
//                                                           factor applied in its loop
// A non-finite loss or norm throws before the update, so the parameters stay as they were.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "nn/gpt.h"
#include "train/config.h"
#include "train/dist.h"
#include "train/optim.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

struct StepResult {
  double loss = 0;       // mean of the micro-steps' losses
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the learning rate of the update
  // DPO (train/dpo.h): the mean reward margin and accuracy of the step's pairs; else NaN.
  double reward_margin = std::nan(""), reward_accuracy = std::nan("");
};

using nn::first_non_finite;  // nn/module.h

// The model's optimizer as the config asks (AdamW or SGD over its named parameters).
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const nn::GPT& model);
LrSchedule make_schedule(const TrainConfig& c);

// The micro-steps of `step`: leaves in the parameters' gradients the tree sum of the M
// micro-steps' gradients of loss_m / M (this rank's block, then summed across `dist`);
// returns the mean loss, summed in micro-step order. The model must be in training mode.
// Holds up to log2(M/W) + 2 copies of the gradient while it sums (none when M = 1).
// With c.dpo the loss is DPO's on batches of pairs (train/dpo.h) against `reference`, or
// when it is null the model's LoRA base.
double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step, Dist& dist,
                            const nn::GPT* reference = nullptr);
double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step);  // Dist::world()

// The tree sum of micro-steps [lo, hi) of `step` (f32 models) as one flat buffer in
// parameters() order, and the sum of their losses: what one rank contributes. Tests use
// it to check the tree without MPI.
double accumulate_block(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                        int64_t step, int64_t lo, int64_t hi, std::vector<float>& sum);

// accumulate_gradients, clipping, the update at lr = schedule(step); the optimizer checks
// every parameter it writes (a diverging update throws naming the parameter, so no
// non-finite model is ever checkpointed).
StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr, Dist& dist,
                      const nn::GPT* reference = nullptr);
StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr);  // Dist::world()

}  // namespace attend::train
#pragma GCC visibility pop
