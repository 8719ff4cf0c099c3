// Tokenizers: GPT-2's ids against reference ids, round trips, BPE training, the char
// vocabulary, files and their errors.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>

#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "tensor/random.h"
#include "random_text.h"
#include "test_util.h"

using namespace attend;
using namespace attend::data;
using attend::test::check_error;
using attend::test::random_bytes;
using attend::test::random_unicode;
using attend::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// ../shared/data, or empty (tests then say they skip).
fs::path shared_data() {
  const fs::path text = test::shared_data("tinyshakespeare.txt");
  return text.empty() ? fs::path() : text.parent_path();
}

std::unique_ptr<Tokenizer> gpt2() {
  fs::path d = shared_data();
  if (d.empty()) return nullptr;
  return load_bpe_files(d / "gpt2" / "encoder.json", d / "gpt2" / "vocab.bpe", "gpt2");
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace

TEST_CASE("pretokenize follows GPT-2's pattern") {
  using V = std::vector<std::string_view>;
  CHECK(pretokenize("Hello world") == V{"Hello", " world"});
  CHECK(pretokenize("a   b") == V{"a", "  ", " b"});
  CHECK(pretokenize("\n\nHello") == V{"\n", "\n", "Hello"});
  CHECK(pretokenize("it's we'll") == V{"it", "'s", " we", "'ll"});
  CHECK(pretokenize("x  ") == V{"x", "  "});
  CHECK(pretokenize("abc123 45!?") == V{"abc", "123", " 45", "!?"});
  CHECK(pretokenize(" ") == V{" "});
  CHECK(pretokenize("") == V{});
  // An invalid byte is one "other" character: it joins a punctuation run.
  CHECK(pretokenize("a\xff!b") == V{"a", "\xff!", "b"});
}

TEST_CASE("GPT-2 ids equal the reference tokenizer's on tricky strings") {
  auto tok = gpt2();
  if (!tok) {
    ATTEND_SKIP("../shared/data/gpt2 not found");
  }
  // Reference ids made by tests/data/make_gpt2_reference.js (gpt-3-encoder 1.1.4).
  std::ifstream in(fs::path(ATTEND_TEST_DATA) / "gpt2_reference.json");
  REQUIRE(in.good());
  nlohmann::json ref = nlohmann::json::parse(in);
  REQUIRE(ref.size() >= 30);
  for (const auto& row : ref) {
    const std::string text = row["text"];
    TokenIds want = row["ids"].get<TokenIds>();
    CAPTURE(text);
    CHECK(tok->encode(text) == want);
    CHECK(tok->decode(want) == text);
  }
}

TEST_CASE("tinyshakespeare: 338,025 GPT-2 tokens and 65 characters") {
  fs::path d = shared_data();
  if (d.empty()) {
    ATTEND_SKIP("../shared/data not found");
  }
  const std::string text = read_file(d / "tinyshakespeare.txt");
  auto tok = gpt2();
  TokenIds ids = tok->encode(text);
  CHECK(ids.size() == 338025);
  CHECK(tok->decode(ids) == text);
  auto chars = build_char_tokenizer(text);
  CHECK(chars->vocab_size() == 65);
  CHECK(chars->decode(chars->encode(text)) == text);
}

TEST_CASE("round trips: random unicode for every kind, random bytes for byte-level kinds") {
  Generator g(1);
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += random_unicode(g, 50);
  auto bpe = train_bpe_tokenizer(corpus, 400);
  auto chars = build_char_tokenizer(corpus);
  auto g2 = gpt2();
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_unicode(g, 1 + i % 60);
    CHECK(bpe->decode(bpe->encode(s)) == s);
    CHECK(chars->decode(chars->encode(s)) == s);
    if (g2) CHECK(g2->decode(g2->encode(s)) == s);
    const std::string b = random_bytes(g, 1 + i % 60);
    CHECK(bpe->decode(bpe->encode(b)) == b);
    if (g2) CHECK(g2->decode(g2->encode(b)) == b);
  }
}

TEST_CASE("BPE training: a corpus whose merges are worked out by hand") {
  // Pieces: "ab", " ab" x2, " ba". Pair counts: (a,b) 3, (' ',a) 2, (' ',b) 1, (b,a) 1.
  // 1. (a,b) -> 256 "ab". Then (' ',256) 2, (' ',b) 1, (b,a) 1.
  // 2. (' ',256) -> 257 " ab". Then (' ',b) 1, (b,a) 1: a tie, the smaller first id wins.
  // 3. (' ',b) -> 258 " b". Then (258,a) 1.
  // 4. (258,a) -> 259 " ba". No pair is left, so training stops below the asked size.
  auto tok = train_bpe_tokenizer("ab ab ab ba", 300);
  const auto& m = tok->spec().merges;
  using P = std::pair<int32_t, int32_t>;
  CHECK(m == std::vector<P>{{'a', 'b'}, {' ', 256}, {' ', 'b'}, {258, 'a'}});
  CHECK(tok->vocab_size() == 260);
  CHECK(tok->spec().tokens[259] == " ba");
  CHECK(tok->encode("ab ab ba") == TokenIds{256, 257, 259});
}

TEST_CASE("BPE training is deterministic and fast on tinyshakespeare") {
  fs::path d = shared_data();
  std::string text = d.empty() ? std::string() : read_file(d / "tinyshakespeare.txt");
  if (text.empty()) {
    Generator g(3);
    for (int i = 0; i < 2000; ++i) text += random_unicode(g, 40);
  }
  auto a = train_bpe_tokenizer(text, 1024), b = train_bpe_tokenizer(text, 1024);
  CHECK(a->vocab_size() == 1024);
  CHECK(a->spec().merges == b->spec().merges);
  CHECK(a->spec().tokens == b->spec().tokens);
  CHECK(a->decode(a->encode(text)) == text);
}

TEST_CASE("tokenizers save and load in their file formats") {
  fs::path dir = temp_dir("tok");
  Generator g(4);
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += random_unicode(g, 40);
  for (auto& tok : {build_char_tokenizer(corpus), train_bpe_tokenizer(corpus, 300)}) {
    fs::path sub = dir / tok->spec().kind;
    tok->save(sub);
    auto back = load_tokenizer(sub);
    CHECK(back->spec().kind == tok->spec().kind);
    CHECK(back->spec().name == tok->spec().name);
    CHECK(back->spec().tokens == tok->spec().tokens);
    CHECK(back->spec().merges == tok->spec().merges);
    CHECK(back->encode(corpus) == tok->encode(corpus));
  }
  fs::remove_all(dir);
}

TEST_CASE("char tokenizer errors: unknown character with its position, invalid UTF-8 offset") {
  auto tok = build_char_tokenizer("abc\n");
  check_error([&] { tok->encode("ab\nz"); },
              "char tokenizer: character 'z' at position 3 (byte offset 3) is not in the "
              "vocabulary of 4 characters");
  check_error([&] { tok->encode("a\xc3"); }, "char tokenizer: invalid UTF-8 at byte offset 1");
  check_error([] { build_char_tokenizer("ok\xff"); },
              "the corpus is not valid UTF-8 at byte offset 2");
  check_error([] { build_char_tokenizer(""); }, "char tokenizer: the corpus is empty");
  check_error(
      [&] {
        tok->decode({0, 9});
      },
      "decode: id 9 at position 1 is out of range for a vocabulary of 4");
}

TEST_CASE("malformed tokenizer files are refused with the file and the reason") {
  fs::path dir = temp_dir("badtok");
  auto base = train_bpe_tokenizer("ab ab ab ba", 300);
  base->save(dir);
  const fs::path enc = dir / "encoder.json", bpe = dir / "vocab.bpe";
  const std::string good_bpe = read_file(bpe);

  write(enc, "{\"a\": 1,");
  check_error([&] { load_tokenizer(dir); }, "encoder.json: invalid JSON at byte");
  base->save(dir);
  write(bpe, "#version: 0.2\na b c\n");
  check_error([&] { load_tokenizer(dir); },
              "vocab.bpe: line 2 is 'a b c', expected two tokens separated by one space");
  write(bpe, "#version: 0.2\na zz\n");
  check_error([&] { load_tokenizer(dir); }, "vocab.bpe: line 2: merge of unknown token 'zz'");
  write(bpe, good_bpe);
  write(dir / "tokenizer.json",
        "{\"format\": \"attend-tokenizer\", \"version\": 1, \"kind\": \"wordpiece\"}");
  check_error([&] { load_tokenizer(dir); }, "field \"kind\" is 'wordpiece', expected char or bpe");
  write(dir / "tokenizer.json",
        "{\"format\": \"attend-tokenizer\", \"version\": 7, \"kind\": \"bpe\"}");
  check_error([&] { load_tokenizer(dir); }, "unsupported version 7");
  check_error([&] { load_tokenizer(dir / "nowhere"); }, "tokenizer.json: no such file");
  check_error([] { train_bpe_tokenizer("abc", 100); }, "bpe: vocab_size must be at least 256");
  fs::remove_all(dir);
}

TEST_CASE("tokenizer arrays: a round trip, and offsets or merges out of range refused") {
  TokenizerSpec s{.kind = "bpe", .name = "bpe:258", .merges = {{'a', 'b'}, {256, 'c'}}};
  for (int b = 0; b < 256; ++b) s.tokens.emplace_back(1, static_cast<char>(b));
  s.tokens.push_back("ab");
  s.tokens.push_back("abc");
  TokenizerArrays a = to_arrays(s);
  TokenizerSpec back = from_arrays("bpe", "bpe:258", a, "f.h5: /tokenizer");
  CHECK(back.tokens == s.tokens);
  CHECK(back.merges == s.merges);
  TokenizerArrays neg = a;
  neg.offsets[1] = -5;  // would read before the bytes
  check_error([&] { from_arrays("bpe", "x", neg, "f.h5: /tokenizer"); },
              "f.h5: /tokenizer: token_offsets decrease at entry 1");
  TokenizerArrays first = a;
  first.offsets[0] = -1;
  check_error([&] { from_arrays("bpe", "x", first, "f.h5: /tokenizer"); },
              "token_offsets must start at 0 and end at the 261 token bytes");
  TokenizerArrays past = a;
  past.offsets.back() += 10;
  check_error([&] { from_arrays("bpe", "x", past, "f.h5: /tokenizer"); }, "must start at 0");
  TokenizerArrays merge = a;
  merge.merges[1] = 9999;
  check_error([&] { from_arrays("bpe", "x", merge, "f.h5: /tokenizer"); },
              "merge 0 (97, 9999) names a token outside [0, 258)");
}

TEST_CASE("a BPE tokenizer that stops early is named by its real size") {
  // Regression (adversarial L12): bpe:99999999 stopped at a few hundred tokens but kept the
  // name it was asked for.
  auto tok = train_bpe_tokenizer("abab abab cdcd", 99999999);
  CHECK(tok->vocab_size() < 300);
  CHECK(tok->spec().name == "bpe:" + std::to_string(tok->vocab_size()));
}

namespace {

// Sets an environment variable for one scope and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("gpt2 is found in the cache folder and its files are checked by hash") {
  const fs::path shared = shared_data();
  if (shared.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  const fs::path root = temp_dir("gpt2_cache");
  const std::string xdg = root.string();
  ScopedEnv cache("XDG_CACHE_HOME", &xdg);
  ScopedEnv no_override("ATTEND_GPT2_DIR", nullptr);
  CHECK(gpt2_cache_dir() == root / "attend" / "gpt2");
  fs::create_directories(gpt2_cache_dir());
  for (const char* f : {"encoder.json", "vocab.bpe"})
    fs::copy_file(shared / "gpt2" / f, gpt2_cache_dir() / f);
  CHECK(find_gpt2_dir() == gpt2_cache_dir());
  auto tok = tokenizer_from_arg("gpt2");
  CHECK(tok->vocab_size() == 50257);
  CHECK(tok->encode("Hello world") == TokenIds{15496, 995});

  // One byte changed in a merge rank's text: refused, naming the file.
  std::string merges = read_file(gpt2_cache_dir() / "vocab.bpe");
  merges[merges.size() / 2] ^= 1;
  write(gpt2_cache_dir() / "vocab.bpe", merges);
  check_error([] { tokenizer_from_arg("gpt2"); }, "vocab.bpe: not GPT-2's file");

  // ATTEND_GPT2_DIR is the only place looked at when it is set.
  const std::string empty = (root / "empty").string();
  fs::create_directories(empty);
  ScopedEnv override_dir("ATTEND_GPT2_DIR", &empty);
  check_error([] { tokenizer_from_arg("gpt2"); },
              "ATTEND_GPT2_DIR='" + empty + "' does not hold encoder.json and vocab.bpe");
  check_error([] { tokenizer_from_arg("gpt2"); }, "scripts/get-gpt2-tokenizer.sh");
  fs::remove_all(root);  // 1.5 MB of GPT-2's files, left behind by every run before
}
