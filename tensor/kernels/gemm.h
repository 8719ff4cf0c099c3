// C (M, N), row-major with leading dimension ldc, = A (M, K) @ B (K, N), where A and B are
// read through arbitrary element strides (row stride, column stride), so a transposed
// view costs nothing. `parallel` lets the blocked kernel use OpenMP threads; callers that
// are themselves inside a parallel loop pass false.
#pragma once

#include <cstdint>

namespace attend::kernel {

template <typename T>
struct MatrixRef {
  const T* data;
  int64_t row_stride, col_stride;
};

// Cache-blocked with packed panels and a register-tiled micro-kernel (AVX2/FMA when the CPU
// has it, checked at run time; a portable one otherwise). Every output element sums its K
// products in the same order whatever the thread count: threads split M and N, never K.
// With `accumulate`, C += A @ B (each element adds its finished sum once).
template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc,
          bool parallel, bool accumulate = false);

// The plain triple loop, accumulating in double: the test oracle.
template <typename T>
void gemm_naive(int64_t M, int64_t N, int64_t K, MatrixRef<T> A, MatrixRef<T> B, T* C, int64_t ldc);

bool gemm_uses_avx2();

}  // namespace attend::kernel
