#include "train/dpo.h"

#include <cmath>

#include "nn/lora.h"
#include "tensor/kernels.h"
#include "train/dist.h"

namespace attend::train {

namespace {

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor d = kernel::cast(kernel::contiguous(t), DType::F64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// log(1 + e^x) without overflow.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
// 1 / (1 + e^-x) without overflow.
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace

DpoStats dpo_terms(const std::vector<double>& policy, const std::vector<double>& reference,
                   double beta, std::vector<double>* grad) {
  ATTEND_INTERNAL_CHECK(policy.size() == reference.size() && policy.size() % 2 == 0 &&
                            !policy.empty(),
                        "dpo_terms: ", policy.size(), " and ", reference.size(), " rows");
  const size_t B = policy.size() / 2;
  DpoStats s;
  s.pairs = static_cast<int64_t>(B);
  if (grad) grad->assign(policy.size(), 0.0);
  for (size_t i = 0; i < B; ++i) {
    const double r_w = beta * (policy[i] - reference[i]);
    const double r_l = beta * (policy[B + i] - reference[B + i]);
    const double z = r_w - r_l;
    s.loss += softplus(-z);  // -log sigmoid(z)
    s.margin += z;
    s.correct += z > 0 ? 1.0 : 0.0;
    if (grad) {  // d/dz of softplus(-z) is -sigmoid(-z); dz/dlog pi_w = beta, dz/dlog pi_l = -beta
      const double g = -sigmoid(-z) * beta / static_cast<double>(B);
      (*grad)[i] = g;
      (*grad)[B + i] = -g;
    }
  }
  return s;
}

std::vector<double> reference_log_probs(nn::GPT& policy, const nn::GPT* reference,
                                        const data::Batch& batch) {
  NoGradGuard no_grad;
  if (reference) return to_doubles(reference->sequence_log_probs(batch.x, batch.y));
  const bool training = policy.is_training();
  policy.eval();
  std::vector<double> out;
  {
    nn::AdaptersOff base(policy);
    out = to_doubles(policy.sequence_log_probs(batch.x, batch.y));
  }
  if (training) policy.train();
  return out;
}

DpoStats dpo_backward(nn::GPT& policy, const nn::GPT* reference, const data::Batch& batch,
                      double beta, double scale) {
  const std::vector<double> ref = reference_log_probs(policy, reference, batch);
  const Tensor logp = policy.sequence_log_probs(batch.x, batch.y);
  std::vector<double> grad;
  const DpoStats s = dpo_terms(to_doubles(logp), ref, beta, &grad);
  Tensor g = empty({static_cast<int64_t>(grad.size())}, DType::F64);
  for (size_t i = 0; i < grad.size(); ++i) g.data<double>()[i] = grad[i] * scale;
  sum(mul(logp, kernel::cast(g, logp.dtype()))).backward();
  return s;
}

DpoStats estimate_dpo(nn::GPT& policy, const nn::GPT* reference, const data::TokenDataset& ds,
                      double beta, uint64_t seed, int64_t step, int64_t iters, int64_t batch_size,
                      Stream stream, Dist& dist) {
  NoGradGuard no_grad;
  const bool training = policy.is_training();
  policy.eval();
  // Rank r scores batches r, r + W, ...: each batch's sums come from one rank, so the
  // exchange is exact and the sums below are one process's, in batch order.
  std::vector<double> loss(static_cast<size_t>(iters), 0.0), margin(loss), correct(loss);
  for (int64_t k = dist.rank(); k < iters; k += dist.size()) {
    const data::Batch b = ds.random_batch(seed, static_cast<uint64_t>(step),
                                          static_cast<uint32_t>(k), batch_size, stream);
    const std::vector<double> ref = reference_log_probs(policy, reference, b);
    const DpoStats s = dpo_terms(to_doubles(policy.sequence_log_probs(b.x, b.y)), ref, beta);
    const size_t i = static_cast<size_t>(k);
    loss[i] = s.loss, margin[i] = s.margin, correct[i] = s.correct;
  }
  dist.sum_disjoint(loss);
  dist.sum_disjoint(margin);
  dist.sum_disjoint(correct);
  DpoStats total;
  for (size_t i = 0; i < loss.size(); ++i) {
    total.loss += loss[i], total.margin += margin[i], total.correct += correct[i];
    total.pairs += batch_size;
  }
  if (training) policy.train();
  return total;
}

}  // namespace attend::train
