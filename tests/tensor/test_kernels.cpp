// Kernel values against hand-computed cases, f32 against f64, and thread-count
// independence of the reductions.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tensor/kernels.h"
#include "tensor/kernels/rowmath.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
namespace k = attend::kernel;
using test::PrecisionGuard;

TEST_CASE("elementwise ops on hand-computed values, broadcasting and strided inputs") {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = tensor({10, 20, 30}, {3});
  Tensor col = tensor({100, 200}, {2, 1});
  CHECK(k::binary(k::Binary::Add, a, row).to_vector<float>() ==
        std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK(k::binary(k::Binary::Mul, a, col).to_vector<float>() ==
        std::vector<float>{100, 200, 300, 800, 1000, 1200});
  CHECK(k::binary(k::Binary::Sub, row, a).shape() == Shape{2, 3});
  CHECK(k::binary(k::Binary::Div, a, row).at({1, 2}) == doctest::Approx(0.2));
  // (2,1) op (3,) broadcasts both ways to (2,3).
  CHECK(k::binary(k::Binary::Add, col, row).to_vector<float>() ==
        std::vector<float>{110, 120, 130, 210, 220, 230});
  // A transposed (strided) operand.
  Tensor at = k::transpose(a, 0, 1);  // (3, 2)
  CHECK(k::binary(k::Binary::Add, at, at).to_vector<float>() ==
        std::vector<float>{2, 8, 4, 10, 6, 12});

  Tensor x = tensor({-2, -0.5, 0, 0.5, 2}, {5}, DType::F64);
  CHECK(k::unary(k::Unary::Relu, x).to_vector<double>() == std::vector<double>{0, 0, 0, 0.5, 2});
  CHECK(k::unary(k::Unary::Neg, x).at({0}) == 2);
  CHECK(k::unary(k::Unary::Pow, x, 3).at({4}) == 8);
  CHECK(k::unary(k::Unary::Affine, x, 2, 1).at({1}) == 0);
  CHECK(k::unary(k::Unary::Exp, x).at({2}) == 1);
  CHECK(k::unary(k::Unary::Tanh, x).at({4}) == doctest::Approx(std::tanh(2.0)));
  // GPT-2's GELU, tanh form: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)).
  Tensor one = tensor({1.0}, {1}, DType::F64);
  CHECK(k::unary(k::Unary::Gelu, one).item() ==
        doctest::Approx(0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * 1.044715))).epsilon(1e-15));
  CHECK(k::unary(k::Unary::Gelu, tensor({-3.0, 0.0}, {2}, DType::F64)).at({1}) == 0);
}

TEST_CASE("sum, mean-like and max reductions over chosen dims") {
  Tensor a = k::view(arange(0, 24, 1, DType::F64), {2, 3, 4});
  CHECK(k::sum(a, {}, false).item() == 276);
  CHECK(k::sum(a, {0}, false).to_vector<double>() ==
        std::vector<double>{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  CHECK(k::sum(a, {2}, true).shape() == Shape{2, 3, 1});
  CHECK(k::sum(a, {-1}, false).to_vector<double>() == std::vector<double>{6, 22, 38, 54, 70, 86});
  CHECK(k::sum(a, {0, 2}, false).to_vector<double>() == std::vector<double>{60, 92, 124});
  // Reducing a strided view gives what reducing its contiguous copy gives.
  CHECK(k::sum(k::transpose(a, 0, 2), {0}, false).to_vector<double>() ==
        k::sum(k::contiguous(k::transpose(a, 0, 2)), {0}, false).to_vector<double>());
  auto [v, idx] = k::max(tensor({3, 9, 1, 9, -1, 4}, {2, 3}), {1}, false);
  CHECK(v.to_vector<float>() == std::vector<float>{9, 9});
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // first maximum wins
  auto [v2, idx2] = k::max(tensor({1, NAN, 5}, {3}), {0}, false);
  CHECK(std::isnan(v2.item()));
  CHECK(k::sum_to(k::expand(tensor({1, 2}, {2, 1}), {3, 2, 4}), {2, 1}).to_vector<float>() ==
        std::vector<float>{12, 24});
}

TEST_CASE("a long f32 sum accumulates in double") {
  // 1e7 copies of 0.1f: a float accumulator drifts by percents, ours stays exact to ~1e-7.
  Tensor x = full({10000000}, 0.1);
  CHECK(k::sum(x, {}, false).item() ==
        doctest::Approx(1e7 * static_cast<double>(0.1f)).epsilon(1e-7));
}

TEST_CASE("softmax, log_softmax, layer_norm, cross_entropy and embedding values") {
  Tensor x = tensor({1, 2, 3, 0, 0, 0}, {2, 3}, DType::F64);
  Tensor s = k::softmax(x);
  const double z = std::exp(1) + std::exp(2) + std::exp(3);
  CHECK(s.at({0, 2}) == doctest::Approx(std::exp(3) / z).epsilon(1e-15));
  CHECK(s.at({1, 1}) == doctest::Approx(1.0 / 3).epsilon(1e-15));
  CHECK(k::log_softmax(x).at({0, 0}) == doctest::Approx(1 - std::log(z)).epsilon(1e-15));
  // Future entries at -inf are exactly 0 after softmax.
  Tensor masked = k::masked_fill(tensor({1, 2, 3, 4}, {2, 2}), k::triu_mask(2, 2, 1), -INFINITY);
  Tensor p = k::softmax(masked);
  CHECK(p.at({0, 1}) == 0.0);
  CHECK(p.at({0, 0}) == 1.0);

  Tensor ln = k::layer_norm(tensor({1, 2, 3, 4}, {1, 4}, DType::F64), ones({4}, DType::F64),
                            zeros({4}, DType::F64), 0.0)
                  .y;
  // mean 2.5, biased var 1.25
  CHECK(ln.at({0, 0}) == doctest::Approx(-1.5 / std::sqrt(1.25)).epsilon(1e-14));
  CHECK(ln.at({0, 3}) == doctest::Approx(1.5 / std::sqrt(1.25)).epsilon(1e-14));

  // Uniform logits: the loss is ln V whatever the targets.
  auto ce =
      k::cross_entropy(zeros({4, 7}, DType::F64), tensor({0, 6, 3, -100}, {4}, DType::I64), -100);
  CHECK(ce.count == 3);
  CHECK(ce.loss.item() == doctest::Approx(std::log(7.0)).epsilon(1e-15));
  // Hand case: logits (1, 2), target 1: loss = log(e^1 + e^2) - 2.
  auto ce2 =
      k::cross_entropy(tensor({1, 2}, {1, 2}, DType::F64), tensor({1}, {1}, DType::I64), -100);
  CHECK(ce2.loss.item() == doctest::Approx(std::log(std::exp(1) + std::exp(2)) - 2).epsilon(1e-15));

  Tensor w = k::view(arange(0, 12), {4, 3});
  Tensor e = k::embedding(w, tensor({3, 0, 3}, {3}, DType::I64));
  CHECK(e.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11});
  Tensor de = k::embedding_backward(ones({3, 3}), tensor({3, 0, 3}, {3}, DType::I32), 4);
  CHECK(de.to_vector<float>() == std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2});
}

TEST_CASE("cat, where and masked_fill") {
  Tensor a = tensor({1, 2}, {1, 2}), b = tensor({3, 4, 5, 6}, {2, 2});
  CHECK(k::cat({a, b}, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(k::cat({b, b}, 1).shape() == Shape{2, 4});
  Tensor cond = tensor({1, 0}, {2}, DType::Bool);
  CHECK(k::where(cond, b, scalar_tensor(0)).to_vector<float>() == std::vector<float>{3, 0, 5, 0});
  CHECK(k::masked_fill(b, cond, -1).to_vector<float>() == std::vector<float>{-1, 4, -1, 6});
}

TEST_CASE("f32 kernels agree with f64 within f32 precision") {
  Generator g(5);
  Tensor x64 = randn({37, 129}, g, DType::F64);
  Tensor x32 = k::cast(x64, DType::F32);
  test::check_close(k::softmax(x32), k::softmax(x64), 1e-6, 1e-5);
  test::check_close(k::log_softmax(x32), k::log_softmax(x64), 1e-5, 1e-5);
  test::check_close(k::unary(k::Unary::Gelu, x32), k::unary(k::Unary::Gelu, x64), 1e-6, 1e-5);
  test::check_close(k::sum(x32, {1}, false), k::sum(x64, {1}, false), 1e-4, 1e-5);
  Tensor w64 = randn({129}, g, DType::F64), b64 = randn({129}, g, DType::F64);
  test::check_close(k::layer_norm(x32, k::cast(w64, DType::F32), k::cast(b64, DType::F32), 1e-5).y,
                    k::layer_norm(x64, w64, b64, 1e-5).y, 1e-5, 1e-4);
}

TEST_CASE("sum and softmax are bit-identical with 1 and 2 threads") {
  const int saved = omp_get_max_threads();
  Generator g(9);
  Tensor big = randn({3, 1000003}, g);  // long rows: chunked partial sums
  Tensor many = randn({4096, 65}, g);   // many short rows
  Tensor lead = randn({5000, 77}, g);   // leading-dim (column) path
  auto run = [&] {
    return std::vector<Tensor>{k::sum(big, {}, false),   k::sum(big, {1}, false),
                               k::sum(many, {1}, false), k::sum(lead, {0}, false),
                               k::softmax(many),         k::softmax(big)};
  };
  omp_set_num_threads(1);
  auto one = run();
  omp_set_num_threads(2);
  auto two = run();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result ", i);
    CHECK(test::bit_identical(one[i], two[i]));
  }
}

TEST_CASE("GELU and its gradient: vector lanes and the scalar remainder give the same bits") {
  // The maps are vectorised; a tensor of one element runs the scalar loop. Every element
  // must come out the same either way, or results would depend on how the elements are
  // split between threads.
  Generator g(21);
  Tensor x = normal({1003}, 0.0, 4.0, g), gr = normal({1003}, 0.0, 1.0, g);
  const Tensor y = kernel::unary(kernel::Unary::Gelu, x);
  const Tensor dy = kernel::binary(kernel::Binary::GeluGrad, gr, x);
  int differ = 0;
  for (int64_t i = 0; i < 1003; ++i) {
    const Tensor xi = kernel::contiguous(kernel::narrow(x, 0, i, 1));
    const Tensor gi = kernel::contiguous(kernel::narrow(gr, 0, i, 1));
    differ +=
        !test::bit_identical(kernel::unary(kernel::Unary::Gelu, xi), kernel::narrow(y, 0, i, 1));
    differ += !test::bit_identical(kernel::binary(kernel::Binary::GeluGrad, gi, xi),
                                   kernel::narrow(dy, 0, i, 1));
  }
  CHECK(differ == 0);
}

#if defined(__AVX512F__)
// GCC 12 warns inside its own AVX-512 headers where _mm512_* inline (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
TEST_CASE("AVX-512 softmax rows give the plain rows' bits") {
#if !defined(__AVX512F__)
  test::skip("built without AVX-512: the rows are the plain ones");
#else
  // Their twin is the plain (8-lane, scalar-tail) loop: rows of every length to 80 with every
  // valid count, in place and not, masked keys as -inf, large and tiny logits. Bit for bit
  // where the compiler contracts the plain exp_f32's a * b + c into the FMAs exp16 uses (GCC
  // at -O2 and above, the release build); in a build that does not (-O1, the sanitizer
  // build) the plain rows round differently, and the two must agree to rounding.
  std::mt19937 rng(18);
  // Does this build contract a * b + c into an FMA (as it would inside exp_f32, inlined
  // here)? (1 + 2^-13)(1 - 2^-13) - 1 is -2^-26 with one rounding, 0 with two.
  const volatile float va = 1.0f + 0x1p-13f, vb = 1.0f - 0x1p-13f, vc = -1.0f;
  const float fa = va, fb = vb, fc = vc;
  const bool contracted = fa * fb + fc == std::fma(fa, fb, fc);
  MESSAGE(
      "plain exp_f32 contracted to FMAs in this build: " << std::string(contracted ? "yes" : "no"));
  auto same = [&](const std::vector<float>& a, const std::vector<float>& b) {
    if (contracted) return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::abs(a[i] - b[i]) <= 1e-6f * std::abs(b[i]) + 1e-30f)) return false;
    return true;
  };
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int64_t rows = 0;
  for (int64_t n = 1; n <= 80; ++n)
    for (int64_t valid = 0; valid <= n; ++valid)
      for (int variant = 0; variant < 3; ++variant) {
        CAPTURE(n);
        CAPTURE(valid);
        CAPTURE(variant);
        const float spread = variant == 0 ? 1.0f : variant == 1 ? 30.0f : 1e-3f;
        std::vector<float> x(n), g(n);
        for (float& v : x) v = normal(rng) * spread;
        for (float& v : g) v = normal(rng);
        if (variant == 1 && valid > 2) x[valid / 2] = -std::numeric_limits<float>::infinity();
        const float ts = 0.125f + unit(rng);
        std::vector<float> y1(n, 7.0f), y2(n, 7.0f);
        k::softmax_row(x.data(), y1.data(), valid, n, ts);
        k::softmax_row_plain(x.data(), y2.data(), valid, n, ts);
        REQUIRE(same(y1, y2));
        std::vector<float> in_place = x;  // y may be x
        k::softmax_row(in_place.data(), in_place.data(), valid, n, ts);
        REQUIRE(same(in_place, y2));
        std::vector<float> d1(n, 7.0f), d2(n, 7.0f), d3 = g;
        k::softmax_grad_row(y2.data(), g.data(), d1.data(), valid, n, ts);
        k::softmax_grad_row_plain(y2.data(), g.data(), d2.data(), valid, n, ts);
        REQUIRE(same(d1, d2));
        k::softmax_grad_row(y2.data(), d3.data(), d3.data(), valid, n, ts);  // dx may be g
        REQUIRE(same(d3, d2));
        ++rows;
      }
  CHECK(rows == 3 * (80 * 81 / 2 + 80));
#endif
}
#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif

TEST_CASE("attention_one_query_f32: head-major and position-major keys give attention_forward's bits") {
  // One query row over Tk keys, GQA (NH 6, KVH 2) and MHA, with and without a window, the
  // keys and values laid out head after head (the layout attention_forward reads) or
  // position after position with other floats between (rows further apart than the heads):
  // the bits attention_forward gives the last of Tk query rows, at 1 and 2 threads, under
  // f32 and bf16 products; and with the keys as columns (K^T, infer::Decoder's layout); under
  // bf16, attention_one_query on the keys' and values' bf16 bits too, keys as rows and as
  // columns. Shapes: a head size with a tail past whole vectors (12, 40), keys
  // past one KC block (300, 600: the values' sums in two and three blocks), enough work for
  // threads over the heads (600: 6 x 600 x 40 >= 2^17 multiply-adds; 530 was short of it), a
  // window inside the keys and one past them.
  Generator g(11);
  const int before = omp_get_max_threads();
  struct Case {
    int64_t HS, Tk;
    k::GemmPrecision precision;
    int64_t KVH, window;
    int threads;
  };
  std::vector<Case> cases;
  for (const auto& [HS, Tk] : {std::pair<int64_t, int64_t>{16, 13}, {12, 300}, {40, 600}})
    for (const auto precision : {k::GemmPrecision::f32, k::GemmPrecision::bf16})
      for (const int64_t KVH : {2, 6})
        for (const int64_t window : {0, 5, 290})
          for (const int threads : {1, 2})
            cases.push_back({HS, Tk, precision, KVH, window, threads});
  for (const Case& c : cases) {
    CAPTURE(c.HS);
    CAPTURE(c.Tk);
    CAPTURE(static_cast<int>(c.precision));
    CAPTURE(c.KVH);
    CAPTURE(c.window);
    CAPTURE(c.threads);
    omp_set_num_threads(c.threads);
    const k::GemmPrecision was = k::set_gemm_precision(c.precision);
    const int64_t NH = 6, HS = c.HS, Tk = c.Tk, KVH = c.KVH, window = c.window;
    const int64_t extra = 40;  // other floats in a row
    // The reference: the last row of Tk query rows' causal attention (the blocked GEMM's
    // path, not the few-rows one a single query takes). Under a window inside the keys, a
    // block of 32 rows sums the values from its first row's first key, a single query from
    // its own: the same bits in f32 while the block's keys (up to window + 31) are one KC
    // block (the keys between add products of zero), not under bf16 (the keys' pairs start
    // elsewhere) nor past a block. There, the single query's own attention_forward is the
    // reference.
    const Tensor qs = randn({1, NH, Tk, HS}, g), k = randn({1, KVH, Tk, HS}, g),
                 v = randn({1, KVH, Tk, HS}, g);
    const double scale = 0.25;
    const Tensor q = k::contiguous(k::narrow(qs, 2, Tk - 1, 1));
    const bool rows_agree =
        window == 0 || window >= Tk || (c.precision == k::GemmPrecision::f32 && window + 31 <= 256);
    Tensor want = empty({1, NH, 1, HS});
    if (rows_agree) {
      const Tensor all = empty({1, NH, Tk, HS});
      k::attention_forward(qs, k, v, scale, 0, DropoutStream{}, all, window);
      want = k::contiguous(k::narrow(all, 2, Tk - 1, 1));
    } else {
      k::attention_forward(q, k, v, scale, Tk - 1, DropoutStream{}, want, window);
    }
    std::vector<float> got(static_cast<size_t>(NH * HS));
    // head-major: k and v as they are
    k::attention_one_query_f32(q.data<float>(), NH, HS, k.data<float>(), v.data<float>(), KVH, Tk,
                               Tk * HS, HS, scale, window, got.data());
    CHECK(std::memcmp(got.data(), want.data<float>(), got.size() * 4) == 0);
    // position-major, rows KVH HS + extra apart
    const int64_t row = KVH * HS + extra;
    std::vector<float> kp(static_cast<size_t>(Tk * row), NAN), vp(kp.size(), NAN);
    for (int64_t t = 0; t < Tk; ++t)
      for (int64_t h = 0; h < KVH; ++h)
        for (int64_t i = 0; i < HS; ++i) {
          kp[static_cast<size_t>(t * row + h * HS + i)] = k.data<float>()[(h * Tk + t) * HS + i];
          vp[static_cast<size_t>(t * row + h * HS + i)] = v.data<float>()[(h * Tk + t) * HS + i];
        }
    std::fill(got.begin(), got.end(), -1.0f);
    k::attention_one_query_f32(q.data<float>(), NH, HS, kp.data(), vp.data(), KVH, Tk, HS, row,
                               scale, window, got.data());
    CHECK(std::memcmp(got.data(), want.data<float>(), got.size() * 4) == 0);
    // keys as columns (each head HS rows of Tk keys, `cap` apart, heads cap HS + extra apart),
    // the values position-major: the decoder's layout
    const int64_t cap = Tk + extra, khead = HS * cap + extra;
    std::vector<float> kc(static_cast<size_t>(KVH * khead), NAN);
    for (int64_t h = 0; h < KVH; ++h)
      for (int64_t t = 0; t < Tk; ++t)
        for (int64_t i = 0; i < HS; ++i)
          kc[static_cast<size_t>(h * khead + i * cap + t)] = k.data<float>()[(h * Tk + t) * HS + i];
    std::fill(got.begin(), got.end(), -1.0f);
    k::attention_one_query(q.data<float>(), NH, HS, KVH, Tk,
                           k::OneQueryKV<float>{kc.data(), vp.data(), khead, 1, cap, HS, row},
                           scale, window, got.data());
    CHECK(std::memcmp(got.data(), want.data<float>(), got.size() * 4) == 0);
    if (c.precision == k::GemmPrecision::bf16) {  // the keys and values as bf16 bits
      std::vector<uint16_t> kb(kp.size()), vb(kp.size()), kcb(kc.size());
      k::to_bf16_bits(kp.data(), kb.data(), static_cast<int64_t>(kp.size()));
      k::to_bf16_bits(vp.data(), vb.data(), static_cast<int64_t>(vp.size()));
      k::to_bf16_bits(kc.data(), kcb.data(), static_cast<int64_t>(kc.size()));
      for (const bool columns : {false, true}) {
        CAPTURE(columns);
        std::fill(got.begin(), got.end(), -1.0f);
        const k::OneQueryKV<uint16_t> bits =
            columns ? k::OneQueryKV<uint16_t>{kcb.data(), vb.data(), khead, 1, cap, HS, row}
                    : k::OneQueryKV<uint16_t>{kb.data(), vb.data(), HS, row, 1, HS, row};
        k::attention_one_query(q.data<float>(), NH, HS, KVH, Tk, bits, scale, window, got.data());
        CHECK(std::memcmp(got.data(), want.data<float>(), got.size() * 4) == 0);
      }
    }
    k::set_gemm_precision(was);
  }
  omp_set_num_threads(before);
  // overlapping heads and rows are refused
  std::vector<float> x(64 * 64);
  CHECK_THROWS_WITH_AS(k::attention_one_query_f32(x.data(), 2, 16, x.data(), x.data(), 2, 4, 16, 16,
                                                  1.0, 0, x.data()),
                       doctest::Contains("keys 16 apart, elements 1 apart overlap"), Error);
}

TEST_CASE("attention_one_query: keys as columns and bf16 bits give key rows' bits, every kernel") {
  // infer::Decoder's cache: each head's keys as HS rows of `cap` (keys as columns: the scores'
  // product reads them as a row-major B), the values position-major (rows KVH HS apart), in
  // f32 and, under bf16 products, as bf16 bits; from one key up (under 8 keys the scores'
  // product widens or packs them first), past 32 (13, 70) and past a panel of 128 (200); head
  // sizes with a tail (12, 40) and GPT-2's (64); GQA and MHA; a window. The twin: the keys as
  // rows, in f32, which the test above holds to attention_forward's bits.
  Generator g(12);
  for (const auto precision : {k::GemmPrecision::f32, k::GemmPrecision::bf16})
    for (const auto kern : {k::GemmKernel::portable, k::GemmKernel::avx2, k::GemmKernel::avx512}) {
      const PrecisionGuard use(precision);
      const k::GemmKernel was = k::set_gemm_kernel(kern);
      CAPTURE(static_cast<int>(precision));
      CAPTURE(std::string(k::gemm_kernel_name(k::gemm_kernel())));
      for (const int64_t HS : {12, 40, 64})
        for (const int64_t Tk : {1, 7, 8, 13, 70, 200})
          for (const int64_t KVH : {2, 6})
            for (const int64_t window : {0, 5}) {
              CAPTURE(HS);
              CAPTURE(Tk);
              CAPTURE(KVH);
              CAPTURE(window);
              const int64_t NH = 6, row = KVH * HS, cap = Tk + 3;
              const auto q = randn({NH * HS}, g).to_vector<float>();
              const auto kf = randn({Tk * row}, g).to_vector<float>();
              const auto vf = randn({Tk * row}, g).to_vector<float>();
              std::vector<float> kc(static_cast<size_t>(row * cap), NAN);
              for (int64_t t = 0; t < Tk; ++t)
                for (int64_t j = 0; j < row; ++j)
                  kc[static_cast<size_t>(j * cap + t)] = kf[static_cast<size_t>(t * row + j)];
              std::vector<float> want(static_cast<size_t>(NH * HS)), got(want.size(), -1.0f);
              k::attention_one_query_f32(q.data(), NH, HS, kf.data(), vf.data(), KVH, Tk, HS, row,
                                         0.125, window, want.data());
              k::attention_one_query(
                  q.data(), NH, HS, KVH, Tk,
                  k::OneQueryKV<float>{kc.data(), vf.data(), HS * cap, 1, cap, HS, row}, 0.125,
                  window, got.data());
              CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
              if (precision == k::GemmPrecision::f32) continue;
              std::vector<uint16_t> kb(kc.size()), vb(vf.size());
              k::to_bf16_bits(kc.data(), kb.data(), static_cast<int64_t>(kc.size()));
              k::to_bf16_bits(vf.data(), vb.data(), static_cast<int64_t>(vf.size()));
              std::fill(got.begin(), got.end(), -1.0f);
              k::attention_one_query(
                  q.data(), NH, HS, KVH, Tk,
                  k::OneQueryKV<uint16_t>{kb.data(), vb.data(), HS * cap, 1, cap, HS, row}, 0.125,
                  window, got.data());
              CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
            }
      k::set_gemm_kernel(was);
    }
  std::vector<float> x(64);
  std::vector<uint16_t> b(64);
  // Under f32 products the bits are not what the products would read: refused.
  CHECK_THROWS_WITH_AS(
      k::attention_one_query(x.data(), 2, 16, 2, 1,
                             k::OneQueryKV<uint16_t>{b.data(), b.data(), 16, 32, 1, 16, 32}, 1.0, 0,
                             x.data()),
      doctest::Contains("bf16 keys and values under f32 products"), Error);
  // Keys as columns closer than the keys they hold, or neither rows nor columns: refused.
  CHECK_THROWS_WITH_AS(
      k::attention_one_query(x.data(), 2, 4, 2, 4,
                             k::OneQueryKV<float>{x.data(), x.data() + 32, 12, 1, 3, 4, 8}, 1.0, 0,
                             x.data()),
      doctest::Contains("elements 3 apart overlap"), Error);
  CHECK_THROWS_WITH_AS(
      k::attention_one_query(x.data(), 2, 4, 2, 4,
                             k::OneQueryKV<float>{x.data(), x.data() + 32, 4, 8, 2, 4, 8}, 1.0, 0,
                             x.data()),
      doctest::Contains("neither rows nor columns"), Error);
}
