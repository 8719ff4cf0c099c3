// The blocked GEMM against its naive twin on odd sizes, transposed views, broadcast
// batches, f32 against f64, and 1 against 2 threads.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>

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
  MESSAGE("micro-kernel: " << std::string(k::gemm_kernel_name(k::gemm_kernel())));
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

// A (M, K) @ b (K, N) split along K, each later part added with `accumulate` (Linear's dW
// from a bf16 input, a run of rows at a time: autograd/ops/matmul.cpp). A is read through
// its strides.
std::vector<float> split_along_k(const Tensor& A, const Tensor& b, int64_t at) {
  const int64_t M = A.size(0), K = A.size(1), N = b.size(1);
  std::vector<float> c(static_cast<size_t>(M * N));
  const int64_t rs = A.strides()[0], cs = A.strides()[1];
  for (int64_t k0 = 0; k0 < K; k0 += at) {
    const int64_t k1 = std::min(K, k0 + at);
    k::gemm<float>(M, N, k1 - k0, {A.data<float>() + k0 * cs, rs, cs},
                   {b.data<float>() + k0 * N, N, 1}, c.data(), N, true, k0 > 0);
  }
  return c;
}

TEST_CASE("a product split along K at multiples of kGemmKBlock gives the whole product's bits") {
  Generator g(23);
  const int64_t K = 2 * k::kGemmKBlock + 37, N = 40;
  for (const k::GemmPrecision p : {k::GemmPrecision::f32, k::GemmPrecision::bf16})
    for (const int64_t M : {3, 37})
      for (const bool transposed : {false, true}) {  // 3 rows, contiguous: the few-rows kernel
        CAPTURE(static_cast<int>(p));
        CAPTURE(M);
        CAPTURE(transposed);
        const test::PrecisionGuard guard(p);
        const Tensor A = transposed ? k::transpose(randn({K, M}, g), 0, 1) : randn({M, K}, g);
        const Tensor b = randn({K, N}, g);
        const std::vector<float> whole = k::matmul(A, b).to_vector<float>();
        for (const int64_t at : {k::kGemmKBlock, 2 * k::kGemmKBlock, K}) {
          CAPTURE(at);
          const std::vector<float> parts = split_along_k(A, b, at);
          CHECK(std::memcmp(parts.data(), whole.data(), whole.size() * 4) == 0);
        }
        // elsewhere the sums are grouped differently (so the check above compares something)
        const std::vector<float> off = split_along_k(A, b, k::kGemmKBlock - 56);
        CHECK(std::memcmp(off.data(), whole.data(), whole.size() * 4) != 0);
      }
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

TEST_CASE("the AVX-512 f32 kernel gives the AVX2 kernel's bits") {
  // Its plain twin is the AVX2 kernel: same packed panels, same products in the same order,
  // so every element must match bit for bit, on whole and edge tiles (M % 6, odd panel
  // counts, N % 16), K past one 256-deep block, transposed A and B, accumulate, 1 and 2
  // threads.
  const k::GemmKernel saved = k::set_gemm_kernel(k::GemmKernel::avx512);
  if (k::gemm_kernel() != k::GemmKernel::avx512) {
    k::set_gemm_kernel(saved);
    ATTEND_SKIP("this CPU has no AVX-512: nothing to compare with the AVX2 kernel");
  }
  const int saved_threads = omp_get_max_threads();
  std::mt19937 rng(16);
  std::normal_distribution<float> normal;
  auto run = [](k::GemmKernel kind, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                bool accumulate, const std::vector<float>& a, const std::vector<float>& b,
                std::vector<float> c) {
    k::set_gemm_kernel(kind);
    const k::MatrixRef<float> A =
        ta ? k::MatrixRef<float>{a.data(), 1, M} : k::MatrixRef<float>{a.data(), K, 1};
    const k::MatrixRef<float> B =
        tb ? k::MatrixRef<float>{b.data(), 1, K} : k::MatrixRef<float>{b.data(), N, 1};
    k::gemm<float>(M, N, K, A, B, c.data(), N, true, accumulate);
    return c;
  };
  int64_t compared = 0;
  for (int threads : {1, 2})
    for (int64_t M : {1, 6, 7, 301})
      for (int64_t N : {1, 16, 17, 32, 48, 65, 200})
        for (int64_t K : {1, 7, 257, 600})
          for (int layout = 0; layout < 4; ++layout) {
            const bool ta = layout & 1, tb = layout & 2, accumulate = (M + N + K) % 2 == 1;
            CAPTURE(threads);
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            CAPTURE(layout);
            omp_set_num_threads(threads);
            std::vector<float> a(M * K), b(K * N), c(M * N);
            for (auto* v : {&a, &b, &c})
              for (float& x : *v) x = normal(rng);
            const auto wide = run(k::GemmKernel::avx512, M, N, K, ta, tb, accumulate, a, b, c);
            const auto narrow = run(k::GemmKernel::avx2, M, N, K, ta, tb, accumulate, a, b, c);
            REQUIRE(std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float)) == 0);
            ++compared;
          }
  omp_set_num_threads(saved_threads);
  k::set_gemm_kernel(saved);
  CHECK(compared == 2 * 4 * 7 * 4 * 4);
}

TEST_CASE(
    "gemm_prepacked on a prefix of a B packed once gives gemm's bits on that prefix, f32/f64 and "
    "bf16") {
  // Attention packs K^T, V (and K, V^T) once per batch and head and multiplies each query
  // block by their first nk keys: the products must equal gemm on B[:k, :n], for row-major
  // and transposed B, k across the 256-deep K blocks, n across the 16-wide panels.
  std::mt19937 rng(17);
  std::normal_distribution<double> normal;
  auto check = [&]<typename T>() {
    for (int64_t K : {1, 32, 300})
      for (int64_t N : {5, 64, 300})
        for (bool transposed : {false, true})
          for (int64_t k : {int64_t{1}, K / 2 + 1, K})
            for (int64_t n : {int64_t{1}, N / 3 + 1, N}) {
              CAPTURE(K);
              CAPTURE(N);
              CAPTURE(transposed);
              CAPTURE(k);
              CAPTURE(n);
              const int64_t M = 29;
              std::vector<T> a(M * k), b(K * N), c1(M * n), c2(M * n);
              for (T& x : a) x = static_cast<T>(normal(rng));
              for (T& x : b) x = static_cast<T>(normal(rng));
              for (T& x : c1) x = static_cast<T>(normal(rng));
              c2 = c1;
              // B (K, N) stored row-major, or as the transpose of an (N, K) row-major array.
              const k::MatrixRef<T> B =
                  transposed ? k::MatrixRef<T>{b.data(), 1, K} : k::MatrixRef<T>{b.data(), N, 1};
              std::vector<T> packed(k::packed_b_size<T>(K, N));
              k::pack_b_all<T>(K, N, B, packed.data());
              const bool acc = (k + n) % 2 == 0;
              k::gemm_prepacked<T>(M, n, k, {a.data(), k, 1}, packed.data(), K, N, c1.data(), n,
                                   acc);
              k::gemm<T>(M, n, k, {a.data(), k, 1}, B, c2.data(), n, false, acc);
              REQUIRE(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(T)) == 0);
            }
  };
  check.operator()<float>();
  check.operator()<double>();
  // bf16 products (attention's under --precision bf16): pack_b_all rounds B to bf16 pairs
  // once; a prefix of odd length k reads row k in the last pair against A's zero pad.
  const k::GemmPrecision before = k::set_gemm_precision(k::GemmPrecision::bf16);
  check.operator()<float>();
  k::set_gemm_precision(before);
  CHECK_THROWS_AS(k::gemm_prepacked<float>(1, 2, 1, {nullptr, 1, 1}, nullptr, 1, 1, nullptr, 2),
                  Error);
}

TEST_CASE(
    "a few rows against W^T (sampling's products) give the blocked GEMM's bits, f32 and bf16") {
  // M <= 4 skips packing (gemm_rows.cpp), with B = W^T or B row-major (past one 512-wide
  // tile at N 1100); its twin is the blocked path,
  // reached by the same rows inside a 7-row product, and the portable kernel. Every
  // element must match bit for bit: K within and past 256-deep blocks, k % 8 tails, N past
  // the last 32-wide chunk, accumulate, 1 and 2 threads. In bf16 the twins are the blocked
  // bf16 kernels (the AVX2 emulation or vdpbf16ps, and the scalar one): some values of A
  // and W are made tiny so that products and sums fall below f32's normals (flushed to
  // zeros of their sign), some subnormal (read as zero), and odd K ends a block on a lone k.
  const int saved_threads = omp_get_max_threads();
  const k::GemmKernel saved = k::gemm_kernel();
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  int64_t compared = 0;
  for (k::GemmPrecision precision : {k::GemmPrecision::f32, k::GemmPrecision::bf16})
    for (int threads : {1, 2})
      for (int64_t M : {1, 2, 3, 4})
        for (int64_t N : {8, 9, 31, 33, 100, 1100})
          for (int64_t K : {1, 7, 9, 256, 257, 600})
            for (bool accumulate : {false, true}) {
              const bool bf16 = precision == k::GemmPrecision::bf16;
              CAPTURE(bf16);
              CAPTURE(threads);
              CAPTURE(M);
              CAPTURE(N);
              CAPTURE(K);
              CAPTURE(accumulate);
              omp_set_num_threads(threads);
              const int64_t rows = 7;
              std::vector<float> a(rows * K), w(N * K), c0(rows * N);
              for (auto* v : {&a, &w, &c0})
                for (float& x : *v) x = normal(rng);
              if (bf16) {
                // Rows 0 and 1 of A (M 1 meets them too) and the first rows of W scaled to
                // ~1e-19: their products near 1e-38, some below f32's smallest normal, and so
                // the sums of the first columns; a few subnormal operands.
                for (int64_t kk = 0; kk < 2 * K; ++kk) a[kk] *= 1e-19f;
                for (int64_t i = 0; i < std::min<int64_t>(N, 3) * K; ++i) w[i] *= 1e-19f;
                for (size_t i = 0; i < a.size(); i += 13) a[i] = 3e-39f;
                for (size_t i = 5; i < w.size(); i += 17) w[i] = -2e-39f;
              }
              // B = W^T read through strides, and the same B stored row-major (W^T's copy).
              std::vector<float> wt(K * N);
              for (int64_t n = 0; n < N; ++n)
                for (int64_t kk = 0; kk < K; ++kk) wt[kk * N + n] = w[n * K + kk];
              const k::MatrixRef<float> A{a.data(), K, 1}, B{w.data(), 1, K}, Bt{wt.data(), N, 1};
              std::vector<float> few(c0.begin(), c0.begin() + M * N), blocked = c0, portable = few,
                                                                      row_major = few;
              const k::GemmPrecision before = k::set_gemm_precision(precision);
              k::gemm<float>(M, N, K, A, B, few.data(), N, true, accumulate);
              k::gemm<float>(M, N, K, A, Bt, row_major.data(), N, true, accumulate);
              k::gemm<float>(rows, N, K, A, B, blocked.data(), N, true, accumulate);
              k::set_gemm_kernel(k::GemmKernel::portable);
              k::gemm<float>(M, N, K, A, B, portable.data(), N, true, accumulate);
              k::set_gemm_kernel(saved);
              k::set_gemm_precision(before);
              REQUIRE(std::memcmp(few.data(), blocked.data(), few.size() * sizeof(float)) == 0);
              REQUIRE(std::memcmp(few.data(), portable.data(), few.size() * sizeof(float)) == 0);
              REQUIRE(std::memcmp(few.data(), row_major.data(), few.size() * sizeof(float)) == 0);
              ++compared;
            }
  omp_set_num_threads(saved_threads);
  CHECK(compared == 2 * 2 * 4 * 6 * 6 * 2);
}

TEST_CASE("a few rows against a weight kept in decoding panels give the GEMM's bits, f32 and bf16") {
  // gemm_f32_panels and gemm_bf16_panels (sampling with infer::DecodingWeights): B = W^T in
  // column panels, f32 values or bf16 bits widened as read; their twins are the GEMM on the
  // f32 B (the few-rows kernel and the blocked one through a 7-row product), in f32 and
  // under bf16 precision (rounding as it reads; bf16 panels through vdpbf16ps where the CPU
  // has AVX512_BF16 and through the emulation). Tiny and subnormal values, K within and
  // past 256-deep blocks, odd tails, 1-3 threads, N past several 128-wide panels (threads
  // from N K >= 2^14; their shares of N start and end inside panels, e.g. 288 = 128 + 128 +
  // 32 in two or three shares of 144 or 96 columns).
  if (!k::gemm_panels_apply(1, 8, 1))
    ATTEND_SKIP("no AVX2 kernel in use: the bf16-weight few-rows kernel was not checked");
  const int saved_threads = omp_get_max_threads();
  std::mt19937 rng(29);
  std::normal_distribution<float> normal;
  int64_t compared = 0;
  // Each SIMD kernel this CPU has: the AVX-512 one keeps one row's sums in registers, the
  // AVX2 one (and rows 2-4) in memory.
  std::vector<k::GemmKernel> kernels{k::GemmKernel::avx2};
  if (__builtin_cpu_supports("avx512f")) kernels.push_back(k::GemmKernel::avx512);
  for (const k::GemmKernel simd : kernels)
  for (const bool bf16 : {false, true})
  for (int threads : {1, 2, 3})
    for (int64_t M : {1, 2, 3, 4})
      for (int64_t N : {8, 33, 100, 288, 300, 1100})
        for (int64_t K : {1, 7, 257, 1000}) {
          CAPTURE(bf16);
          CAPTURE(threads);
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(K);
          CAPTURE(k::gemm_kernel_name(simd));
          omp_set_num_threads(threads);
          const k::GemmKernel kernel_before = k::set_gemm_kernel(simd);
          const int64_t rows = 7;
          // x's rows K apart, or (odd M) past the row's end: the kernels read A's stride
          const int64_t lda = M % 2 == 1 ? K + 3 : K;
          CAPTURE(lda);
          std::vector<float> a(rows * lda), b(K * N);
          for (auto* v : {&a, &b})
            for (float& x : *v) x = normal(rng);
          for (int64_t kk = 0; kk < K; ++kk) a[lda + kk] *= 1e-19f;
          for (int64_t i = 0; i < std::min<int64_t>(K, 3) * N; ++i) b[i] *= 1e-19f;
          for (size_t i = 0; i < a.size(); i += 13) a[i] = 3e-39f;
          for (size_t i = 5; i < b.size(); i += 17) b[i] = -2e-39f;
          std::vector<float> w(b.size()), panels(b.size());  // W = B^T (N, K), its panels
          for (int64_t n = 0; n < N; ++n)
            for (int64_t kk = 0; kk < K; ++kk) w[n * K + kk] = b[kk * N + n];
          std::vector<uint32_t> bits(static_cast<size_t>(k::decode_panels_bf16_words(N, K)));
          k::to_decode_panels(w.data(), N, K, panels.data());
          k::to_decode_panels_bf16(w.data(), N, K, bits.data());
          const test::PrecisionGuard precision(bf16 ? k::GemmPrecision::bf16 : k::GemmPrecision::f32);
          const k::MatrixRef<float> A{a.data(), lda, 1}, B{b.data(), N, 1};
          std::vector<float> got(M * N), few(M * N), blocked(rows * N);
          k::gemm<float>(M, N, K, A, B, few.data(), N, true);
          k::gemm<float>(rows, N, K, A, B, blocked.data(), N, true);
          // bf16: vdpbf16ps (where the CPU has it) and the emulation, each against the GEMM
          for (const k::Bf16Kernel kernel : {k::Bf16Kernel::native, k::Bf16Kernel::fma}) {
            const k::Bf16Kernel before = k::set_decode_bf16_kernel(kernel);
            std::fill(got.begin(), got.end(), -1.0f);
            if (bf16)
              k::gemm_bf16_panels(M, N, K, A, bits.data(), got.data(), N, true);
            else
              k::gemm_f32_panels(M, N, K, A, panels.data(), got.data(), N, true);
            k::set_decode_bf16_kernel(before);
            REQUIRE(std::memcmp(got.data(), few.data(), got.size() * sizeof(float)) == 0);
            REQUIRE(std::memcmp(got.data(), blocked.data(), got.size() * sizeof(float)) == 0);
            if (!bf16) break;
          }
          k::set_gemm_kernel(kernel_before);
          ++compared;
        }
  omp_set_num_threads(saved_threads);
  CHECK(compared == static_cast<int64_t>(kernels.size()) * 2 * 3 * 4 * 6 * 4);
  // and what it does not take, it refuses
  CHECK_FALSE(k::gemm_panels_apply(5, 8, 1));
  std::vector<uint32_t> w(8 * 3);
  std::vector<float> x(5 * 5), y(5 * 8);
  CHECK_THROWS_AS(k::gemm_bf16_panels(5, 8, 5, {x.data(), 5, 1}, w.data(), y.data(), 8, true),
                  Error);
}
