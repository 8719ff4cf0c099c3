// Tokenizer throughput on tinyshakespeare: encode MB/s for gpt2 and a bpe:4096 trained
// here (first pass with a cold word cache, then warm), the training time, and char.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "data/tokenizer.h"

using namespace attend;
namespace fs = std::filesystem;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  const fs::path shared = argc > 1 ? fs::path(argv[1]) : fs::path("../shared/data");
  const std::string text = data::read_file(shared / "tinyshakespeare.txt");
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("attend bench_tokenizer: tinyshakespeare, %.2f MB\n", mb);
  auto measure = [&](const char* name, const data::Tokenizer& tok) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = tok.encode(text).size();
    const double cold = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    tok.encode(text);
    const double warm = seconds_since(t0);
    std::printf("%-10s %8zu tokens  encode %7.1f MB/s cold cache, %7.1f MB/s warm\n", name, n,
                mb / cold, mb / warm);
  };
  auto t0 = std::chrono::steady_clock::now();
  auto gpt2 =
      data::load_bpe_files(shared / "gpt2" / "encoder.json", shared / "gpt2" / "vocab.bpe", "gpt2");
  std::printf("gpt2 load: %.2f s\n", seconds_since(t0));
  measure("gpt2", *gpt2);
  t0 = std::chrono::steady_clock::now();
  auto bpe = data::train_bpe_tokenizer(text, 4096);
  std::printf("bpe:4096 training: %.2f s\n", seconds_since(t0));
  measure("bpe:4096", *bpe);
  measure("char", *data::build_char_tokenizer(text));
  return 0;
}
