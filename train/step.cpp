#include "train/step.h"

#include <cmath>

#include "tensor/kernels.h"
#include "train/dpo.h"

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

// Each micro-step's loss and, under DPO, its mean reward margin and accuracy.
struct MicroLog {
  explicit MicroLog(int64_t M)
      : loss(static_cast<size_t>(M), 0.0), margin(loss), accuracy(loss) {}
  std::vector<double> loss, margin, accuracy;
};

// Micro-step m of `step`: its batch and dropout masks, forward, and backward of loss / M
// into zeroed gradients. Writes its entries of `log`.
void micro_step(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                int64_t step, int64_t m, const nn::GPT* reference, MicroLog& log) {
  model.zero_grad();
  model.dropout_context->step = static_cast<uint64_t>(step);
  model.dropout_context->micro_step = static_cast<uint32_t>(m);
  const data::Batch b =
      train_data.random_batch(static_cast<uint64_t>(c.seed), static_cast<uint64_t>(step),
                              static_cast<uint32_t>(m), c.batch_size, Stream::Batch);
  const size_t i = static_cast<size_t>(m);
  if (c.dpo) {
    const DpoStats s = dpo_backward(model, reference, b, c.beta,
                                    1.0 / static_cast<double>(c.gradient_accumulation_steps));
    const double n = static_cast<double>(s.pairs);
    log.loss[i] = s.loss / n, log.margin[i] = s.margin / n, log.accuracy[i] = s.correct / n;
    ATTEND_CHECK(std::isfinite(log.loss[i]), "step ", step, ": the DPO loss is ", log.loss[i],
                 " (micro-step ", m, "); stopping before the update");
    return;
  }
  Tensor loss = model.forward(b.x, b.y).loss;
  const double lv = loss.item();
  ATTEND_CHECK(std::isfinite(lv), "step ", step, ": the loss is ", lv, " (micro-step ", m,
               "); stopping before the update");
  mul(loss, 1.0 / static_cast<double>(c.gradient_accumulation_steps)).backward();
  log.loss[i] = lv;
}

// The tree sum of Note [Data-parallel training] over micro-steps [lo, hi), as one flat
// buffer of every parameter's gradient (parameters() order).
template <typename T>
class GradientTree {
 public:
  GradientTree(nn::GPT& model, const data::TokenDataset& d, const TrainConfig& c, int64_t step,
               MicroLog& log, const nn::GPT* reference)
      : model_(model),
        data_(d),
        c_(c),
        step_(step),
        log_(log),
        reference_(reference),
        params_(model.trainable_parameters()) {
    for (const Tensor& p : params_) {
      ATTEND_INTERNAL_CHECK(p.dtype() == params_.front().dtype(),
                   "train_step: the parameters must share one dtype");
      numel_ += p.numel();
    }
  }

  std::vector<T> sum(int64_t lo, int64_t hi) {
    if (hi - lo == 1) {
      micro_step(model_, data_, c_, step_, lo, reference_, log_);
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
  MicroLog& log_;
  const nn::GPT* reference_;
  std::vector<Tensor> params_;
  int64_t numel_ = 0;
};

}  // namespace

namespace {

// accumulate_gradients, with the micro-steps' log (losses, and DPO's margins and accuracies).
MicroLog accumulate(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                    int64_t step, Dist& dist, const nn::GPT* reference) {
  const int64_t M = c.gradient_accumulation_steps, W = dist.size();
  check_world_size(dist.size(), M);
  ATTEND_CHECK(c.dpo == train_data.pairs(), c.dpo ? "--dpo: " : "--data: ",
               train_data.file().path().string(),
               c.dpo ? " holds no preference pairs (prepare --format preference)"
                     : " holds preference pairs: train on them with --dpo");
  MicroLog log(M);
  if (M == 1) {  // one leaf: the gradient stays where backward put it
    micro_step(model, train_data, c, step, 0, reference, log);
  } else {
    dispatch_float(model.trainable_parameters().front().dtype(), "accumulate_gradients", [&]<typename T>() {
      GradientTree<T> tree(model, train_data, c, step, log, reference);
      const int64_t block = M / W, lo = dist.rank() * block;
      std::vector<T> sum = tree.sum(lo, lo + block);
      dist.sum_blocks(sum.data(), tree.numel());
      tree.give(sum);
    });
    dist.sum_disjoint(log.loss);
    if (c.dpo) dist.sum_disjoint(log.margin), dist.sum_disjoint(log.accuracy);
  }
  return log;
}

// In micro-step order, as one process would.
double mean(const std::vector<double>& v) {
  double total = 0;
  for (const double x : v) total += x;
  return total / static_cast<double>(v.size());
}

}  // namespace

double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step, Dist& dist,
                            const nn::GPT* reference) {
  return mean(accumulate(model, train_data, c, step, dist, reference).loss);
}

double accumulate_gradients(nn::GPT& model, const data::TokenDataset& train_data,
                            const TrainConfig& c, int64_t step) {
  return accumulate_gradients(model, train_data, c, step, Dist::world());
}

double accumulate_block(nn::GPT& model, const data::TokenDataset& train_data, const TrainConfig& c,
                        int64_t step, int64_t lo, int64_t hi, std::vector<float>& sum) {
  MicroLog log(c.gradient_accumulation_steps);
  GradientTree<float> tree(model, train_data, c, step, log, nullptr);
  sum = tree.sum(lo, hi);
  double total = 0;
  for (const double l : log.loss) total += l;
  return total;
}

StepResult train_step(nn::GPT& model, Optimizer& optimizer, const data::TokenDataset& train_data,
                      const TrainConfig& c, int64_t step, double lr, Dist& dist,
                      const nn::GPT* reference) {
  StepResult r;
  r.lr = lr;
  const MicroLog log = accumulate(model, train_data, c, step, dist, reference);
  r.loss = mean(log.loss);
  if (c.dpo) r.reward_margin = mean(log.margin), r.reward_accuracy = mean(log.accuracy);
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
