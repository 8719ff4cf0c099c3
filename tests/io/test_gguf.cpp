// GGUF's container (io/gguf.h): written and read back, Q8_0 blocks (tensor/quant.h) against
// a hand-worked block and a NumPy twin of llama.cpp's reference quantizer, crafted hostile
// files, and a seeded mutation fuzzer.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "fuzz.h"
#include "io/gguf.h"
#include "tensor/half.h"
#include "tensor/quant.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

using namespace attend;
namespace fs = std::filesystem;
using io::GgmlType;
using io::GgufValue;

namespace {

io::GgufMetadata some_metadata() {
  return {{"general.architecture", GgufValue::of_string("llama")},
          {"llama.block_count", GgufValue::of_u32(2)},
          {"x.one", GgufValue::of_u32(1)},
          {"x.two", GgufValue::of_u32(2)},
          {"llama.rope.freq_base", GgufValue::of_f32(10000.0f)},
          {"tokenizer.ggml.tokens", GgufValue::of_strings({"a", "b", "\xc4\xa0"})},
          {"tokenizer.ggml.token_type", GgufValue::of_i32s({1, 1, 3})},
          {"tokenizer.ggml.add_bos_token", GgufValue::of_bool(false)}};
}

// A valid file with one tensor of each type.
fs::path good_file(const fs::path& dir) {
  Generator gen(5);
  const fs::path p = dir / "good.gguf";
  io::write_gguf(p, some_metadata(),
                 {{"a.weight", randn({3, 64}, gen), GgmlType::f32},
                  {"b.weight", randn({2, 32}, gen), GgmlType::q8_0},
                  {"c", randn({5}, gen), GgmlType::f16},
                  {"d", randn({2, 3, 4}, gen), GgmlType::bf16}});
  return p;
}

std::string refusal(const fs::path& p) {
  try {
    io::GgufFile f(p);
    for (const auto& [name, _] : f.tensors()) (void)f.read(name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The bytes of a file with one field changed at `at`.
template <class T>
std::string patched(std::string bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
  return bytes;
}

// Byte offset of a string's first occurrence (a key or a tensor name) in the file.
size_t find(const std::string& bytes, const std::string& what) {
  const size_t at = bytes.find(what);
  REQUIRE(at != std::string::npos);
  return at;
}

}  // namespace

TEST_CASE("gguf: metadata and tensors of every type read back as written") {
  const fs::path dir = test::temp_dir("gguf_rt");
  Generator gen(5);
  const Tensor a = randn({3, 64}, gen), b = randn({2, 32}, gen), c = randn({5}, gen),
               d = randn({2, 3, 4}, gen);
  io::write_gguf(dir / "m.gguf", some_metadata(),
                 {{"a.weight", a, GgmlType::f32},
                  {"b.weight", b, GgmlType::q8_0},
                  {"c", c, GgmlType::f16},
                  {"d", d, GgmlType::bf16}});
  const io::GgufFile f(dir / "m.gguf");
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_uint("llama.block_count") == 2);
  CHECK(f.get_float("llama.rope.freq_base") == 10000.0);
  CHECK(f.get_array("tokenizer.ggml.tokens", io::GgufType::string).strings[2] == "\xc4\xa0");
  CHECK(f.get_array("tokenizer.ggml.token_type", io::GgufType::i32).numbers[2] == 3);
  CHECK(f.find("tokenizer.ggml.add_bos_token")->u == 0);
  // ggml's dimension order is attend's reversed.
  CHECK(f.tensors().at("a.weight").ne == std::vector<int64_t>{64, 3});
  CHECK(f.tensors().at("d").ne == std::vector<int64_t>{4, 3, 2});
  CHECK(test::bit_identical(f.read("a.weight"), a));
  // F16 and BF16: the value rounded to nearest even; Q8_0: its blocks dequantized.
  const Tensor c16 = f.read("c"), d16 = f.read("d"), bq = f.read("b.weight");
  for (int64_t i = 0; i < 5; ++i)
    CHECK(c16.data<float>()[i] == half_to_float(float_to_half(c.data<float>()[i])));
  for (int64_t i = 0; i < 24; ++i)
    CHECK(d16.data<float>()[i] == bf16_to_float(float_to_bf16(d.data<float>()[i])));
  std::vector<uint8_t> blocks(2 * quant::kQ8BlockBytes);
  std::vector<float> want(64);
  quant::quantize_q8_0(b.data<float>(), 64, blocks.data());
  quant::dequantize_q8_0(blocks.data(), 64, want.data());
  for (int64_t i = 0; i < 64; ++i) CHECK(bq.data<float>()[i] == want[static_cast<size_t>(i)]);
  // Every tensor's data starts on the 32-byte alignment.
  for (const auto& [name, info] : f.tensors()) CHECK(info.offset % 32 == 0);
  fs::remove_all(dir);
}

TEST_CASE("q8_0: a block quantizes as llama.cpp's reference does, by hand") {
  // x_j = (j - 16) / 4: amax 4, d = 4/127, q_j = round((j - 16) * 127 / 16) half away from
  // zero, the scale stored as half(d).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 4.0f;
  uint8_t out[34];
  quant::quantize_q8_0(x, 32, out);
  uint16_t h;
  std::memcpy(&h, out, 2);
  CHECK(h == float_to_half(4.0f / 127.0f));
  const float id = 1.0f / (4.0f / 127.0f);
  for (int j = 0; j < 32; ++j)
    CHECK(static_cast<int8_t>(out[2 + j]) == static_cast<int>(std::round(x[j] * id)));
  CHECK(static_cast<int8_t>(out[2]) == -127);     // x = -4: the block's extreme
  CHECK(static_cast<int8_t>(out[2 + 18]) == 16);  // x = 0.5: 15.875 rounds to 16
  // An all-zero block: scale 0, every q 0 (no division by zero).
  float z[32] = {};
  quant::quantize_q8_0(z, 32, out);
  for (int k = 0; k < 34; ++k) CHECK(out[k] == 0);
}

TEST_CASE("q8_0: blocks byte-equal to a NumPy twin of llama.cpp's quantize_row_q8_0_ref") {
  if (std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0)
    ATTEND_SKIP("python3-numpy is missing (apt-get install python3-numpy)");
  const fs::path dir = test::temp_dir("q8_twin");
  Generator gen(11);
  // Scales spanning half's range, and values at exact .5 steps (the rounding's ties).
  Tensor x = randn({64, 128}, gen);
  float* p = x.data<float>();
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t j = 0; j < 128; ++j)
      p[r * 128 + j] *= std::ldexp(1.0f, static_cast<int>(r % 24) - 12);
  // A block whose scale is exactly 1 (amax 127), so x * id is x: halves are the ties.
  p[0] = 127.0f;
  for (int64_t j = 1; j < 32; ++j) p[j] = static_cast<float>(j) - 15.5f;
  io::write_gguf(dir / "q.gguf", {}, {{"x", x, GgmlType::q8_0}, {"src", x, GgmlType::f32}});
  const int code = std::system(("/usr/bin/python3 " + std::string(ATTEND_SOURCE_DIR) +
                                "/tests/io/q8_0_reference.py " + (dir / "q.gguf").string() + " > " +
                                (dir / "out.txt").string() + " 2>&1")
                                   .c_str());
  const std::string out = read_file(dir / "out.txt");
  INFO(out);
  CHECK(code == 0);
  CHECK(out.find("blocks equal: 256 of 256") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("gguf: crafted files are refused naming the field and value") {
  const fs::path dir = test::temp_dir("gguf_bad");
  const std::string good = read_file(good_file(dir));
  const fs::path bad = dir / "bad.gguf";
  auto refuse = [&](const std::string& bytes, const std::string& says) {
    write_file_atomic(bad, bytes);
    const std::string why = refusal(bad);
    INFO(says, " <- ", why);
    CHECK(why.find(bad.string()) != std::string::npos);
    CHECK(why.find(says) != std::string::npos);
  };
  refuse("GGML" + good.substr(4), "not a GGUF file");
  refuse(good.substr(0, 20), "not a GGUF file");
  refuse(patched(good, 4, uint32_t{1}), "GGUF version 1");
  refuse(patched(good, 8, uint64_t{1} << 40), "tensor_count is 1099511627776");
  refuse(patched(good, 16, ~uint64_t{0}), "kv_count is 18446744073709551615");
  // The first key's length past the file's end.
  refuse(patched(good, 24, uint64_t{1} << 50), "needs 1125899906842624 bytes");
  // An array with more elements than bytes remain.
  const size_t tok = find(good, "tokenizer.ggml.tokens") + 21;
  refuse(patched(good, tok + 8, uint64_t{1} << 60), "element count is 1152921504606846976");
  refuse(patched(good, tok + 4, uint32_t{9}), "an array of arrays");
  refuse(patched(good, tok, uint32_t{13}), "value type 13");
  // A key given twice (x.two renamed x.one).
  std::string twice = good;
  std::memcpy(twice.data() + find(twice, "x.two"), "x.one", 5);
  refuse(twice, "key 'x.one' appears twice");
  // Tensor infos: name, n_dims, ne..., type, offset.
  const size_t a = find(good, "a.weight") + 8;
  refuse(patched(good, a, uint32_t{5}), "n_dims 5");
  refuse(patched(good, a + 4, uint64_t{0}), "ne[0] = 0");
  refuse(patched(patched(good, a + 4, uint64_t{1} << 39), a + 12, uint64_t{1} << 39), "below 2^40");
  refuse(patched(good, a + 20, uint32_t{12}), "is q4_K");
  refuse(patched(good, a + 24, uint64_t{8}), "not a multiple of the alignment 32");
  refuse(patched(good, a + 24, uint64_t{1} << 40), "runs past the data section");
  const size_t b = find(good, "b.weight") + 8;
  refuse(patched(good, b + 24, uint64_t{0}), "overlap");
  refuse(patched(good, b + 4, uint64_t{33}), "not a multiple of 32");
  std::string dup = good;
  dup[find(dup, "b.weight")] = 'a';
  refuse(dup, "appears twice");
  fs::remove_all(dir);
}

TEST_CASE("gguf: a key of the wrong type is refused naming the key and both types") {
  const fs::path dir = test::temp_dir("gguf_types");
  const io::GgufFile f(good_file(dir));
  CHECK_THROWS_WITH_AS(f.get_uint("general.architecture"),
                       doctest::Contains("general.architecture is a string; expected an integer"),
                       Error);
  CHECK_THROWS_WITH_AS(f.get_array("tokenizer.ggml.tokens", io::GgufType::i32),
                       doctest::Contains("is a array of string; expected an array of i32"), Error);
  CHECK_THROWS_WITH_AS(f.get_string("nope"), doctest::Contains("no key 'nope'"), Error);
  CHECK(f.get_uint("nope", 7) == 7);
  fs::remove_all(dir);
}

TEST_CASE("gguf: values a format cannot hold are refused naming the tensor") {
  const fs::path dir = test::temp_dir("gguf_w");
  Tensor t = zeros({2, 32});
  t.data<float>()[3] = 70000.0f;
  CHECK_THROWS_WITH_AS(io::write_gguf(dir / "x.gguf", {}, {{"big", t, GgmlType::f16}}),
                       doctest::Contains("big holds 70000 at element 3; f16 stores finite values"),
                       Error);
  t.data<float>()[3] = NAN;
  CHECK_THROWS_WITH_AS(io::write_gguf(dir / "x.gguf", {}, {{"nan", t, GgmlType::q8_0}}),
                       doctest::Contains("nan holds nan at element 3"), Error);
  CHECK_THROWS_WITH_AS(
      io::write_gguf(dir / "x.gguf", {}, {{"odd", zeros({2, 24}), GgmlType::q8_0}}),
      doctest::Contains("odd is q8_0 with ne[0] = 24"), Error);
  CHECK(!fs::exists(dir / "x.gguf"));
  fs::remove_all(dir);
}

TEST_CASE("fuzz: GGUF files are refused cleanly or read in full") {
  const fs::path dir = test::temp_dir("fuzz_gguf");
  const std::string good = read_file(good_file(dir));
  test::fuzz_file(
      "gguf", good, dir / "t.gguf", 7, test::fuzz_cases(2000),
      [](const fs::path& p) {
        io::GgufFile f(p);
        for (const auto& [name, _] : f.tensors()) (void)f.read(name);
      },
      [](const fs::path& p) -> std::string {
        io::GgufFile f(p);
        for (const auto& [name, info] : f.tensors()) {
          int64_t n = 1;
          for (const int64_t d : info.ne) n *= d;
          if (f.read(name).numel() != n) return "tensor " + name + " read with another size";
        }
        return "";
      });
  fs::remove_all(dir);
}
