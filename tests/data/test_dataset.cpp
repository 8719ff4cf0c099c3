// Token files, batches and `prepare`: formats, purity of batches, bad input.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "data/prepare.h"
#include "test_util.h"

using namespace attend;
using namespace attend::data;
using attend::test::check_error;
using attend::test::temp_dir;
namespace fs = std::filesystem;

namespace {

TokenIds iota_tokens(int n, int vocab) {
  TokenIds t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 7) % vocab));
  return t;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void put_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace

TEST_CASE("token files: 2-byte tokens when the vocabulary fits, 4 otherwise") {
  fs::path dir = temp_dir("tokfile");
  for (int vocab : {65, 65536, 70000}) {
    TokenIds t = iota_tokens(1000, vocab);
    write_token_file(dir / "t.bin", t, vocab);
    TokenFile f(dir / "t.bin");
    CHECK(f.width() == (vocab <= 65536 ? 2 : 4));
    CHECK(f.size() == 1000);
    CHECK(f.vocab_size() == vocab);
    CHECK(fs::file_size(dir / "t.bin") == 40 + 1000 * static_cast<size_t>(f.width()));
    for (int i = 0; i < 1000; ++i) REQUIRE(f[i] == t[i]);
  }
  fs::remove_all(dir);
}

TEST_CASE("bad token files are refused naming the file and the problem") {
  fs::path dir = temp_dir("badtok");
  const fs::path p = dir / "t.bin";
  write_token_file(p, iota_tokens(100, 50), 50);
  const std::string good = bytes_of(p);

  put_bytes(p, "NOTATOKENFILE" + good.substr(13));
  check_error([&] { TokenFile f(p); }, "t.bin: not an attend token file (wrong magic");
  std::string v = good;
  v[8] = 9;
  put_bytes(p, v);
  check_error([&] { TokenFile f(p); }, "t.bin: unsupported token file version 9");
  put_bytes(p, good.substr(0, good.size() - 3));
  check_error([&] { TokenFile f(p); },
              "t.bin: truncated or padded: the header says 100 tokens of 2 bytes (240 bytes in "
              "all), the file has 237 bytes");
  std::string big = good;
  big[40 + 2 * 17] = 60;  // token 17 := 60 >= 50
  put_bytes(p, big);
  check_error([&] { TokenFile f(p); },
              "t.bin: token 60 at position 17 is out of range for vocab_size 50");
  put_bytes(p, "short");
  check_error([&] { TokenFile f(p); }, "too short for a token file");
  check_error([&] { TokenFile f(dir / "missing.bin"); }, "missing.bin: cannot open");
  // Regression (adversarial H3): count * width overflows to the real size; it read past
  // the mapping (SIGBUS). 16 tokens of 4 bytes plus a count of 2^62 + 16.
  {
    write_token_file(p, iota_tokens(16, 70000), 70000);
    std::string w = bytes_of(p);
    REQUIRE(w.size() == 40 + 64);
    const uint64_t count = (uint64_t{1} << 62) + 16;
    std::memcpy(w.data() + 16, &count, 8);
    put_bytes(p, w);
    check_error([&] { TokenFile f(p); },
                "t.bin: truncated or padded: the header says 4611686018427387920 tokens");
  }
  // A version-1 file (32-byte header, no tokenizer hash) is still read.
  {
    std::string v1 = good.substr(0, 32) + good.substr(40);
    const uint32_t one = 1;
    std::memcpy(v1.data() + 8, &one, 4);
    put_bytes(p, v1);
    TokenFile f(p);
    CHECK(f.size() == 100);
    CHECK(f.tokenizer_hash() == 0);
    CHECK(f[17] == good[40 + 2 * 17]);
  }
  write_token_file(p, iota_tokens(10, 50), 50);
  check_error([&] { TokenDataset d(p, 10); },
              "t.bin: 10 tokens is too short for block_size 10 (need at least 11)");
  fs::remove_all(dir);
}

TEST_CASE("batches are a pure function of (seed, step, micro-step) - y is x shifted by one") {
  fs::path dir = temp_dir("batches");
  write_token_file(dir / "t.bin", iota_tokens(5000, 97), 97);
  TokenDataset a(dir / "t.bin", 16), b(dir / "t.bin", 16);
  Batch b1 = a.random_batch(7, 42, 0, 8), b2 = b.random_batch(7, 42, 0, 8);
  CHECK(test::bit_identical(b1.x, b2.x));
  CHECK(test::bit_identical(b1.y, b2.y));
  CHECK(!test::bit_identical(b1.x, a.random_batch(7, 43, 0, 8).x));
  CHECK(!test::bit_identical(b1.x, a.random_batch(7, 42, 1, 8).x));
  CHECK(!test::bit_identical(b1.x, a.random_batch(8, 42, 0, 8).x));
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t t = 0; t + 1 < 16; ++t) REQUIRE(b1.y.at({r, t}) == b1.x.at({r, t + 1}));
  // Consecutive tokens of the file: x[r][t+1] follows x[r][t] in the (i*7 mod 97) sequence.
  CHECK(static_cast<int64_t>(b1.x.at({0, 1})) == (static_cast<int64_t>(b1.x.at({0, 0})) + 7) % 97);
  fs::remove_all(dir);
}

TEST_CASE("sequential windows cover every target once") {
  fs::path dir = temp_dir("windows");
  TokenIds t = iota_tokens(101, 1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
  write_token_file(dir / "t.bin", t, 1000);
  TokenDataset d(dir / "t.bin", 10);
  CHECK(d.num_windows() == 10);  // (101 - 1) / 10
  Batch w = d.windows(0, 10);
  CHECK(w.x.at({3, 0}) == 30);
  CHECK(w.y.at({9, 9}) == 100);
  check_error([&] { d.windows(5, 6); },
              "dataset: windows [5, 11) out of range; the file has 10 windows of 10");
  fs::remove_all(dir);
}

TEST_CASE("prepare: a folder of text files, sorted, binaries skipped, 90/10 split") {
  fs::path dir = temp_dir("prepare");
  fs::create_directories(dir / "corpus" / "sub");
  std::ofstream(dir / "corpus" / "b.txt") << "bbbb\n";
  std::ofstream(dir / "corpus" / "a.txt") << "aaaa\n";
  std::ofstream(dir / "corpus" / "sub" / "c") << "cccccccccc\n";
  std::ofstream(dir / "corpus" / "index.dat", std::ios::binary) << std::string("\x00\x01\x02", 3);
  std::ofstream(dir / "corpus" / ".hidden") << "zzzz\n";
  Corpus c = read_corpus(dir / "corpus");
  CHECK(c.text == "aaaa\nbbbb\ncccccccccc\n");
  CHECK(c.skipped.size() == 1);

  PrepareOptions o;
  o.data = dir / "corpus";
  o.out = dir / "out";
  PrepareResult r = prepare(o);
  CHECK(r.vocab_size == 4);  // \n a b c
  CHECK(r.train_tokens + r.val_tokens == 21);
  CHECK(r.val_tokens == 2);  // floor(21 * 0.1)
  CHECK(TokenFile(dir / "out" / "train.bin").size() == 19);
  auto tok = load_tokenizer(dir / "out");
  CHECK(tok->decode({1, 2, 3, 0}) == "abc\n");

  check_error([&] { read_corpus(dir / "nothing"); }, "nothing: no such file or folder");
  std::ofstream(dir / "empty.txt") << "";
  check_error([&] { read_corpus(dir / "empty.txt"); }, "empty.txt: the corpus is empty");
  fs::remove_all(dir);
}
