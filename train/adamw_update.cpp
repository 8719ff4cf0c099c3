#include "train/adamw_update.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "tensor/parallel.h"

namespace attend::train {

template <typename T>
bool adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWScalars<T>& s) {
  std::atomic<bool> bad{false};
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    // Local restrict copies and no branch in the loop (finiteness as a comparison that NaN
    // and inf fail), so it vectorises; vector lanes and the scalar remainder compute the
    // same bits (a training hash equals the scalar build's at 1 and 2 threads).
    T* __restrict P = p;
    const T* __restrict G = g;
    T* __restrict M = m;
    T* __restrict V = v;
    const T b1 = s.beta1, b2 = s.beta2, eps = s.eps, decay = s.decay, step = s.step_size,
            bc2 = s.bc2_sqrt, gs = s.grad_scale, big = std::numeric_limits<T>::max();
    T not_finite = 0;
    for (int64_t j = b; j < e; ++j) {
      const T gj = G[j] * gs;
      const T mj = b1 * M[j] + (T(1) - b1) * gj;
      const T vj = b2 * V[j] + (T(1) - b2) * gj * gj;
      const T pj = P[j] * decay - step * mj / (std::sqrt(vj) / bc2 + eps);
      M[j] = mj;
      V[j] = vj;
      P[j] = pj;
      not_finite += std::abs(pj) <= big ? T(0) : T(1);
    }
    if (not_finite != T(0)) bad = true;
  });
  return !bad;
}

template bool adamw_update<float>(float*, const float*, float*, float*, int64_t,
                                  const AdamWScalars<float>&);
template bool adamw_update<double>(double*, const double*, double*, double*, int64_t,
                                   const AdamWScalars<double>&);

}  // namespace attend::train
