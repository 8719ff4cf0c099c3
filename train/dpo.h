// Direct preference optimisation (DPO; Rafailov et al. 2023), the loss `train --dpo` uses.
//
// For a pair (prompt x, chosen y_w, rejected y_l), with log pi(y | x) the sum of the
// response's token log-probabilities (its end marker included; GPT::sequence_log_probs)
// under the policy being trained and log ref(y | x) under a frozen reference model:
//   r_w = beta (log pi(y_w|x) - log ref(y_w|x))        the chosen response's implicit reward
//   r_l = beta (log pi(y_l|x) - log ref(y_l|x))        the rejected one's
//   loss = -log sigmoid(r_w - r_l),  averaged over the batch's pairs
// Logged beside it: the reward margin r_w - r_l and the accuracy, the fraction of pairs
// with r_w > r_l. The reference is a model of its own (--ref, or the --init_from weights
// the policy started from) or, for a LoRA run, the policy itself with its adapters off:
// the frozen base, without a second copy of the weights. The reference runs in eval mode
// (no dropout) and without a graph.
//
// The loss and its derivatives with respect to the 2B sequence log-probabilities are
// formed in f64 from those values (softplus and sigmoid written stably); backward then
// runs once, from sum_i g_i log pi_i with g the derivatives: the chain rule, one graph.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "nn/gpt.h"
#include "train/dist.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::train {

// Sums over a batch's pairs (divide by `pairs` for means).
struct DpoStats {
  double loss = 0, margin = 0, correct = 0;
  int64_t pairs = 0;
  DpoStats& operator+=(const DpoStats& o) {
    loss += o.loss, margin += o.margin, correct += o.correct, pairs += o.pairs;
    return *this;
  }
};

// The DPO terms of B pairs from the 2B log-probabilities of each side (rows 0..B-1 chosen,
// B..2B-1 rejected): the sums above, and in grad the derivative of the batch's mean loss
// with respect to each of the 2B policy log-probabilities.
DpoStats dpo_terms(const std::vector<double>& policy, const std::vector<double>& reference,
                   double beta, std::vector<double>* grad = nullptr);

// The reference's log-probabilities of a batch's rows: `reference`, or when null the policy
// with its LoRA adapters off. Eval mode and no graph; the policy's mode is restored.
std::vector<double> reference_log_probs(nn::GPT& policy, const nn::GPT* reference,
                                        const data::Batch& batch);

// One micro-step: the reference's and the policy's log-probabilities of the batch's pairs,
// the DPO terms, and backward of `scale` times the batch's mean loss into the policy's
// gradients (accumulated onto what they hold). Returns the sums.
DpoStats dpo_backward(nn::GPT& policy, const nn::GPT* reference, const data::Batch& batch,
                      double beta, double scale);

// The trainer's estimate over `iters` random batches of pairs (eval mode, no graph), split
// across dist's ranks as estimate_loss is: the same bits at any world size.
DpoStats estimate_dpo(nn::GPT& policy, const nn::GPT* reference, const data::TokenDataset& ds,
                      double beta, uint64_t seed, int64_t step, int64_t iters, int64_t batch_size,
                      Stream stream, Dist& dist);

}  // namespace attend::train
#pragma GCC visibility pop
