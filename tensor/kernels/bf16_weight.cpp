// Products with a frozen bf16 weight (declared in tensor/kernels/gemm.h): W widened a block
// of rows at a time into an f32 buffer, each block multiplied by the blocked GEMM.
#include <algorithm>

#include "tensor/error.h"
#include "tensor/kernels/gemm.h"
#include "tensor/tensor.h"

namespace attend::kernel {

namespace {

// A block's rows: as many as fit kBf16WeightBlockBytes of f32, a multiple of `multiple`
// (at least one multiple), at most `limit`.
int64_t block_rows(int64_t cols, int64_t multiple, int64_t limit) {
  const int64_t fit = kBf16WeightBlockBytes / (4 * std::max<int64_t>(cols, 1));
  return std::min(limit, std::max(multiple, fit / multiple * multiple));
}

}  // namespace

void gemm_bf16_weight_t(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* W,
                        float* C, int64_t ldc, bool accumulate) {
  ATTEND_CHECK(A.col_stride == 1, "gemm_bf16_weight_t: A's rows must be contiguous");
  if (M == 0 || N == 0) return;
  // Blocks of W's rows are blocks of C's columns (a multiple of 32: whole AVX-512 tiles).
  const int64_t nb = block_rows(K, 32, N);
  const Tensor buf = empty({nb * K});  // from the storage cache: no fresh pages, no zeroing
  float* w = buf.data<float>();
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t n = std::min(nb, N - n0);
    from_bf16_bits(W + n0 * K, w, n * K);
    gemm<float>(M, n, K, A, {w, 1, K}, C + n0, ldc, true, accumulate);
  }
}

void gemm_bf16_weight(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, const uint16_t* W,
                      float* C, int64_t ldc, bool accumulate) {
  ATTEND_CHECK(A.col_stride == 1, "gemm_bf16_weight: A's rows must be contiguous");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  // Blocks of W's rows are blocks of K: at multiples of kGemmKBlock, the first stored and the
  // rest added, which gives the whole product's bits (gemm.h).
  const int64_t kb = block_rows(N, kGemmKBlock, K);
  const Tensor buf = empty({kb * N});
  float* w = buf.data<float>();
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t k = std::min(kb, K - k0);
    from_bf16_bits(W + k0 * N, w, k * N);
    gemm<float>(M, N, k, {A.data + k0, A.row_stride, 1}, {w, N, 1}, C, ldc, true,
                accumulate || k0 > 0);
  }
}

}  // namespace attend::kernel
