// The bf16 GEMM (set_gemm_precision(bf16)): the rounding on hand-picked values; a plain
// scalar twin that follows the stated arithmetic (pairs, high half first, f32 roundings,
// results below the smallest normal flushed, KC blocks added) matched bit for bit by the
// native (vdpbf16ps) and the emulated kernel; the f64 sum of the rounded operands within
// f32 rounding; 1 against 2 threads; f64 products untouched. (Prefixes of a prepacked B in
// bf16: tests/tensor/test_matmul.cpp.)
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
namespace k = attend::kernel;

namespace {

using test::PrecisionGuard;
struct KernelGuard {
  k::GemmKernel old;
  explicit KernelGuard(k::GemmKernel g) : old(k::set_gemm_kernel(g)) {}
  ~KernelGuard() { k::set_gemm_kernel(old); }
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float flush(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

// C = A @ B by the stated arithmetic, element by element, with the GEMM's K blocks of 256.
std::vector<float> twin(const std::vector<float>& a, const std::vector<float>& b, int64_t M,
                        int64_t N, int64_t K) {
  std::vector<float> c(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float total = 0;
      for (int64_t pc = 0; pc < K; pc += 256) {
        const int64_t kc = std::min<int64_t>(256, K - pc);
        float s = 0;
        for (int64_t p = 0; p < kc; p += 2) {
          auto av = [&](int64_t kk) {
            return kk < kc ? k::round_to_bf16(a[i * K + pc + kk]) : 0.0f;
          };
          auto bv = [&](int64_t kk) {
            return kk < kc ? k::round_to_bf16(b[(pc + kk) * N + j]) : 0.0f;
          };
          s = flush(std::fma(av(p + 1), bv(p + 1), s));
          s = flush(std::fma(av(p), bv(p), s));
        }
        total = pc == 0 ? s : total + s;
      }
      c[static_cast<size_t>(i * N + j)] = total;
    }
  return c;
}

// Values spread over many binades, with exact cancellations, tiny products (flushes),
// f32 subnormals (read as zeros when rounded) and exact ties of the rounding.
std::vector<float> spread(int64_t n, Generator& g) {
  std::vector<float> v = randn({n}, g).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 7 == 3) v[i] *= 1e-20f;  // products near and below f32's smallest normal
    if (i % 11 == 5) v[i] = -v[i - 1];
    if (i % 13 == 7) v[i] = from_bits((bits(v[i]) & 0x807fffffu) | 1u);  // a subnormal
    if (i % 17 == 9) v[i] = from_bits((bits(v[i]) & 0xffff0000u) | 0x8000u);  // a tie
  }
  return v;
}

void check_bits(const Tensor& got, const std::vector<float>& want) {
  const auto g = got.to_vector<float>();
  REQUIRE(g.size() == want.size());
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (bits(g[i]) != bits(want[i]) && !(std::isnan(g[i]) && std::isnan(want[i])) && diff++ == 0)
      first = i;
  const float got_first = g[first], want_first = want[first];
  CAPTURE(first);
  CAPTURE(diff);
  CAPTURE(got_first);
  CAPTURE(want_first);
  CHECK(diff == 0);
}

}  // namespace

TEST_CASE("bf16 rounding: nearest even, NaN kept, subnormal inputs zero, overflow to inf") {
  CHECK(k::round_to_bf16(1.0f) == 1.0f);
  CHECK(k::round_to_bf16(from_bits(0x3f808000)) == 1.0f);               // tie, even below
  CHECK(bits(k::round_to_bf16(from_bits(0x3f818000))) == 0x3f820000u);  // tie, even above
  CHECK(bits(k::round_to_bf16(from_bits(0x3f808001))) == 0x3f810000u);  // above the tie
  CHECK(bits(k::round_to_bf16(-3.14159265f)) == 0xc0490000u);
  CHECK(std::isnan(k::round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(k::round_to_bf16(from_bits(0x7f800001))));  // a NaN whose top bits are inf's
  CHECK(bits(k::round_to_bf16(1e-39f)) == 0u);                 // f32 subnormal: zero
  CHECK(bits(k::round_to_bf16(from_bits(0x007fffff))) == 0u);  // even the largest one
  CHECK(bits(k::round_to_bf16(from_bits(0x00800000))) == 0x00800000u);  // smallest normal kept
  CHECK(bits(k::round_to_bf16(-1e-39f)) == 0x80000000u);
  CHECK(bits(k::round_to_bf16(from_bits(0x7f7fffff))) == 0x7f800000u);  // rounds up to inf
  CHECK(k::round_to_bf16(std::numeric_limits<float>::infinity()) ==
        std::numeric_limits<float>::infinity());
}

namespace {

// Each kernel's products on odd sizes against the twin, bit for bit, with B row-major and
// with B = W^T (a Linear's weight read through strides: packed through 8x8 transposes, a
// block's last kc % 8 rows and partial panels apart), and with A row-major and transposed
// (dW's dY^T: a panel's rows adjacent at each k). N runs through every width of the
// native kernel's units of four 16-wide panels, whole and clipped: 1, 2 (33), 3 (48), 4
// (64), 4 + 3 whole (112) and clipped (100).
void check_twin(const std::vector<k::GemmKernel>& kernels) {
  Generator g(71);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  // M: a partial panel of six rows; one whole; 2, 4, 6 and 16 whole and a partial one (a
  // transposed A is packed eight whole panels at a time: groups of every width)
  for (int64_t M : {1, 6, 13, 25, 37, 97})
    for (int64_t N : {1, 16, 33, 48, 64, 100, 112})
      for (int64_t K : {1, 2, 7, 13, 256, 257, 270, 600}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        const auto av = spread(M * K, g), bv = spread(K * N, g);
        const Tensor a = tensor(std::vector<double>(av.begin(), av.end()), {M, K});
        const Tensor b = tensor(std::vector<double>(bv.begin(), bv.end()), {K, N});
        const auto want = twin(a.to_vector<float>(), b.to_vector<float>(), M, N, K);
        const Tensor w = k::contiguous(k::transpose(b, 0, 1));  // (N, K): b = w^T
        const Tensor at = k::contiguous(k::transpose(a, 0, 1));  // (K, M): a = at^T
        for (const auto kern : kernels) {
          const KernelGuard use(kern);
          CAPTURE(std::string(k::gemm_kernel_name(k::gemm_kernel())));
          check_bits(k::matmul(a, b), want);
          check_bits(k::matmul(a, k::transpose(w, 0, 1)), want);
          check_bits(k::matmul(k::transpose(at, 0, 1), b), want);  // A read down its columns
        }
      }
}

}  // namespace

TEST_CASE("the emulated bf16 GEMM (scalar, AVX2) gives its scalar twin's bits on odd sizes") {
  check_twin({k::GemmKernel::portable, k::GemmKernel::avx2});
}

struct Bf16KernelGuard {
  k::Bf16Kernel old;
  explicit Bf16KernelGuard(k::Bf16Kernel b) : old(k::set_gemm_bf16_kernel(b)) {}
  ~Bf16KernelGuard() { k::set_gemm_bf16_kernel(old); }
};

TEST_CASE("the native bf16 GEMM (vdpbf16ps) gives its scalar twin's bits on odd sizes") {
  if (!k::gemm_has_native_bf16())
    ATTEND_SKIP("this CPU has no AVX512_BF16: the native bf16 kernel was not checked");
  const Bf16KernelGuard native(k::Bf16Kernel::native);
  REQUIRE(k::gemm_bf16_kernel() == k::Bf16Kernel::native);
  check_twin({k::GemmKernel::avx512});
}

TEST_CASE("the bf16 GEMM in AVX-512 FMAs (Intel's choice) gives its scalar twin's bits on odd sizes") {
  bool avx512 = false;
  {
    const KernelGuard probe(k::GemmKernel::avx512);  // clamped to what the CPU has
    avx512 = k::gemm_kernel() == k::GemmKernel::avx512;
  }
  if (!avx512) ATTEND_SKIP("this CPU has no AVX-512: the AVX-512 emulation was not checked");
  const Bf16KernelGuard fma(k::Bf16Kernel::fma);
  check_twin({k::GemmKernel::avx512});
}

TEST_CASE("a bf16 GEMM whose B is bf16 bits gives gemm's bits on their f32 values, every kernel") {
  Generator g(73);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  std::vector<k::GemmKernel> kernels{k::GemmKernel::portable, k::GemmKernel::avx2,
                                     k::GemmKernel::avx512};
  for (int64_t M : {1, 6, 40})
    for (int64_t N : {1, 16, 33, 100})
      for (int64_t K : {1, 7, 256, 600}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        const auto av = spread(M * K, g);
        std::vector<float> bv = spread(K * N, g);
        bv[0] = -0.0f;
        if (bv.size() > 2) bv[2] = std::numeric_limits<float>::infinity();
        std::vector<uint16_t> bits16(bv.size());
        k::to_bf16_bits(bv.data(), bits16.data(), static_cast<int64_t>(bv.size()));
        std::vector<float> widened(bv.size());
        k::from_bf16_bits(bits16.data(), widened.data(), static_cast<int64_t>(bv.size()));
        for (const auto kern : kernels) {
          const KernelGuard use(kern);
          CAPTURE(std::string(k::gemm_kernel_name(k::gemm_kernel())));
          for (const bool accumulate : {false, true}) {
            for (const int threads : {1, 2}) {
              CAPTURE(threads);
              const int old = omp_get_max_threads();
              omp_set_num_threads(threads);
              std::vector<float> want(static_cast<size_t>(M * N), 0.5f), got = want;
              k::gemm<float>(M, N, K, {av.data(), K, 1}, {widened.data(), N, 1}, want.data(), N,
                             true, accumulate);
              k::gemm_bf16_bits_b(M, N, K, {av.data(), K, 1}, bits16.data(), N, got.data(), N,
                                  accumulate);
              omp_set_num_threads(old);
              CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
            }
          }
        }
      }
}

TEST_CASE(
    "gemm_bf16_bits: B as bf16 bits through any strides gives gemm's bits on its f32, every "
    "kernel") {
  // A decoder's bf16 cache read in place (attention_one_query on bf16 bits): K^T (B's columns rows
  // of the cache, the few-rows products' 8x8 transposes) and V (B's rows, the decoding
  // panels' kernel), each with rows further apart than they are long. The twin is gemm on the
  // f32 values the bits were rounded from, through the same strides: the products round them
  // as they read them. Shapes: the few-rows products' M (1-4) and past them (6: B widened
  // first), N under 8 (widened first), with a tail past whole vectors (13, 100) and past one
  // panel (130); K odd, one KC block (256) and past it (300, 600).
  Generator g(75);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  for (const auto kern : {k::GemmKernel::portable, k::GemmKernel::avx2, k::GemmKernel::avx512}) {
    const KernelGuard use(kern);
    CAPTURE(std::string(k::gemm_kernel_name(k::gemm_kernel())));
    for (int64_t M : {1, 2, 4, 6})
      for (int64_t N : {5, 8, 13, 100, 130})
        for (int64_t K : {1, 7, 64, 256, 300, 600})
          for (const bool transposed : {false, true}) {
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            CAPTURE(transposed);
            const int64_t gap = 5;  // other values between rows
            const int64_t ld = (transposed ? K : N) + gap, rows = transposed ? N : K;
            std::vector<float> bv = spread(rows * ld, g);
            bv[0] = -0.0f;
            if (bv.size() > 2) bv[2] = std::numeric_limits<float>::infinity();
            std::vector<uint16_t> bits16(bv.size());
            k::to_bf16_bits(bv.data(), bits16.data(), static_cast<int64_t>(bv.size()));
            const int64_t rs = transposed ? 1 : ld, cs = transposed ? ld : 1;
            const auto av = spread(M * K, g);
            std::vector<float> want(static_cast<size_t>(M * N), 0.5f), got(want.size(), -3.0f);
            k::gemm<float>(M, N, K, {av.data(), K, 1}, {bv.data(), rs, cs}, want.data(), N, false);
            k::gemm_bf16_bits(M, N, K, {av.data(), K, 1}, {bits16.data(), rs, cs}, got.data(), N);
            CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
          }
  }
  const PrecisionGuard f32(k::GemmPrecision::f32);
  std::vector<float> a(4, 1.0f), c(4);
  std::vector<uint16_t> b(4);
  CHECK_THROWS_WITH_AS(k::gemm_bf16_bits(1, 2, 2, {a.data(), 2, 1}, {b.data(), 2, 1}, c.data(), 2),
                       doctest::Contains("under f32 products"), std::logic_error);
}

namespace {

// gemm_bf16_keep_a under the bf16 kernel b16, with each f32 kernel: gemm's C, and A's bits
// as to_bf16_bits makes them, at 1 and 2 threads.
void check_keep_a(k::Bf16Kernel b16) {
  Generator g(74);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  const Bf16KernelGuard use16(b16);
  for (const auto kern : {k::GemmKernel::portable, k::GemmKernel::avx2, k::GemmKernel::avx512})
    for (int64_t M : {1, 3, 13, 97})
      for (int64_t N : {1, 33, 3100})  // 3100: two column blocks of the GEMM (NC 3072)
        for (int64_t K : {1, 7, 40, 300}) {
          if (N == 3100 && (K > 40 || M > 13)) continue;
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(K);
          const KernelGuard use(kern);
          CAPTURE(std::string(k::gemm_kernel_name(k::gemm_kernel())));
          const auto av = spread(M * K, g), bv = spread(K * N, g);
          std::vector<uint16_t> want_bits(av.size());
          k::to_bf16_bits(av.data(), want_bits.data(), static_cast<int64_t>(av.size()));
          for (const int threads : {1, 2}) {
            CAPTURE(threads);
            std::vector<uint16_t> got_bits(av.size(), 0x5555);  // each run writes them all
            const int old = omp_get_max_threads();
            omp_set_num_threads(threads);
            std::vector<float> want(static_cast<size_t>(M * N)), got(want.size(), 7.0f);
            k::gemm<float>(M, N, K, {av.data(), K, 1}, {bv.data(), N, 1}, want.data(), N, true);
            k::gemm_bf16_keep_a(M, N, K, {av.data(), K, 1}, {bv.data(), N, 1}, got.data(), N,
                                got_bits.data());
            omp_set_num_threads(old);
            CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
            CHECK(want_bits == got_bits);
          }
        }
}

}  // namespace

TEST_CASE("a bf16 GEMM that keeps A's bits gives gemm's C and to_bf16_bits' bits: emulations") {
  check_keep_a(k::Bf16Kernel::fma);
}

TEST_CASE("a bf16 GEMM that keeps A's bits gives gemm's C and to_bf16_bits' bits: vdpbf16ps") {
  if (!k::gemm_has_native_bf16())
    ATTEND_SKIP("this CPU has no AVX512_BF16: the native kernel's packing was not checked");
  check_keep_a(k::Bf16Kernel::native);
}

TEST_CASE("bf16 GEMM: within f32 rounding of the exact sum of the rounded operands") {
  Generator g(72);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  const int64_t M = 37, N = 70, K = 700;
  const Tensor a = randn({M, K}, g), b = randn({K, N}, g);
  const auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  const auto c = k::matmul(a, b).to_vector<float>();
  double worst = 0, worst_vs_f32 = 0;
  const auto c32 = [&] {
    const PrecisionGuard f32(k::GemmPrecision::f32);
    return k::matmul(a, b).to_vector<float>();
  }();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double exact = 0, mag = 0;
      for (int64_t kk = 0; kk < K; ++kk) {
        const double p = static_cast<double>(k::round_to_bf16(av[i * K + kk])) *
                         k::round_to_bf16(bv[kk * N + j]);
        exact += p;
        mag += std::fabs(p);
      }
      worst = std::max(worst, std::fabs(c[i * N + j] - exact) / mag);
      worst_vs_f32 = std::max(worst_vs_f32, std::fabs(c[i * N + j] - c32[i * N + j]) / mag);
    }
  MESSAGE("relative to sum |a b|: vs the exact sum of rounded operands " << worst << ", vs f32 "
                                                                         << worst_vs_f32);
  CHECK(worst < K * 6e-8);  // f32 accumulation of K products
  // Each operand within 2^-9 (half a bf16 ulp) of its f32 value: a product within 2^-8 of
  // |a b|, plus both sides' f32 sums of K products.
  CHECK(worst_vs_f32 < 0.00390625 + 2 * K * 6e-8);
  CHECK(worst_vs_f32 > 1e-5);  // and the rounding did happen
}

TEST_CASE("bf16 GEMM is bit-identical with 1 and 2 threads, f64 is never rounded") {
  Generator g(73);
  const PrecisionGuard bf16(k::GemmPrecision::bf16);
  const Tensor a = randn({300, 400}, g), b = randn({400, 500}, g);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor one = k::matmul(a, b);
  omp_set_num_threads(2);
  const Tensor two = k::matmul(a, k::contiguous(b));
  omp_set_num_threads(before);
  check_bits(two, one.to_vector<float>());
  const Tensor a64 = k::cast(a, DType::F64), b64 = k::cast(b, DType::F64);
  const Tensor c64 = k::matmul(a64, b64);
  const PrecisionGuard f32(k::GemmPrecision::f32);
  test::check_close(c64, k::matmul(a64, b64), 0, 0);
}

TEST_CASE("to_bf16_bits and back give round_to_bf16's values, in parallel and in its tail") {
  Generator g(5);
  std::vector<float> v = spread((1 << 21) + 3, g);  // two parallel pieces, not a multiple of 8
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            from_bits(0x7f800001),
                            1e-39f,
                            -1e-39f,
                            from_bits(0x7f7fffff),
                            from_bits(0x3f808000),
                            from_bits(0x3f818000),
                            -std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i < 8; ++i) v[i * 9] = specials[i], v[v.size() - 1 - i] = specials[i];
  std::vector<uint16_t> half(v.size());
  std::vector<float> back(v.size());
  k::to_bf16_bits(v.data(), half.data(), static_cast<int64_t>(v.size()));
  k::from_bf16_bits(half.data(), back.data(), static_cast<int64_t>(v.size()));
  size_t diff = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const float want = k::round_to_bf16(v[i]);
    diff += bits(back[i]) != bits(want) && !(std::isnan(back[i]) && std::isnan(want));
    diff += (bits(back[i]) & 0xffffu) != 0;
  }
  CHECK(diff == 0);
}

// Products with a frozen bf16 weight (gemm_bf16_weight_t / gemm_bf16_weight: train
// --base_weights bf16) against gemm on the weight's widened f32 values: the same bits, with
// W widened in several blocks (N or K past one 8 MB block, K not a multiple of the GEMM's
// K block), in f32 and in bf16 precision, with 1 and 2 threads, stored and accumulated.
TEST_CASE("bf16 weight products give gemm's bits on the widened weight, blocks and all") {
  Generator g(91);
  for (const auto prec : {k::GemmPrecision::f32, k::GemmPrecision::bf16}) {
    const PrecisionGuard p(prec);
    // (M, N, K): x W^T with W (N, K) in three blocks of rows; g W with W (K, N) in three
    // blocks of K (each a multiple of 256 rows); and a small one-block case
    struct Case { int64_t M, N, K; };
    for (const Case c : {Case{7, 700, 8192}, Case{5, 8192, 700}, Case{9, 33, 65}}) {
      INFO(k::gemm_precision_name(prec), " M ", c.M, " N ", c.N, " K ", c.K);
      const Tensor wt = k::cast(k::cast(randn({c.N, c.K}, g), DType::BF16), DType::F32);
      const Tensor wn = k::cast(k::cast(randn({c.K, c.N}, g), DType::BF16), DType::F32);
      const Tensor wt16 = k::cast(wt, DType::BF16), wn16 = k::cast(wn, DType::BF16);
      const Tensor a = randn({c.M, c.K}, g), c0 = randn({c.M, c.N}, g);
      for (const int threads : {1, 2}) {
        INFO("threads ", threads);
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        const Tensor want_t = k::matmul(a, k::transpose(wt, 0, 1));
        Tensor got_t = empty({c.M, c.N}, DType::F32);
        k::gemm_bf16_weight_t(c.M, c.N, c.K, {a.data<float>(), c.K, 1}, wt16.data<uint16_t>(),
                              got_t.data<float>(), c.N);
        const Tensor want_n = k::matmul(a, wn);
        Tensor got_n = empty({c.M, c.N}, DType::F32);
        k::gemm_bf16_weight(c.M, c.N, c.K, {a.data<float>(), c.K, 1}, wn16.data<uint16_t>(),
                            got_n.data<float>(), c.N);
        // accumulated: C += product, as gemm's accumulate
        Tensor want_acc = k::clone(c0), got_acc = k::clone(c0);
        k::gemm<float>(c.M, c.N, c.K, {a.data<float>(), c.K, 1}, {wn.data<float>(), c.N, 1},
                       want_acc.data<float>(), c.N, true, true);
        k::gemm_bf16_weight(c.M, c.N, c.K, {a.data<float>(), c.K, 1}, wn16.data<uint16_t>(),
                            got_acc.data<float>(), c.N, true);
        omp_set_num_threads(before);
        check_bits(got_t, want_t.to_vector<float>());
        check_bits(got_n, want_n.to_vector<float>());
        check_bits(got_acc, want_acc.to_vector<float>());
      }
    }
  }
}

TEST_CASE("bf16 tensors: cast rounds as the GEMM does, widens exactly, and other ops refuse them") {
  Generator g(17);
  std::vector<float> v = spread(1000, g);
  v[3] = 1e-39f;  // a subnormal: to a zero
  const Tensor x = tensor(std::vector<double>(v.begin(), v.end()), {10, 100});
  const Tensor h = k::cast(x, DType::BF16);
  CHECK(h.dtype() == DType::BF16);
  CHECK(h.numel() == 1000);
  const Tensor back = k::cast(h, DType::F32);
  std::vector<float> want(v.size());
  for (size_t i = 0; i < v.size(); ++i) want[i] = k::round_to_bf16(v[i]);
  check_bits(back, want);
  // a view of bf16 bits copies as bits
  check_bits(k::cast(k::contiguous(k::transpose(h, 0, 1)), DType::F32),
             k::transpose(back, 0, 1).to_vector<float>());
  CHECK_THROWS_WITH(k::cast(h, DType::F64), doctest::Contains("bf16 converts only to and from f32"));
  CHECK_THROWS_WITH(k::binary(k::Binary::Add, h, h), doctest::Contains("bf16"));
  Tensor w = k::clone(h);
  CHECK_THROWS_WITH(w.requires_grad_(), doctest::Contains("only floating tensors"));
}
