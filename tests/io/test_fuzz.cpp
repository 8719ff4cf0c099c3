// Fuzzing io's parsers (see tests/fuzz.h): safetensors files.
#include <cmath>
#include <filesystem>

#include "fuzz.h"
#include "io/safetensors.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

using namespace attend;
namespace fs = std::filesystem;

TEST_CASE("fuzz: safetensors files are refused cleanly or read in full") {
  const fs::path dir = test::temp_dir("fuzz_st");
  Generator gen(3);
  io::write_safetensors(dir / "good.safetensors",
                        {{"transformer.wte.weight", randn({7, 4}, gen)},
                         {"transformer.h.0.ln_1.bias", randn({4}, gen)},
                         {"x", randn({2, 3, 2}, gen)}},
                        {{"format", "pt"}});
  const std::string good = read_file(dir / "good.safetensors");
  test::fuzz_file(
      "safetensors", good, dir / "t.safetensors", 5, test::fuzz_cases(2000),
      [](const fs::path& p) {
        io::SafetensorsFile f(p);
        for (const auto& [name, _] : f.entries()) (void)f.read(name);
      },
      [](const fs::path& p) -> std::string {
        io::SafetensorsFile f(p);
        for (const auto& [name, e] : f.entries()) {
          int64_t n = 1;
          for (const int64_t d : e.shape) n *= d;
          if (f.read(name).numel() != n) return "tensor " + name + " read with another size";
        }
        return "";
      });
  fs::remove_all(dir);
}

TEST_CASE("float to half and bf16: every half and bf16 value round-trips, midpoints go to even") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = attend::io::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(attend::io::float_to_half(f) == h);
    const float b = attend::io::bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(b)) REQUIRE(attend::io::float_to_bf16(b) == h);
  }
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): to even, 1.
  CHECK(attend::io::float_to_half(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(attend::io::float_to_half(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(attend::io::float_to_half(65520.0f) == 0x7c00);  // past 65504: infinity
  CHECK(attend::io::float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(attend::io::float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
}
