// The counter-based generator: Philox 4x32-10 known answers, reproducibility, and
// independence from the thread count.
#include <omp.h>

#include "tensor/random.h"
#include "test_util.h"

using namespace attend;

TEST_CASE("philox4x32-10 matches Random123's known-answer vectors") {
  // From Random123's kat_vectors (counter, key -> output).
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("numbers are a function of (seed, offset)") {
  Generator a(42), b(42);
  Tensor x = randn({1000}, a);
  Tensor y = randn({1000}, b);
  CHECK(test::bit_identical(x, y));
  CHECK(a.offset() == 1000);

  // Continuing from a saved state gives what an uninterrupted generator gives.
  Generator c(7);
  randn({10}, c);
  GeneratorState saved = c.state();
  Tensor next = randn({5}, c);
  Generator d(0);
  d.set_state(saved);
  CHECK(test::bit_identical(randn({5}, d), next));

  // A different seed gives different numbers.
  Generator e(43);
  CHECK(!test::bit_identical(randn({1000}, e), x));
}

TEST_CASE("numbers do not depend on the thread count") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Generator g1(3);
  Tensor one = randn({200000}, g1, DType::F64);
  omp_set_num_threads(2);
  Generator g2(3);
  Tensor two = randn({200000}, g2, DType::F64);
  omp_set_num_threads(saved);
  CHECK(test::bit_identical(one, two));
}

TEST_CASE("normal and uniform have the requested moments") {
  Generator g(1);
  const int64_t n = 200000;
  std::vector<double> v = normal({n}, 3.0, 2.0, g, DType::F64).to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= n;
  for (double x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / n);
  // Standard errors: 2/sqrt(n) = 0.0045 for the mean, ~0.0032 for the std; 5 sigma.
  CHECK(std::abs(m - 3.0) < 0.023);
  CHECK(std::abs(s - 2.0) < 0.016);

  std::vector<float> u = uniform({n}, -1.0, 1.0, g).to_vector<float>();
  double um = 0;
  for (float x : u) {
    CHECK_MESSAGE((x >= -1.0f && x < 1.0f), "uniform value out of range: ", x);
    um += x;
  }
  CHECK(std::abs(um / n) < 5 * std::sqrt(1.0 / 3.0 / n));

  std::vector<int64_t> ids = randint({n}, 0, 10, g).to_vector<int64_t>();
  std::vector<int64_t> counts(10, 0);
  for (int64_t id : ids) {
    REQUIRE((id >= 0 && id < 10));
    ++counts[id];
  }
  for (int64_t c : counts) CHECK(std::abs(c - n / 10) < 5 * std::sqrt(n * 0.1 * 0.9));
}

TEST_CASE("philox4x32_x8 gives the same blocks as eight calls of philox4x32") {
  attend::Generator g(77);
  for (int trial = 0; trial < 200; ++trial) {
    attend::PhiloxCounter in[8], out[8];
    for (int l = 0; l < 8; ++l) in[l] = g.block(static_cast<uint64_t>(trial * 8 + l));
    const attend::PhiloxKey key = {in[0][0] ^ in[1][1], in[2][2] ^ in[3][3]};
    attend::philox4x32_x8(in, out, key);
    for (int l = 0; l < 8; ++l) CHECK(out[l] == attend::philox4x32(in[l], key));
  }
}

TEST_CASE("rand: uniform with 0 <= u < 1 in f32 and f64, a function of (seed, offset), mean near 1/2") {
  Generator a(7), b(7);
  const Tensor x = rand({4096}, a), y = rand({4096}, b);
  CHECK(test::bit_identical(x, y));
  const std::vector<double> v = rand({4096}, a, DType::F64).to_vector<double>();
  double sum = 0;
  for (const double u : v) {
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
  }
  // The mean of 4096 uniforms has standard deviation 1/sqrt(12 * 4096) = 0.0045: 5 of them.
  CHECK(std::abs(sum / 4096 - 0.5) < 0.0225);
  for (const float u : x.to_vector<float>()) CHECK((u >= 0.0f && u < 1.0f));
}
