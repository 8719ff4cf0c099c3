// A few rows of A against a weight: C (M, N) = A (M, K) @ B for M <= 4, as a Linear
// computes one token at a time while sampling. The blocked GEMM would pack all of B (read
// it, write a copy, read the copy) and run 6-row tiles with one useful row; here B is read
// once, in place:
//   B = W^T, W (N, K) row-major (a Linear's weight as it is): eight rows of W, eight k at
//     a time, become eight column vectors in registers (an 8x8 transpose);
//   B (K, N) row-major (the weight kept transposed while decoding, infer::DecodingWeights):
//     each k's row of B is one fused multiply-add into the running sums of 512 outputs.
// Internal to the GEMM (gemm.cpp calls it).
//
// Same bits as the blocked GEMM, in f32 and in bf16: every element sums its products in KC-deep
// blocks, each from zero by fused multiply-adds in k order, and each block's sum is stored (the
// first, without `accumulate`) or added to C, exactly as the micro-kernels do.
#pragma once

#include <cstdint>

#include "tensor/kernels/gemm.h"

namespace attend::kernel::gemm_detail {

constexpr int64_t kMaxFewRows = 4;

// Whether gemm_few_rows takes this product: f32 SIMD kernels on, M <= kMaxFewRows, N >= 8,
// B with row stride 1 (W^T) or column stride 1 (row-major), A's rows contiguous.
bool few_rows_applies(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B);
// bf16: the bf16 products' bits (gemm_bf16.h), as the blocked GEMM gives them under that
// precision: A's rows rounded once, W's values as they are read (no panel to round them
// in), the pairs in the same order, MXCSR's flush-to-zero while a block accumulates. In AVX2
// FMAs on every CPU: a token's products are bound by reading the weights, not by the
// arithmetic, so vdpbf16ps would not make them faster.
void gemm_few_rows(int64_t M, int64_t N, int64_t K, MatrixRef<float> A, MatrixRef<float> B,
                   float* C, int64_t ldc, bool parallel, bool accumulate, bool bf16);
// bf16's bits with B given as bf16 bits (through the same strides few_rows_applies takes):
// the values B's f32 would round to, widened as they are read.
void gemm_few_rows_bf16_bits(int64_t M, int64_t N, int64_t K, MatrixRef<float> A,
                             MatrixRef<uint16_t> B, float* C, int64_t ldc, bool parallel,
                             bool accumulate);

}  // namespace attend::kernel::gemm_detail
