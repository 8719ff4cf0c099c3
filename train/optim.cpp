#include "train/optim.h"

#include <atomic>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/rowmath.h"
#include "tensor/parallel.h"
#include "train/adamw_update.h"

namespace attend::train {

namespace {

void check_state(const std::map<std::string, Tensor>& state, const std::string& name,
                 const Tensor& like) {
  auto it = state.find(name);
  ATTEND_CHECK(it != state.end(), "optimizer state: missing '", name, "'");
  ATTEND_CHECK(it->second.shape() == like.shape(), "optimizer state: '", name, "' has shape ",
               shape_str(it->second.shape()), ", expected ", shape_str(like.shape()));
}

}  // namespace

AdamW::AdamW(const nn::NamedTensors& params, const AdamWOptions& o) : params_(params), o_(o) {
  for (auto& [_, p] : params_) {
    m_.push_back(zeros(p.shape(), p.dtype()));
    v_.push_back(zeros(p.shape(), p.dtype()));
    decay_.push_back(p.dim() >= 2);
  }
}

void AdamW::step(double lr, double grad_scale) {
  ++steps_;
  non_finite_.clear();
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ATTEND_CHECK(p.is_contiguous() && g.is_contiguous(), "AdamW: parameter '", params_[i].first,
                 "' or its gradient is not contiguous");
    const double wd = decay_[i] ? o_.weight_decay : 0.0;
    dispatch_float(p.dtype(), "AdamW", [&]<typename T>() {
      T* pp = p.data<T>();
      const T* gp = g.data<T>();
      T* m = m_[i].data<T>();
      T* v = v_[i].data<T>();
      const T b1 = T(o_.beta1), b2 = T(o_.beta2), eps = T(o_.eps);
      const T decay = T(1.0 - lr * wd), step_size = T(lr / bc1), bc2_sqrt = T(std::sqrt(bc2));
      const bool bad =
          !adamw_update<T>(pp, gp, m, v, p.numel(),
                           {b1, b2, eps, decay, step_size, bc2_sqrt, static_cast<T>(grad_scale)});
      if (bad && non_finite_.empty()) non_finite_ = params_[i].first;
    });
  }
}

nn::NamedTensors AdamW::state() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, m_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, v_[i]);
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  ATTEND_CHECK(state.size() == 2 * params_.size(), "optimizer state: expected ", 2 * params_.size(),
               " tensors (exp_avg and exp_avg_sq of each parameter), got ", state.size());
  ATTEND_CHECK(steps >= 0, "optimizer state: step must be >= 0, got ", steps);
  for (size_t i = 0; i < params_.size(); ++i) {
    check_state(state, "exp_avg." + params_[i].first, m_[i]);
    check_state(state, "exp_avg_sq." + params_[i].first, v_[i]);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    kernel::copy_(m_[i], state.at("exp_avg." + params_[i].first));
    kernel::copy_(v_[i], state.at("exp_avg_sq." + params_[i].first));
  }
  steps_ = steps;
}

SGD::SGD(const nn::NamedTensors& params, double momentum, double weight_decay)
    : params_(params), momentum_(momentum), weight_decay_(weight_decay) {
  for (auto& [_, p] : params_) {
    buf_.push_back(zeros(p.shape(), p.dtype()));
    decay_.push_back(p.dim() >= 2);
  }
}

void SGD::step(double lr, double grad_scale) {
  ++steps_;
  non_finite_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    const double wd = decay_[i] ? weight_decay_ : 0.0;
    dispatch_float(p.dtype(), "SGD", [&]<typename T>() {
      T* pp = p.data<T>();
      const T* gp = g.data<T>();
      T* b = buf_[i].data<T>();
      const bool first = steps_ == 1;
      // Scaled in a pass of its own: inside the update, g * scale + wd * p would be
      // contracted into one FMA, and the update would no longer equal clipping first.
      if (grad_scale != 1.0) {
        T* gw = g.data<T>();
        const T gs = static_cast<T>(grad_scale);
        parallel_for(g.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t j = lo; j < hi; ++j) gw[j] *= gs;
        });
      }
      std::atomic<bool> bad{false};
      parallel_for(p.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        bool ok = true;
        for (int64_t j = lo; j < hi; ++j) {
          const T d = gp[j] + T(wd) * pp[j];
          b[j] = first ? d : T(momentum_) * b[j] + d;
          pp[j] -= T(lr) * (momentum_ != 0 ? b[j] : d);
          ok &= std::isfinite(pp[j]);
        }
        if (!ok) bad = true;
      });
      if (bad && non_finite_.empty()) non_finite_ = params_[i].first;
    });
  }
}

nn::NamedTensors SGD::state() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    out.emplace_back("momentum_buffer." + params_[i].first, buf_[i]);
  return out;
}

void SGD::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  ATTEND_CHECK(state.size() == params_.size(), "optimizer state: expected ", params_.size(),
               " tensors (momentum_buffer of each parameter), got ", state.size());
  ATTEND_CHECK(steps >= 0, "optimizer state: step must be >= 0, got ", steps);
  for (size_t i = 0; i < params_.size(); ++i)
    check_state(state, "momentum_buffer." + params_[i].first, buf_[i]);
  for (size_t i = 0; i < params_.size(); ++i)
    kernel::copy_(buf_[i], state.at("momentum_buffer." + params_[i].first));
  steps_ = steps;
}

double LrSchedule::at(int64_t it) const {
  if (!decay) return learning_rate;
  if (it < warmup_iters)
    return learning_rate * static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  const double span = static_cast<double>(lr_decay_iters - warmup_iters);
  const double ratio = span > 0 ? static_cast<double>(it - warmup_iters) / span : 1.0;
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return min_lr + coeff * (learning_rate - min_lr);
}

namespace {

// sum_j g_j^2 in double, in chunks of kReduceChunk summed in parallel and combined in
// order: the same bits with any thread count.
template <typename T>
double sum_squares(const T* g, int64_t n) {
  const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  std::vector<double> part(static_cast<size_t>(chunks));
  parallel_for(chunks, kElementwiseGrain / kReduceChunk, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t lo = c * kReduceChunk, hi = std::min(n, lo + kReduceChunk);
      const T* x = g + lo;
      part[static_cast<size_t>(c)] = kernel::lane_sum(hi - lo, [&](int64_t j) {
        return static_cast<double>(x[j]) * static_cast<double>(x[j]);
      });
    }
  });
  double total = 0;
  for (const double x : part) total += x;
  return total;
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ATTEND_CHECK(g.is_contiguous(), "grad_norm: a non-contiguous gradient");
    dispatch_float(g.dtype(), "grad_norm",
                   [&]<typename T>() { total += sum_squares(g.data<T>(), g.numel()); });
  }
  return std::sqrt(total);
}

double clip_scale(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = grad_norm(params), scale = clip_scale(norm, max_norm);
  if (scale == 1.0) return norm;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    dispatch_float(g.dtype(), "clip_grad_norm", [&]<typename T>() {
      T* gp = g.data<T>();
      const T ts = static_cast<T>(scale);
      parallel_for(g.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) gp[j] *= ts;
      });
    });
  }
  return norm;
}

}  // namespace attend::train
