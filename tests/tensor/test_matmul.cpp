// The blocked GEMM against its naive twin on odd sizes, transposed views, broadcast
// batches, f32 against f64, and 1 against 2 threads.
#include <omp.h>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
namespace k = attend::kernel;

TEST_CASE("matmul on a hand-computed case") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  CHECK(k::matmul(a, b).to_vector<float>() == std::vector<float>{58, 64, 139, 154});
}

TEST_CASE("blocked matmul equals the naive triple loop on odd sizes") {
  MESSAGE("micro-kernel: ", (k::gemm_uses_avx2() ? "AVX2/FMA" : "portable"));
  Generator g(11);
  const int64_t sizes[] = {1, 7, 63, 129, 300};
  for (int64_t M : sizes)
    for (int64_t N : {1, 17, 129})
      for (int64_t K : {1, 63, 257}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        Tensor a64 = randn({M, K}, g, DType::F64), b64 = randn({K, N}, g, DType::F64);
        // f64: the fast kernel and the double-accumulating oracle differ only by rounding.
        test::check_close(k::matmul(a64, b64), k::matmul_naive(a64, b64), 1e-12 * K, 1e-12);
        // f32: rounding of K products in f32 (~K * 6e-8 relative to sum |a||b|).
        Tensor a32 = k::cast(a64, DType::F32), b32 = k::cast(b64, DType::F32);
        test::check_close(k::matmul(a32, b32), k::matmul_naive(a32, b32), 2e-6 * std::sqrt(K) * 4,
                          1e-5);
      }
}

TEST_CASE("transposed operands are read through their strides") {
  Generator g(12);
  Tensor a = randn({65, 33}, g, DType::F64), b = randn({47, 65}, g, DType::F64);
  // a^T (33, 65) @ b^T (65, 47)
  Tensor at = k::transpose(a, 0, 1), bt = k::transpose(b, 0, 1);
  test::check_close(k::matmul(at, bt), k::matmul_naive(k::contiguous(at), k::contiguous(bt)), 1e-12,
                    1e-12);
}

TEST_CASE("batched matmul broadcasts batch dims") {
  Generator g(13);
  Tensor a = randn({2, 1, 5, 7}, g, DType::F64), b = randn({3, 7, 4}, g, DType::F64);
  Tensor c = k::matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 3, 5, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Tensor want = k::matmul_naive(k::select(k::select(a, 0, i), 0, 0), k::select(b, 0, j));
      test::check_close(k::select(k::select(c, 0, i), 0, j), want, 1e-12, 1e-12);
    }
  // (B, T, C) @ (C, N), the Linear layer's shape, folds the batch into one product.
  Tensor x = randn({3, 9, 6}, g, DType::F64), w = randn({6, 5}, g, DType::F64);
  test::check_close(k::matmul(x, w), k::matmul_naive(x, w), 1e-12, 1e-12);
}

TEST_CASE("matmul is bit-identical with 1 and 2 threads") {
  const int saved = omp_get_max_threads();
  Generator g(14);
  Tensor a = randn({300, 500}, g), b = randn({500, 260}, g);        // parallel inside one gemm
  Tensor qa = randn({24, 64, 32}, g), qb = randn({24, 32, 64}, g);  // parallel over batches
  omp_set_num_threads(1);
  Tensor c1 = k::matmul(a, b), d1 = k::matmul(qa, qb);
  omp_set_num_threads(2);
  Tensor c2 = k::matmul(a, b), d2 = k::matmul(qa, qb);
  omp_set_num_threads(saved);
  CHECK(test::bit_identical(c1, c2));
  CHECK(test::bit_identical(d1, d2));
}

TEST_CASE("a transposed A packs to the same panels: bit-identical to its contiguous copy") {
  // pack_a copies a transposed view k by k (its panel rows are adjacent in memory), a
  // contiguous f32 A eight k at a time through register transposes (the rest one by one);
  // the packed panels, so the products, must be the same bits.
  Generator g(14);
  for (int64_t M : {5, 6, 301})
    for (int64_t K : {7, 13, 600}) {
      CAPTURE(M);
      CAPTURE(K);
      Tensor base = randn({K, M}, g), b = randn({K, 37}, g);
      Tensor at = k::transpose(base, 0, 1);  // (M, K), row stride 1
      CHECK(test::bit_identical(k::matmul(at, b), k::matmul(k::contiguous(at), b)));
    }
}

TEST_CASE("a transposed B (W^T) packs through 8x8 transposes: bit-identical to its copy") {
  // x @ W^T, nn::Linear's product: pack_b moves whole 8 x 8 blocks through AVX2 registers
  // where a panel is full, the rest (k % 8, columns past the last full panel) one by one.
  Generator g(15);
  for (int64_t N : {16, 33, 200})
    for (int64_t K : {8, 13, 600}) {
      CAPTURE(N);
      CAPTURE(K);
      Tensor w = randn({N, K}, g), x = randn({29, K}, g);
      Tensor wt = k::transpose(w, 0, 1);  // (K, N), row stride 1
      CHECK(test::bit_identical(k::matmul(x, wt), k::matmul(x, k::contiguous(wt))));
    }
}
