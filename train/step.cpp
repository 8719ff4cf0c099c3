#include "train/step.h"

#include <cmath>

#include "tensor/kernels.h"

namespace attend::train {

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const nn::GPT& model) {
  const nn::NamedTensors named = model.named_trainable_parameters();
  if (c.optimizer == "sgd") return std::make_unique<SGD>(named, c.momentum, c.weight_decay);
  ATTEND_CHECK(c.optimizer == "adamw", "--optimizer: must be adamw or sgd, got ", c.optimizer);
  AdamWOptions o;  // eps keeps its default
  o.beta1 = c.beta1, o.beta2 = c.beta2, o.weight_decay = c.weight_decay;
  return std::make_unique<AdamW>(named, o);
}

LrSchedule make_schedule(const TrainConfig& c) {
  return {c.learning_rate, c.min_lr, c.warmup_iters, c.lr_decay_iters, c.decay_lr};
}

namespace {

// Micro-step m of `step`: its batch and dropout masks, forward, and backward of loss / M
// into zeroed gradients. Returns the loss.
double micro_step(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                  int64_t step, int64_t m) {
  model.zero_grad();
  model.dropout_context->step = static_cast<uint64_t>(step);
  model.dropout_context->micro_step = static_cast<uint32_t>(m);
  const data::Batch b =
      train_data.random_batch(static_cast<uint64_t>(c.seed), static_cast<uint64_t>(step),
                              static_cast<uint32_t>(m), c.batch_size, Stream::Batch);
  Tensor loss = model.forward(b.x, b.y).loss;
  const double lv = loss.item();
  ATTEND_CHECK(std::isfinite(lv), "step ", step, ": the loss is ", lv, " (micro-step ", m,
               "); stopping before the update");
  mul(loss, 1.0 / static_cast<double>(c.gradient_accumulation_steps)).backward();
  return lv;
}

// The tree sum of Note [Data-parallel training] over micro-steps [lo, hi), as one flat
// buffer of every parameter's gradient (parameters() order).
template <typename T>
class GradientTree {
 public:
  GradientTree(nn::GPT& model, const data::TokenDataset& d, const TrainConfig& c, int64_t step,
               std::vector<double>& losses)
      : model_(model), data_(d), c_(c), step_(step), losses_(losses), params_(model.trainable_parameters()) {
    for (const Tensor& p : params_) {
      ATTEND_INTERNAL_CHECK(p.dtype() == params_.front().dtype(),
                   "train_step: the parameters must share one dtype");
      numel_ += p.numel();
    }
  }

  std::vector<T> sum(int64_t lo, int64_t hi) {
    if (hi - lo == 1) {
      losses_[static_cast<size_t>(lo)] = micro_step(model_, data_, c_, step_, lo);
      return take_gradients();
    }
    const int64_t mid = lo + (hi - lo) / 2;
    std::vector<T> left = sum(lo, mid);
    const std::vector<T> right = sum(mid, hi);
    T* l = left.data();
    const T* r = right.data();
#pragma omp parallel for simd schedule(static) if (numel_ > (1 << 16))
    for (int64_t i = 0; i < numel_; ++i) l[i] += r[i];
    return left;
  }

  // Puts a flat sum back as the parameters' gradients.
  void give(const std::vector<T>& flat) {
    int64_t at = 0;
    for (const Tensor& p : params_) {
      Tensor g = empty(p.shape(), p.dtype());  // every element written below
      std::copy_n(flat.data() + at, p.numel(), g.data<T>());
      p.set_grad(g);
      at += p.numel();
    }
  }

  int64_t numel() const { return numel_; }

 private:
  std::vector<T> take_gradients() {
    std::vector<T> flat(static_cast<size_t>(numel_), T(0));
    int64_t at = 0;
    for (const Tensor& p : params_) {
      const Tensor g = p.grad();
      if (g.defined()) {
        const Tensor gc = kernel::contiguous(g);
        std::copy_n(gc.data<T>(), p.numel(), flat.data() + at);
      }
      at += p.numel();
    }
    return flat;
  }

  nn::GPT& model_;
  const data::TokenDataset& data_;
  const TrainConfig& c_;
  int64_t step_;
  std::vector<double>& losses_;
  std::vector<Tensor> params_;
  int64_t numel_ = 0;
};

}  // namespace

double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step, Dist& dist) {
  const int64_t M = c.gradient_accumulation_steps, W = dist.size();
  check_world_size(dist.size(), M);
  std::vector<double> losses(static_cast<size_t>(M), 0.0);
  if (M == 1) {  // one leaf: the gradient stays where backward put it
    losses[0] = micro_step(model, train_data, c, step, 0);
  } else {
    dispatch_float(model.trainable_parameters().front().dtype(), "accumulate_gradients", [&]<typename T>() {
      GradientTree<T> tree(model, train_data, c, step, losses);
      const int64_t block = M / W, lo = dist.rank() * block;
      std::vector<T> sum = tree.sum(lo, lo + block);
      dist.sum_blocks(sum.data(), tree.numel());
      tree.give(sum);
    });
    dist.sum_disjoint(losses);
  }
  double loss_sum = 0;
  for (const double l : losses) loss_sum += l;  // in micro-step order, as one process would
  return loss_sum / static_cast<double>(M);
}

double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step) {
  return accumulate_gradients(model, train_data, c, step, Dist::world());
}

double accumulate_block(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                        int64_t step, int64_t lo, int64_t hi, std::vector<float>& sum) {
  std::vector<double> losses(static_cast<size_t>(c.gradient_accumulation_steps), 0.0);
  GradientTree<float> tree(model, train_data, c, step, losses);
  sum = tree.sum(lo, hi);
  double total = 0;
  for (const double l : losses) total += l;
  return total;
}

StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr, Dist& dist) {
  StepResult r;
  r.lr = lr;
  r.loss = accumulate_gradients(model, train_data, c, step, dist);
  r.grad_norm = grad_norm(model.trainable_parameters());
  ATTEND_CHECK(std::isfinite(r.grad_norm), "step ", step, ": the gradient norm is ", r.grad_norm,
               "; stopping before the update");
  NoGradGuard no_grad;
  optimizer.step(lr, clip_scale(r.grad_norm, c.grad_clip));  // clipping inside the update
  ATTEND_CHECK(optimizer.non_finite().empty(), "step ", step, ": the update at lr ", lr, " made ",
               optimizer.non_finite(), " non-finite (the model diverged); stopping");
  return r;
}

StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr) {
  return train_step(model, optimizer, train_data, c, step, lr, Dist::world());
}

}  // namespace attend::train
