// safetensors: round trip, f16/bf16 conversion, and every header declaration checked.
#include <cstring>
#include <fstream>

#include "test_util.h"
#include "io/safetensors.h"

using namespace attend;
using namespace attend::io;
namespace fs = std::filesystem;

namespace {
// A file from a header text and a data section.
void put(const fs::path& p, const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::ofstream(p, std::ios::binary) << out << header << data;
}
}  // namespace

TEST_CASE("safetensors: write then read is exact, and F16 and BF16 read as f32") {
  const fs::path dir = test::temp_dir("st");
  Tensor a = tensor({1.5, -2.25, 3e-7, 1e30, 0, 7}, {2, 3});
  io::write_safetensors(dir / "a.safetensors", {{"x.weight", a}, {"y", tensor({4}, {1})}});
  io::SafetensorsFile f(dir / "a.safetensors");
  CHECK(test::bit_identical(f.read("x.weight"), a));
  CHECK(f.entries().size() == 2);
  // Half: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, smallest subnormal 2^-24 = 0x0001.
  CHECK(io::half_to_float(0x3c00) == 1.0f);
  CHECK(io::half_to_float(0xc000) == -2.0f);
  CHECK(io::half_to_float(0x7bff) == 65504.0f);
  CHECK(io::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(io::half_to_float(0x0200) == std::ldexp(1.0f, -15));
  CHECK(std::isinf(io::half_to_float(0x7c00)));
  CHECK(io::bf16_to_float(0x3f80) == 1.0f);
  const uint16_t h[2] = {0x3c00, 0xc000};
  put(dir / "h.safetensors", R"({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})",
      std::string(reinterpret_cast<const char*>(h), 4));
  CHECK(io::SafetensorsFile(dir / "h.safetensors").read("t").to_vector<float>() ==
        std::vector<float>{1.0f, -2.0f});
  fs::remove_all(dir);
}

TEST_CASE("safetensors: declarations are checked before anything is read") {
  const fs::path dir = test::temp_dir("st_bad");
  const fs::path p = dir / "b.safetensors";
  const std::string data(16, '\0');
  auto refuse = [&](const std::string& header, const std::string& needle) {
    put(p, header, data);
    test::check_error([&] { io::SafetensorsFile f(p); }, needle);
  };
  refuse(R"({"t": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})",
         "tensor 't': shape (5,) of F32 needs 20 bytes, data_offsets give 16");
  refuse(R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
         "data_offsets [8, 24) outside the data's 16 bytes");
  refuse(R"({"t": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})",
         "dtype I64 is not supported");
  refuse(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
         R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
         "two tensors' data_offsets overlap");
  refuse(R"({"t": {"dtype": "F32", "shape": [2199023255552], "data_offsets": [0, 16]}})",
         "shape entries must be integers below 2^40");
  refuse(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 16]}})",
         "shape entries must be integers");
  refuse("not json", "the header is not valid JSON");
  std::ofstream(p, std::ios::binary) << std::string("\x00\x00\x00\x00\x00\x00\x01\x00", 8);
  test::check_error([&] { io::SafetensorsFile f(p); }, "header length 281474976710656 does not fit");
  fs::remove_all(dir);
}
