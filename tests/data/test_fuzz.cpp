// Fuzzing the data parsers (see tests/fuzz.h): token files and tokenizer files.
#include <filesystem>

#include "data/token_file.h"
#include "data/tokenizer.h"
#include "fuzz.h"

using namespace attend;
using namespace attend::data;
namespace fs = std::filesystem;

TEST_CASE("fuzz: token files are refused cleanly or read consistently") {
  const fs::path dir = test::temp_dir("fuzz_tok");
  TokenIds ids;
  for (int i = 0; i < 100; ++i) ids.push_back((i * 7) % 50);
  write_token_file(dir / "good.bin", ids, 50);
  const std::string good = read_file(dir / "good.bin");
  const auto n = test::fuzz_file(
      "token file", good, dir / "t.bin", 1, test::fuzz_cases(2000),
      [](const fs::path& p) { TokenFile f(p); },
      [](const fs::path& p) -> std::string {
        TokenFile f(p);
        const auto size = static_cast<int64_t>(fs::file_size(p));
        const int64_t header =
            f.tokenizer_hash() == 0 && size == 32 + f.size() * f.width() ? 32 : 40;
        if (size != header + f.size() * f.width()) return "size does not match the header";
        for (int64_t i = 0; i < f.size(); ++i)
          if (f[i] < 0 || f[i] >= f.vocab_size()) return str("token ", i, " out of range");
        return "";
      });
  CHECK(n.refused > 0);
  fs::remove_all(dir);
}

TEST_CASE("fuzz: tokenizer files are refused cleanly or round-trip text") {
  const fs::path dir = test::temp_dir("fuzz_bpe");
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  std::ofstream(dir / "c.txt") << corpus;
  tokenizer_from_arg("char:" + (dir / "c.txt").string())->save(dir / "char");
  auto bpe = train_bpe_tokenizer(corpus, 300);
  bpe->save(dir / "bpe");
  // Whatever loads must still turn text into ids and back, or refuse the text.
  auto round_trips = [](const fs::path& folder) -> std::string {
    auto tok = load_tokenizer(folder);
    for (const std::string text : {"the lazy dog", "fox 17\n"}) {
      TokenIds ids;
      try {
        ids = tok->encode(text);
      } catch (const Error&) {
        continue;  // a char tokenizer without these characters refuses them
      }
      for (int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) return str("id ", id, " out of range");
      if (tok->decode(ids) != text) return "decode(encode(text)) != text";
    }
    return "";
  };
  struct Target {
    const char* name;
    fs::path folder;
    const char* file;
  };
  uint64_t seed = 10;
  for (const Target& t : {Target{"char tokenizer.json", dir / "char", "tokenizer.json"},
                          Target{"bpe tokenizer.json", dir / "bpe", "tokenizer.json"},
                          Target{"bpe encoder.json", dir / "bpe", "encoder.json"},
                          Target{"bpe vocab.bpe", dir / "bpe", "vocab.bpe"}}) {
    const fs::path work = dir / "work";
    fs::remove_all(work);
    fs::copy(t.folder, work);
    const std::string good = read_file(t.folder / t.file);
    test::fuzz_file(
        t.name, good, work / t.file, seed++, test::fuzz_cases(300),
        [&](const fs::path&) { load_tokenizer(work); },
        [&](const fs::path&) { return round_trips(work); });
  }
  fs::remove_all(dir);
}
