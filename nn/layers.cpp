#include "nn/layers.h"

#include <algorithm>
#include <type_traits>

#include "autograd/node.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "tensor/parallel.h"
#include "tensor/util.h"

namespace attend::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  ATTEND_CHECK(in > 0 && out > 0, "Linear: expected positive sizes, got in ", in, ", out ", out);
  weight = register_parameter("weight", zeros({out, in}));
  if (has_bias) bias = register_parameter("bias", zeros({out}));
}

Tensor Linear::forward(const Tensor& x) const {
  ATTEND_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "Linear: expected input (..., ",
               weight.size(1), "), got ", shape_str(x.shape()));
  Tensor y;
  if (decoding && !autograd::is_grad_enabled()) {
    y = decoding->multiply(x);
    if (y.defined() && bias.defined()) kernel::add_(y, bias);
  }
  if (!y.defined()) y = linear(x, weight, bias);  // x W^T + b
  return adapters.empty() ? y : add_adapters(y, x, adapters);
}

void Linear::add_adapter(const std::string& name, std::shared_ptr<Adapter> adapter) {
  share_adapter(adapter);
  adapters.back() = register_module(name, std::move(adapter));
}

void Linear::share_adapter(std::shared_ptr<Adapter> adapter) {
  ATTEND_CHECK(adapter->in == weight.size(1) && adapter->hi <= weight.size(0),
               "Linear: an adapter for ", adapter->in, " inputs and rows up to ", adapter->hi,
               " on a weight ", shape_str(weight.shape()));
  adapters.push_back(std::move(adapter));
}

void Linear::tie_weight(const Tensor& w) {
  ATTEND_CHECK(w.shape() == weight.shape(), "Linear: cannot tie a weight of shape ",
               shape_str(w.shape()), " to one of shape ", shape_str(weight.shape()));
  replace_parameter("weight", w);
  weight = w;
}

Embedding::Embedding(int64_t n, int64_t dim) {
  ATTEND_CHECK(n > 0 && dim > 0, "Embedding: expected positive sizes, got ", n, " x ", dim);
  weight = register_parameter("weight", zeros({n, dim}));
}

Tensor Embedding::forward(const Tensor& ids) const {
  const Tensor x = embedding(weight, ids);
  return tokens && tokens->enabled ? add(x, tokens->rows_of(ids)) : x;
}

void Embedding::add_token_rows(std::shared_ptr<TokenRows> rows) {
  ATTEND_CHECK(rows->D.size(1) == weight.size(1) && rows->hi <= weight.size(0),
               "Embedding: token rows [", rows->lo, ", ", rows->hi, ") of width ",
               rows->D.size(1), " on a table ", shape_str(weight.shape()));
  tokens = register_module("lora_tokens", std::move(rows));
}

LayerNorm::LayerNorm(int64_t dim, bool has_bias, double e) {
  eps = e;
  weight = register_parameter("weight", ones({dim}));
  if (has_bias) bias = register_parameter("bias", zeros({dim}));
}

RMSNorm::RMSNorm(int64_t dim, double e) {
  ATTEND_CHECK(dim > 0 && e > 0, "RMSNorm: expected a positive size and eps, got ", dim, ", ", e);
  eps = e;
  weight = register_parameter("weight", ones({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Dropout::Dropout(double prob) : p(prob) {
  ATTEND_CHECK(p >= 0 && p < 1, "Dropout: expected 0 <= p < 1, got ", p);
}

DropoutStream Dropout::stream_at_any_mode() const {
  return {p, philox_key(context->seed), context->step, index, context->micro_step};
}

DropoutStream Dropout::stream() const {
  return is_training() && p > 0 ? stream_at_any_mode() : DropoutStream{};
}

Tensor Dropout::mask(const Shape& shape, DType dtype) const {
  Tensor m = empty(shape, dtype);
  const int64_t n = m.numel();
  const DropoutStream d = stream_at_any_mode();
  check_dropout_range(d, n);
  dispatch_float(dtype, "dropout", [&]<typename T>() {
    T* out = m.data<T>();
    // Chunks of whole 8-block groups, so each runs the 32-element path.
    const int64_t groups = (n + 31) / 32;
    parallel_for(groups, kElementwiseGrain / 32, [&](int64_t b, int64_t e) {
      const int64_t lo = b * 32, hi = std::min(n, e * 32);
      dropout_fill(d, static_cast<uint64_t>(lo), hi - lo, out + lo);
    });
  });
  return m;
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p == 0) return x;
  return mul(x, mask(x.shape(), x.dtype()));
}

void attach_dropout_context(Module& root, const std::shared_ptr<DropoutContext>& ctx) {
  uint32_t index = 0;
  for (auto& [_, m] : root.named_modules()) {
    if (auto* d = dynamic_cast<Dropout*>(m)) {
      d->context = ctx;
      d->index = index++;
    }
  }
}

}  // namespace attend::nn
