// AdamW's update loop over one parameter (train/optim.cpp's AdamW::step calls it), in its
// own file so that file alone is compiled with -fno-trapping-math -fno-math-errno (see
// train/CMakeLists.txt): GCC vectorises the loop only then (sqrt need not set errno; its
// argument is never negative), and the flags must not reach the rest of optim.cpp, where
// -fno-math-errno lets GCC turn std::pow(beta, step) into repeated multiplication (other
// bits for the bias corrections).
#pragma once

#include <cstdint>

namespace attend::train {

template <typename T>
struct AdamWScalars {
  T beta1, beta2, eps;
  T decay;       // 1 - lr * weight_decay
  T step_size;   // lr / (1 - beta1^t)
  T bc2_sqrt;    // sqrt(1 - beta2^t)
  T grad_scale;  // the clipping factor; 1 multiplies exactly
};

// p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps) after the moment updates with
// g * grad_scale, for n elements, in parallel. Returns false if any new p is not finite.
template <typename T>
bool adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWScalars<T>& s);

}  // namespace attend::train
