// Every user error names the op, what was expected and what was got.
#include <limits>

#include "tensor/kernels.h"
#include "tensor/random.h"
#include "tensor/util.h"
#include "test_util.h"

using namespace attend;
using attend::test::check_error;
namespace k = attend::kernel;

TEST_CASE("shape and dim errors") {
  check_error(
      [] {
        k::matmul(zeros({2, 3}), zeros({4, 5}));
      },
      "matmul: expected a.shape[-1] == b.shape[-2], got (2,3) @ (4,5)");
  check_error(
      [] {
        k::matmul(zeros({3}), zeros({3, 4}));
      },
      "matmul: expected tensors with at least 2 dims, got (3,) @ (3,4)");
  check_error(
      [] {
        k::matmul(zeros({2, 2}), zeros({2, 2}, DType::F64));
      },
      "matmul: expected operands of one dtype, got f32 @ f64");
  check_error(
      [] {
        k::binary(k::Binary::Add, zeros({2, 3}), zeros({4}));
      },
      "add: shapes (2,3) and (4,) cannot be broadcast together");
  check_error(
      [] {
        k::view(zeros({2, 3}), {4, 2});
      },
      "view: shape (4,2) is invalid for a tensor of 6 elements");
  check_error(
      [] {
        k::view(k::transpose(zeros({2, 3}), 0, 1), {6});
      },
      "view: cannot view a tensor of shape (3,2)");
  check_error([] { k::reshape(zeros({6}), {-1, -1}); }, "reshape: only one dim can be -1");
  check_error(
      [] {
        k::transpose(zeros({2, 3}), 0, 2);
      },
      "transpose: dim 2 is out of range for a tensor with 2 dims");
  check_error([] { k::permute(zeros({2, 3}), {0, 0}); }, "permute: dim 0 appears twice");
  check_error([] { k::narrow(zeros({5}), 0, 3, 4); },
              "narrow: range [3, 7) is out of bounds for dim 0 of size 5");
  check_error(
      [] {
        k::expand(zeros({2, 3}), {4, 3});
      },
      "expand: cannot expand shape (2,3) to (4,3)");
  check_error([] { k::squeeze(zeros({2, 3}), 1); }, "squeeze: dim 1 has size 3, expected 1");
  check_error([] { k::sum(zeros({2, 3}), {0, -2}, false); }, "sum: dim -2 appears twice");
  check_error(
      [] {
        k::cat({zeros({2, 3}), zeros({2, 4})}, 0);
      },
      "cat: tensor 1 has shape (2,4), expected (2,3) in every dim but 0");
  check_error(
      [] {
        tensor({1, 2, 3}, {2, 2});
      },
      "tensor: shape (2,2) holds 4 elements, got 3 values");
  check_error([] { zeros({2, 2}).at({2, 0}); }, "at: index 2 is out of range for dim 0 of size 2");
  check_error(
      [] {
        zeros({2, 2}).item();
      },
      "item: expected a tensor with one element, got shape (2,2)");
}

TEST_CASE("dtype errors") {
  check_error([] { k::unary(k::Unary::Exp, zeros({2}, DType::I64)); },
              "exp: expected a floating dtype (f32 or f64), got i64");
  check_error([] { k::binary(k::Binary::Mul, zeros({2}), zeros({2}, DType::F64)); },
              "mul: expected operands of one dtype, got f32 and f64");
  check_error(
      [] {
        Tensor t = zeros({2}, DType::I32);
        t.requires_grad_();
      },
      "requires_grad_: only floating tensors can require grad, got i32");
  check_error([] { zeros({2}).data<double>(); }, "data: tensor has dtype f32, asked for f64");
  check_error([] { k::masked_fill(zeros({2}), zeros({2}), 1.0); },
              "masked_fill: expected a bool mask, got f32");
}

TEST_CASE("nn kernel errors name the offending value and position") {
  check_error(
      [] {
        k::cross_entropy(zeros({3, 5}), tensor({0, 5, 1}, {3}, DType::I64), -100);
      },
      "cross_entropy: target 5 at position 1 is out of range for 5 classes");
  check_error(
      [] {
        k::cross_entropy(zeros({3, 5}), zeros({3}), -100);
      },
      "cross_entropy: expected integer targets, got f32");
  check_error(
      [] {
        k::embedding(zeros({4, 2}), tensor({1, 4}, {2}, DType::I64));
      },
      "embedding: id 4 at position 1 is out of range for a table of 4 rows");
  check_error(
      [] {
        k::layer_norm(zeros({2, 4}), zeros({3}), zeros({4}), 1e-5);
      },
      "layer_norm: expected weight of shape (4,) for input (2,4), got (3,)");
  check_error([] { k::softmax(scalar_tensor(1)); },
              "softmax: expected at least 1 dim, got a 0-dim tensor");
  check_error([] { k::max(zeros({2, 0}), {1}, false); }, "max: cannot reduce over an empty dim");
}

TEST_CASE("generator argument errors") {
  Generator g(0);
  check_error([&] { uniform({2}, 1.0, 0.0, g); }, "uniform_: expected low <= high, got 1 > 0");
  check_error([&] { normal({2}, 0.0, -1.0, g); }, "normal_: expected std >= 0, got -1");
  check_error([&] { randint({2}, 5, 5, g); }, "randint: expected low < high, got [5, 5)");
}

TEST_CASE("fnv1a64 is FNV-1a 64 (the published test vectors)") {
  // From the FNV reference (Fowler, Noll, Vo): "" -> offset basis, "a", "foobar".
  CHECK(attend::fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(attend::fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(attend::fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
  // Feeding in pieces equals feeding at once.
  CHECK(attend::fnv1a64("bar", 3, attend::fnv1a64("foo", 3)) == 0x85944171f73967e8ull);
}

namespace {
// Bytes (7 i + 3) mod 256, the pattern the vectors below were computed on.
std::vector<unsigned char> pattern_bytes(size_t n) {
  std::vector<unsigned char> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((7 * i + 3) % 256);
  return b;
}
}  // namespace

TEST_CASE("all_finite finds a NaN or infinity anywhere, in f32 and f64") {
  auto check = [&]<typename T>() {
    for (int64_t n = 0; n <= 40; ++n) {
      std::vector<T> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)  // finite extremes: largest, smallest subnormal, -0
        v[static_cast<size_t>(i)] = i % 3 == 0   ? std::numeric_limits<T>::max()
                                    : i % 3 == 1 ? -std::numeric_limits<T>::denorm_min()
                                                 : T(-0.0);
      CHECK(attend::all_finite(v.data(), n));
      for (int64_t at = 0; at < n; ++at)
        for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                            -std::numeric_limits<T>::infinity()}) {
          std::vector<T> w = v;
          w[static_cast<size_t>(at)] = bad;
          CAPTURE(n);
          CAPTURE(at);
          CHECK_FALSE(attend::all_finite(w.data(), n));
        }
    }
  };
  check.operator()<float>();
  check.operator()<double>();
}

TEST_CASE("xxh64 is XXH64: xxhsum's values, and the same in pieces as whole") {
  // Computed with xxhsum 0.8.1 (Debian's xxhash package, `xxhsum -H1`), an implementation
  // independent of ours: "", "a", and 100 and 1000 bytes of the pattern (every tail path:
  // whole stripes, 8-, 4- and 1-byte tails).
  CHECK(attend::xxh64("", 0) == 0xef46db3751d8e999ull);
  CHECK(attend::xxh64("a", 1) == 0xd24ec4f1a98c6e5bull);
  CHECK(attend::xxh64(pattern_bytes(100).data(), 100) == 0xa61f8d4c170fe531ull);
  CHECK(attend::xxh64(pattern_bytes(1000).data(), 1000) == 0x5f235fa033f1a3fbull);
  // Any split into pieces, held stripes included, gives the whole's value.
  const std::vector<unsigned char> b = pattern_bytes(300);
  for (size_t n : {0, 1, 31, 32, 33, 63, 64, 65, 100, 300})
    for (size_t cut1 = 0; cut1 <= n; cut1 += 7)
      for (size_t cut2 = cut1; cut2 <= n; cut2 += 13) {
        attend::Xxh64 h;
        h.add(b.data(), cut1);
        h.add(b.data() + cut1, cut2 - cut1);
        h.add(b.data() + cut2, n - cut2);
        REQUIRE(h.digest() == attend::xxh64(b.data(), n));
      }
}

TEST_CASE("xxh64 agrees with xxhsum on every length to 300 and on 1 MB") {
  if (std::system("xxhsum -H1 /dev/null > /dev/null 2>&1") != 0)
    ATTEND_SKIP("xxhsum (Debian's xxhash package) is not installed: no second XXH64 to check against");
  const std::filesystem::path dir = attend::test::temp_dir("xxh64");
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  lengths.push_back(1 << 20);
  lengths.push_back((1 << 20) + 29);
  // One xxhsum run over every file; its lines are "<hash>  <file>" in the order given.
  std::string cmd = "cd '" + dir.string() + "' && xxhsum -H1";
  for (size_t n : lengths) {
    const std::vector<unsigned char> b = pattern_bytes(n);
    const std::string name = "b" + std::to_string(n);
    FILE* f = std::fopen((dir / name).c_str(), "wb");
    REQUIRE(f);
    REQUIRE((b.empty() || std::fwrite(b.data(), 1, b.size(), f) == b.size()));
    std::fclose(f);
    cmd += " " + name;
  }
  cmd += " > sums.txt";
  REQUIRE(std::system(cmd.c_str()) == 0);
  FILE* f = std::fopen((dir / "sums.txt").c_str(), "r");
  REQUIRE(f);
  char hex[64], name[64];
  size_t checked = 0;
  for (size_t n : lengths) {
    REQUIRE(std::fscanf(f, "%63s %63s", hex, name) == 2);
    CAPTURE(n);
    CHECK(std::string(name) == "b" + std::to_string(n));
    const std::vector<unsigned char> b = pattern_bytes(n);
    CHECK(std::strtoull(hex, nullptr, 16) == attend::xxh64(b.data(), n));
    ++checked;
  }
  std::fclose(f);
  CHECK(checked == lengths.size());
  std::filesystem::remove_all(dir);
}
