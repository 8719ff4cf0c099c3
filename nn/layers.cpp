#include "nn/layers.h"

#include "tensor/kernels.h"
#include "tensor/parallel.h"

namespace attend::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  ATTEND_CHECK(in > 0 && out > 0, "Linear: expected positive sizes, got in ", in, ", out ", out);
  weight = register_parameter("weight", zeros({out, in}));
  if (has_bias) bias = register_parameter("bias", zeros({out}));
}

Tensor Linear::forward(const Tensor& x) const {
  ATTEND_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "Linear: expected input (..., ",
               weight.size(1), "), got ", shape_str(x.shape()));
  Tensor y = matmul(x, transpose(weight, 0, 1));  // (..., out); W^T is a view
  return bias.defined() ? add(y, bias) : y;
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

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

LayerNorm::LayerNorm(int64_t dim, bool has_bias, double e) : eps(e) {
  weight = register_parameter("weight", ones({dim}));
  if (has_bias) bias = register_parameter("bias", zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Dropout::Dropout(double prob) : p(prob) {
  ATTEND_CHECK(p >= 0 && p < 1, "Dropout: expected 0 <= p < 1, got ", p);
}

Tensor Dropout::mask(const Shape& shape, DType dtype) const {
  Tensor m = empty(shape, dtype);
  const int64_t n = m.numel();
  const PhiloxKey key{static_cast<uint32_t>(context->seed),
                      static_cast<uint32_t>(context->seed >> 32)};
  const uint32_t c2 = static_cast<uint32_t>(context->step);
  const uint32_t c3 = (index << 16) | (context->micro_step & 0xffff);
  const double scale = 1.0 / (1.0 - p);
  const float threshold = static_cast<float>(p);
  dispatch_float(dtype, "dropout", [&]<typename T>() {
    T* out = m.data<T>();
    const int64_t blocks = (n + 3) / 4;
    parallel_for(blocks, kElementwiseGrain / 4, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        PhiloxCounter r =
            philox4x32({static_cast<uint32_t>(blk),
                        static_cast<uint32_t>(static_cast<uint64_t>(blk) >> 32), c2, c3},
                       key);
        for (int64_t w = 0; w < 4 && blk * 4 + w < n; ++w)
          out[blk * 4 + w] = u32_to_unit_float(r[w]) < threshold ? T(0) : static_cast<T>(scale);
      }
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
