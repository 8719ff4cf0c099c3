#include "nn/layers.h"

#include <immintrin.h>

#include <type_traits>

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
  return linear(x, weight, bias);  // x W^T + b
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

PhiloxCounter dropout_counter(uint64_t blk, uint64_t step, uint32_t index, uint32_t micro_step) {
  return stream_counter(Stream::Dropout, static_cast<uint32_t>(blk), static_cast<uint32_t>(step),
                        (index << 16) | (micro_step & 0xffff), static_cast<uint32_t>(step >> 32));
}

namespace {

const bool kMaskAvx2 = __builtin_cpu_supports("avx2");

// 32 mask elements from eight Philox blocks' words (word w of block l is element 4l + w):
// 0 where the word as a unit float is below p, else 1/(1-p). The scalar rule exactly:
// (x >> 8) converts to float exactly and times 2^-24 is exact, and "not below" is ">=".
__attribute__((target("avx2"))) void mask_32(const uint32_t* words, float threshold, float scale,
                                             float* out) {
  const __m256 thr = _mm256_set1_ps(threshold), keep = _mm256_set1_ps(scale),
               unit = _mm256_set1_ps(0x1p-24f);
  for (int q = 0; q < 32; q += 8) {
    const __m256i x =
        _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + q)), 8);
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(x), unit);
    _mm256_storeu_ps(out + q, _mm256_and_ps(_mm256_cmp_ps(u, thr, _CMP_GE_OQ), keep));
  }
}

}  // namespace

Tensor Dropout::mask(const Shape& shape, DType dtype) const {
  Tensor m = empty(shape, dtype);
  const int64_t n = m.numel();
  const PhiloxKey key = philox_key(context->seed);
  const uint64_t step = context->step;
  const uint32_t micro = context->micro_step;
  ATTEND_CHECK(index < 65536 && micro < 65536 && step < (1ull << 56) && n / 4 < (1ll << 32),
               "dropout: index ", index, ", micro-step ", micro, ", step ", step, " or ", n,
               " elements outside the dropout stream's ranges (2^16, 2^16, 2^56, 2^34)");
  const double scale = 1.0 / (1.0 - p);
  const float threshold = static_cast<float>(p);
  dispatch_float(dtype, "dropout", [&]<typename T>() {
    T* out = m.data<T>();
    const int64_t blocks = (n + 3) / 4;
    auto put = [&](int64_t blk, const PhiloxCounter& r) {
      for (int64_t w = 0; w < 4 && blk * 4 + w < n; ++w)
        out[blk * 4 + w] = u32_to_unit_float(r[w]) < threshold ? T(0) : static_cast<T>(scale);
    };
    parallel_for(blocks, kElementwiseGrain / 4, [&](int64_t b, int64_t e) {
      int64_t blk = b;
      PhiloxCounter in[8], r[8];
      for (; blk + 8 <= e; blk += 8) {  // eight blocks per vectorised call
        for (int l = 0; l < 8; ++l)
          in[l] = dropout_counter(static_cast<uint64_t>(blk + l), step, index, micro);
        philox4x32_x8(in, r, key);
        if constexpr (std::is_same_v<T, float>) {
          if (kMaskAvx2 && (blk + 8) * 4 <= n) {  // 32 whole elements
            static_assert(sizeof(r) == 32 * sizeof(uint32_t));
            mask_32(r[0].data(), threshold, static_cast<float>(scale), out + blk * 4);
            continue;
          }
        }
        for (int l = 0; l < 8; ++l) put(blk + l, r[l]);
      }
      for (; blk < e; ++blk)
        put(blk, philox4x32(dropout_counter(static_cast<uint64_t>(blk), step, index, micro), key));
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
