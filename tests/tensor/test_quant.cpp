// The Q8_0 product (Note [The Q8_0 product], tensor/quant.h) against its scalar twin, bit
// for bit, on every kernel this CPU has and any thread count; and StoredWeight's q8_0 format
// against the f32 product of the dequantized weights.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/quant.h"
#include "tensor/random.h"
#include "tensor/stored_weight.h"
#include "test_util.h"

using namespace attend;
namespace k = attend::kernel;

namespace {

struct Case {
  int64_t M, N, K;
};

std::vector<uint8_t> quantized(const std::vector<float>& w) {
  std::vector<uint8_t> q(w.size() / 32 * 34);
  quant::quantize_q8_0(w.data(), static_cast<int64_t>(w.size()), q.data());
  return q;
}

}  // namespace

TEST_CASE("q8_0 quantizing: the vector rounding gives the reference's bytes") {
  // Blocks that reach every branch of the rounding: values exactly halfway between two
  // integers once scaled (both signs: half away from zero), a block of zeros (id 0), a
  // block of -0.0, scales whose half is subnormal or rounds, magnitudes near f32's largest,
  // subnormal inputs, and random blocks; NaN and infinity (the plain path, the same bytes).
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x;
  auto block = [&](auto f) {
    for (int j = 0; j < 32; ++j) x.push_back(f(j));
  };
  block([](int j) { return j == 0 ? 127.0f : static_cast<float>(j) - 15.5f; });  // ties
  block([](int j) { return j == 0 ? -127.0f : 0.5f * static_cast<float>(j % 7) - 1.5f; });
  block([](int) { return 0.0f; });
  block([](int) { return -0.0f; });
  block([](int j) { return 1e-6f * static_cast<float>(j - 16); });    // subnormal half d
  block([](int j) { return 1e-40f * static_cast<float>(j - 16); });   // subnormal inputs
  block([](int j) { return 3e38f * (j % 2 ? -1.0f : 1.0f) / static_cast<float>(j + 1); });
  block([](int j) { return 70000.0f * static_cast<float>(j - 16); });  // d past half's largest
  for (int b = 0; b < 200; ++b) {
    const float s = std::ldexp(1.0f, b % 40 - 20);
    block([&](int) { return normal(rng) * s; });
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> want(static_cast<size_t>(n / 32 * 34)), got(want.size(), 0xee);
  quant::quantize_q8_0(x.data(), n, want.data());
  quant::quantize_q8_0_fast(x.data(), n, got.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    CAPTURE(b);
    CHECK(std::memcmp(want.data() + b * 34, got.data() + b * 34, 34) == 0);
  }
  // not finite: the plain path, so the same bytes whatever they are
  std::vector<float> bad(64, 1.0f);
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  bad[40] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> w2(68), g2(68, 0xee);
  quant::quantize_q8_0(bad.data(), 64, w2.data());
  quant::quantize_q8_0_fast(bad.data(), 64, g2.data());
  CHECK(w2 == g2);
}

TEST_CASE("q8_0 product: every kernel and thread count gives its scalar twin's bits") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const int saved_threads = omp_get_max_threads();
  const k::GemmKernel saved = k::gemm_kernel();
  int kernels_run = 0;
  for (const k::GemmKernel kind :
       {k::GemmKernel::avx512, k::GemmKernel::avx2, k::GemmKernel::portable}) {
    k::set_gemm_kernel(kind);
    if (k::gemm_kernel() != kind) continue;  // not on this CPU
    ++kernels_run;
    // K / 32 blocks: 1, 8, 3, 9, 2, 4, 24 (16 and 8), 17, 33 (the VNNI kernel takes 16 a
    // time, a pair a register: odd tails and short sixteens); M 1-5 (8 rows of W a time for
    // one row of x, 4 for two, 2 for 3-4); N not a multiple of them (300: 37 eights and 4 left).
    // Past 4 rows of x, W's rows go in chunks (K 256: 64 rows, 768: 20, 3072: 4) with a short
    // last one.
    for (const Case c : {Case{1, 8, 32}, Case{1, 300, 256}, Case{3, 97, 96}, Case{4, 1030, 288},
                         Case{5, 64, 64}, Case{17, 33, 128}, Case{1, 4096, 768},
                         Case{2, 51, 544}, Case{3, 21, 1056}, Case{4, 7, 3072},
                         Case{23, 300, 256}, Case{9, 37, 3072}, Case{62, 101, 768}}) {
      INFO(k::gemm_kernel_name(kind), " M ", c.M, " N ", c.N, " K ", c.K);
      std::vector<float> x(static_cast<size_t>(c.M * c.K)), w(static_cast<size_t>(c.N * c.K));
      for (float& v : x) v = normal(rng);
      for (float& v : w) v = normal(rng) * 0.05f;
      const std::vector<uint8_t> q = quantized(w);
      std::vector<uint8_t> laid(static_cast<size_t>(quant::q8_0_as_read_bytes(c.N, c.K)));
      quant::q8_0_as_read(q.data(), c.N, c.K, laid.data());
      std::vector<float> want(static_cast<size_t>(c.M * c.N)), got(want.size());
      quant::gemm_q8_0_reference(c.M, c.N, c.K, x.data(), c.K, q.data(), want.data(), c.N);
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        std::fill(got.begin(), got.end(), -1.0f);
        quant::gemm_q8_0(c.M, c.N, c.K, x.data(), c.K, laid.data(), got.data(), c.N, true);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
    }
  }
  k::set_gemm_kernel(saved);
  omp_set_num_threads(saved_threads);
  CHECK(kernels_run >= 1);
}

TEST_CASE("q8_0 as read: the layout holds the blocks' numbers") {
  // Laid out and read back: the same values as dequantizing the blocks, bit for bit, on
  // every kernel and thread count (the reading is vectorised and split across threads).
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int saved_threads = omp_get_max_threads();
  const k::GemmKernel saved = k::gemm_kernel();
  for (const int64_t N : {int64_t{5}, int64_t{3001}}) {
    const int64_t K = 96;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = normal(rng);
    const std::vector<uint8_t> q = quantized(w);
    std::vector<uint8_t> laid(static_cast<size_t>(quant::q8_0_as_read_bytes(N, K)));
    CHECK(laid.size() == q.size());
    quant::q8_0_as_read(q.data(), N, K, laid.data());
    std::vector<float> want(w.size()), got(w.size());
    quant::dequantize_q8_0(q.data(), N * K, want.data());
    for (const k::GemmKernel kind :
         {k::GemmKernel::avx512, k::GemmKernel::avx2, k::GemmKernel::portable}) {
      k::set_gemm_kernel(kind);
      if (k::gemm_kernel() != kind) continue;  // not on this CPU
      for (const int threads : {1, 2}) {
        INFO(k::gemm_kernel_name(kind), " N ", N, " threads ", threads);
        omp_set_num_threads(threads);
        std::fill(got.begin(), got.end(), -1.0f);
        quant::dequantize_q8_0_as_read(laid.data(), N, K, got.data());
        CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
      }
    }
  }
  k::set_gemm_kernel(saved);
  omp_set_num_threads(saved_threads);
}

TEST_CASE("q8_0 as read: groups of eight rows, by sixteens of blocks, scales first") {
  // Note [Q8_0 as read]'s places, worked out by hand: N 10 is a group of 8 rows and one of
  // 2; K 96 is one sixteen of 3 blocks a row (a pair and a lone block), K 1088 three
  // sixteens of 16, 16 and 2 blocks.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  struct Place {
    int64_t n, b, j, at;  // value j of row n's block b at byte `at` (j -1: its scale)
  };
  const std::vector<std::pair<int64_t, std::vector<Place>>> cases = {
      {96,
       {{0, 0, -1, 0}, {3, 1, -1, 20},  // group 0: 8 x 3 scales, then 8 pairs, 8 lone blocks
        {1, 0, 0, 112}, {7, 1, 31, 559}, {5, 2, 7, 727},
        {9, 0, -1, 822}, {9, 0, 0, 892}, {9, 2, 0, 988}}},  // group 1 from 816: 2 x 3 scales
      {1088,
       {{3, 1, -1, 98}, {4, 31, -1, 4510}, {6, 33, -1, 8730},  // sixteens at 0, 4352, 8704
        {1, 0, 0, 320}, {7, 1, 31, 767}, {3, 15, 1, 4065}, {3, 33, 1, 8961},
        {9, 0, -1, 9280}, {9, 0, 0, 9376}, {9, 32, -1, 11428}, {8, 32, 0, 11432}}}};  // 9248 on
  for (const auto& [K, places] : cases) {
    const int64_t N = 10, nb = K / 32;
    std::vector<float> w(static_cast<size_t>(N * K));
    for (float& v : w) v = normal(rng);
    const std::vector<uint8_t> q = quantized(w);
    std::vector<uint8_t> laid(static_cast<size_t>(quant::q8_0_as_read_bytes(N, K)));
    quant::q8_0_as_read(q.data(), N, K, laid.data());
    for (const Place& p : places) {
      INFO("K ", K, " row ", p.n, " block ", p.b, " value ", p.j, " at ", p.at);
      const size_t block = static_cast<size_t>((p.n * nb + p.b) * 34);
      if (p.j < 0) {
        CHECK(laid[static_cast<size_t>(p.at)] == q[block]);
        CHECK(laid[static_cast<size_t>(p.at) + 1] == q[block + 1]);
      } else {
        CHECK(laid[static_cast<size_t>(p.at)] == (q[block + 2 + static_cast<size_t>(p.j)] ^ 0x80));
      }
    }
  }
}

TEST_CASE("q8_0 product: the product of the dequantized weights and rounded x, to f32 rounding") {
  // The twin's arithmetic is one order of the same sum: against a double sum of
  // d q * e p (W's and x's Q8_0 values), it is within a few ulps of the magnitudes summed.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t M = 2, N = 40, K = 512;
  std::vector<float> x(M * K), w(N * K), wd(N * K), y(M * N);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  const std::vector<uint8_t> q = quantized(w);
  quant::dequantize_q8_0(q.data(), N * K, wd.data());
  quant::gemm_q8_0_reference(M, N, K, x.data(), K, q.data(), y.data(), N);
  std::vector<float> xr = x;
  quant::round_to_q8_0(xr.data(), M * K);
  double moved = 0;  // how far x's rounding moves it: small, and not nothing
  for (int64_t i = 0; i < M * K; ++i) moved = std::max(moved, std::abs(double{xr[i]} - x[i]));
  CHECK(moved > 0);
  CHECK(moved < 0.02);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int64_t i = 0; i < K; ++i) {
        s += static_cast<double>(wd[n * K + i]) * xr[m * K + i];
        mag += std::abs(static_cast<double>(wd[n * K + i]) * xr[m * K + i]);
      }
      CHECK(std::abs(y[m * N + n] - s) <= 1e-6 * mag);
    }
}

TEST_CASE("StoredWeight q8_0: any rows give each row's bits alone, the product of the two roundings") {
  Generator gen(9);
  const Tensor w = randn({48, 64}, gen);
  const StoredWeight s(w, WeightFormat::q8_0);
  CHECK(s.format() == WeightFormat::q8_0);
  CHECK(StoredWeight::bytes_for(w, WeightFormat::q8_0) == 48 * 2 * 34);
  std::vector<uint8_t> q(48 * 2 * 34);
  Tensor wd = empty({48, 64});
  quant::quantize_q8_0(w.data<float>(), w.numel(), q.data());
  quant::dequantize_q8_0(q.data(), w.numel(), wd.data<float>());
  for (const int64_t rows : {1, 4, 16, 17, 40}) {
    INFO("rows ", rows);
    const Tensor x = randn({rows, 64}, gen);
    const Tensor got = s.multiply(x);
    REQUIRE(got.defined());
    Tensor xr = k::clone(x);
    quant::round_to_q8_0(xr.data<float>(), xr.numel());
    test::check_close(got, k::matmul(xr, k::transpose(wd, 0, 1)), 1e-5, 1e-5);
    // a prompt's rows get what each gets alone (a token's product)
    for (const int64_t r : {int64_t{0}, rows - 1})
      CHECK(test::bit_identical(k::select(got, 0, r), k::squeeze(s.multiply(k::narrow(x, 0, r, 1)), 0)));
  }
  CHECK_THROWS_WITH_AS(StoredWeight(randn({4, 40}, gen), WeightFormat::q8_0),
                       doctest::Contains("rows a multiple of 32 long"), Error);
  Tensor bad = randn({2, 32}, gen);
  bad.data<float>()[5] = NAN;
  CHECK_THROWS_WITH_AS(StoredWeight(bad, WeightFormat::q8_0),
                       doctest::Contains("holds nan at row 0"), Error);
}
