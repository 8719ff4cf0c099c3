// Fuzzing io's parsers (see tests/fuzz.h): safetensors files.
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
