// Hugging Face's tokenizer.json: GPT-2's, written by an independent script, gives GPT-2's
// ids; a Llama-3-shaped file's pattern, ignore_merges and added tokens act as Hugging
// Face's do; attend's own BPE round-trips; every other kind is refused naming it.
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "tensor/random.h"
#include "patterns.h"
#include "random_text.h"
#include "test_util.h"

using namespace attend;
using namespace attend::data;
using attend::test::check_error;
using attend::test::kLlama3Pattern;
using attend::test::random_bytes;
using attend::test::random_unicode;
using attend::test::temp_dir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path gpt2_files() {
  const fs::path p = test::shared_data("gpt2");
  return !p.empty() && fs::exists(p / "encoder.json") && fs::exists(p / "vocab.bpe") ? p
                                                                                    : fs::path();
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A byte-level tokenizer file made here: the 256 byte tokens, then `extra` tokens (their
// bytes), `merges` ("a b" over byte-level strings), the pre-tokenizer given.
json small_file(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                const std::string& pattern) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_unicode_string(std::string(1, static_cast<char>(b)))] = b;
  for (size_t k = 0; k < extra.size(); ++k) vocab[bytes_to_unicode_string(extra[k])] = 256 + k;
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  if (!pattern.empty()) {
    const json split = {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    pre = {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}};
  }
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<Tokenizer> load_json(const fs::path& dir, const json& j) {
  write(dir / "tokenizer.json", j.dump());
  return load_hf_tokenizer(dir / "tokenizer.json");
}

}  // namespace

TEST_CASE("hf tokenizer.json: GPT-2's, written from encoder.json and vocab.bpe by a script, gives GPT-2's ids") {
  const fs::path g = gpt2_files();
  if (g.empty()) ATTEND_SKIP("../shared/data/gpt2 not found");
  const auto gpt2 = load_bpe_files(g / "encoder.json", g / "vocab.bpe", "gpt2");
  const fs::path dir = temp_dir("hf_gpt2");
  std::ifstream in(fs::path(ATTEND_TEST_DATA) / "gpt2_reference.json");
  REQUIRE(in.good());
  const json ref = json::parse(in);
  REQUIRE(ref.size() >= 30);
  const std::string script = std::string(ATTEND_TEST_DATA) + "/hf_tokenizer_json.py";
  for (const char* variant : {"strings", "pairs", "split"}) {
    CAPTURE(variant);
    const fs::path file = dir / (std::string(variant) + ".json");
    const int status = std::system(("/usr/bin/python3 '" + script + "' '" + (g / "encoder.json").string() + "' '" +
                                    (g / "vocab.bpe").string() + "' '" + file.string() + "' " + variant)
                                       .c_str());
    if (status != 0 && !fs::exists("/usr/bin/python3")) ATTEND_SKIP("python3 is missing: no independent writer");
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    const auto tok = load_hf_tokenizer(file);
    CHECK(tok->spec().pattern.empty());  // GPT-2's pattern, however the file spells it
    CHECK(tok->vocab_size() == 50257);
    CHECK(tokenizer_hash(tok->spec()) == tokenizer_hash(gpt2->spec()));
    for (const auto& row : ref) {
      const std::string text = row["text"];
      const TokenIds want = row["ids"].get<TokenIds>();
      CAPTURE(text);
      CHECK(tok->encode(text) == want);
      CHECK(tok->decode(want) == text);
    }
    // The Split variant runs GPT-2's pattern through the regex engine once it is not
    // recognised as GPT-2's: the same ids on a corpus of random text.
    if (std::string(variant) == "split") {
      json j;
      std::ifstream(file) >> j;
      j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
          std::string("(?:") + kGpt2Pattern + ")";
      const auto engine = load_json(dir, j);
      CHECK(!engine->spec().pattern.empty());
      Generator gen(5);
      for (int i = 0; i < 300; ++i) {
        const std::string s = i % 2 ? random_unicode(gen, 1 + i % 80) : random_bytes(gen, 1 + i % 80);
        CAPTURE(s);
        CHECK(engine->encode(s) == gpt2->encode(s));
      }
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("hf tokenizer.json: a Llama-3-shaped file cuts by its own pattern, honours ignore_merges, never encodes added tokens") {
  const fs::path dir = temp_dir("hf_llama3");
  // Merges 1+2 and 3+4. GPT-2's pattern keeps "12345" whole: 12 3 4 5 -> 12 34 5. Llama
  // 3's cuts digits in threes, "123" "45": 12 3 | 4 5 (the 3 and 4 never meet).
  const json digits = small_file({"12", "34"}, {"1 2", "3 4"}, kLlama3Pattern);
  const auto llama = load_json(dir, digits);
  CHECK(llama->spec().pattern == kLlama3Pattern);
  CHECK(llama->encode("12345") == TokenIds{256, '3', '4', '5'});
  json gpt2_shaped = digits;
  gpt2_shaped["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", true}};
  CHECK(load_json(dir, gpt2_shaped)->encode("12345") == TokenIds{256, 257, '5'});
  CHECK(tokenizer_hash(llama->spec()) != tokenizer_hash(load_json(dir, gpt2_shaped)->spec()));

  // "abc" is in the vocabulary though no merge makes it: with ignore_merges a piece that is
  // a token is that token (Llama 3 sets it); without, merges decide ("ab" then "c").
  json abc = small_file({"ab", "abc"}, {"a b"}, kLlama3Pattern);
  CHECK(load_json(dir, abc)->encode("abc abc") == TokenIds{256, 'c', ' ', 256, 'c'});
  abc["model"]["ignore_merges"] = true;
  const auto ignoring = load_json(dir, abc);
  CHECK(ignoring->spec().ignore_merges);
  CHECK(ignoring->encode("abc abc") == TokenIds{257, ' ', 256, 'c'});  // " abc" is not a token

  // An added token outside the vocabulary joins it: it decodes, and text that spells it
  // is tokenized as text.
  json added = small_file({"ab"}, {"a b"}, kLlama3Pattern);
  added["added_tokens"] = {{{"id", 257}, {"content", "<|begin_of_text|>"}, {"special", true}}};
  const auto with_bos = load_json(dir, added);
  CHECK(with_bos->vocab_size() == 258);
  CHECK(with_bos->decode({257, 256}) == "<|begin_of_text|>ab");
  const TokenIds ids = with_bos->encode("<|begin_of_text|>ab");
  CHECK(std::find(ids.begin(), ids.end(), 257) == ids.end());
  CHECK(with_bos->decode(ids) == "<|begin_of_text|>ab");
  fs::remove_all(dir);
}

TEST_CASE("hf tokenizer.json: attend's BPE written and read back is the same tokenizer, with and without a pattern") {
  const fs::path dir = temp_dir("hf_round");
  Generator g(6);
  std::string corpus;
  for (int i = 0; i < 100; ++i) corpus += random_unicode(g, 40) + " 2026 it's\n";
  const auto trained = train_bpe_tokenizer(corpus, 400);
  TokenizerSpec patterned = trained->spec();
  patterned.pattern = kLlama3Pattern;
  patterned.ignore_merges = true;
  for (const TokenizerSpec& spec : {trained->spec(), patterned}) {
    CAPTURE(spec.pattern);
    const auto tok = make_tokenizer(spec);
    write(dir / "tokenizer.json", hf_tokenizer_json(spec));
    const auto back = load_hf_tokenizer(dir / "tokenizer.json");
    CHECK(back->spec().tokens == spec.tokens);
    CHECK(back->spec().merges == spec.merges);
    CHECK(back->spec().pattern == spec.pattern);
    CHECK(back->spec().ignore_merges == spec.ignore_merges);
    CHECK(tokenizer_hash(back->spec()) == tokenizer_hash(spec));
    // attend's own folder format (version 2 when a pattern is set) keeps it too.
    tok->save(dir / "attend");
    const auto own = load_tokenizer(dir / "attend");
    CHECK(tokenizer_hash(own->spec()) == tokenizer_hash(spec));
    CHECK(own->spec().pattern == spec.pattern);
    const json meta = json::parse(read_file(dir / "attend" / "tokenizer.json"));
    CHECK(meta["version"] == (spec.pattern.empty() && !spec.ignore_merges ? 1 : 2));
    for (int i = 0; i < 50; ++i) {
      const std::string s = random_unicode(g, 1 + i);
      CHECK(back->encode(s) == tok->encode(s));
      CHECK(own->encode(s) == tok->encode(s));
    }
  }
  CHECK(tokenizer_hash(patterned) != tokenizer_hash(trained->spec()));
  check_error([] { hf_tokenizer_json(build_char_tokenizer("abc")->spec()); },
              "Hugging Face's format has no byte-level form of a char tokenizer");
  fs::remove_all(dir);
}

TEST_CASE("hf tokenizer.json: other kinds and broken files are refused naming the field") {
  const fs::path dir = temp_dir("hf_bad");
  const json good = small_file({"ab"}, {"a b"}, "");
  REQUIRE(load_json(dir, good)->vocab_size() == 257);
  auto refused = [&](const std::function<void(json&)>& change, const std::string& needle) {
    json j = good;
    change(j);
    CAPTURE(needle);
    check_error([&] { load_json(dir, j); }, needle);
  };
  refused([](json& j) { j["model"]["type"] = "Unigram"; }, "model.type is 'Unigram': only byte-level BPE");
  refused([](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type is 'WordPiece'");
  refused([](json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback is true");
  refused([](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout must be null");
  refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
          "continuing_subword_prefix and end_of_word_suffix must be empty");
  refused([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer 'NFC' is not supported");
  refused([](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; }, "add_prefix_space true is not supported");
  refused([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "type 'Metaspace' is not supported");
  refused([](json& j) { j["pre_tokenizer"]["use_regex"] = false; }, "use_regex false (expected true");
  refused(
      [](json& j) {
        j["pre_tokenizer"] = small_file({}, {}, "a|b")["pre_tokenizer"];
        j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
      },
      "behavior must be \"Isolated\"");
  refused([](json& j) { j["pre_tokenizer"] = small_file({}, {}, "a(?<=b)")["pre_tokenizer"]; }, "pretokenizers[0]");
  refused([](json& j) { j["model"]["vocab"].erase(bytes_to_unicode_string("q")); },
          "no token has id 113 (ids must be 0..256 with none missing)");
  refused([](json& j) { j["model"]["vocab"]["zz"] = 1 << 21; }, "has id 2097152 (ids must be in [0, 2097152))");
  refused([](json& j) { j["model"]["vocab"]["zz"] = -1; }, "has id -1");
  refused([](json& j) { j["model"]["vocab"]["zz"] = "7"; }, "token 'zz' has a value that is not an integer id");
  refused([](json& j) { j["model"]["vocab"]["zz"] = 5; }, "id 5 is given twice");
  refused([](json& j) { j["model"]["vocab"]["\xe2\x82\xac"] = 257; }, "is not a byte-level token");
  refused([](json& j) { j["model"]["merges"].push_back("a zz"); }, "merges[1] merges 'a' and 'zz', not both in the vocab");
  refused([](json& j) { j["model"]["merges"].push_back("b c"); }, "merges[1]: the merged token 'bc' is not in the vocab");
  refused([](json& j) { j["model"]["merges"].push_back("a b c"); }, "expected two tokens separated by one space");
  refused([](json& j) { j["added_tokens"] = {{{"id", 256}, {"content", "<s>"}}}; },
          "added_tokens[0] ('<s>') has id 256, which the vocab gives to 'ab'");
  refused([](json& j) { j.erase("model"); }, "not a Hugging Face tokenizer file (no \"model\" object)");
  write(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\"");
  check_error([&] { load_hf_tokenizer(dir / "tokenizer.json"); }, "tokenizer.json: invalid JSON at byte");
  write(dir / "tokenizer.json", std::string(100, '[') + std::string(100, ']'));
  check_error([&] { load_hf_tokenizer(dir / "tokenizer.json"); }, "JSON nested deeper than 32");
  // SentencePiece: a tokenizer.model, named as such, whether given as a file or a folder.
  write(dir / "tokenizer.model", "\x0a\x05\x0a\x03<s>");
  check_error([&] { load_hf_tokenizer(dir / "tokenizer.model"); }, "a SentencePiece model (tokenizer.model) is not supported");
  fs::remove(dir / "tokenizer.json");
  check_error([&] { tokenizer_from_arg("hf:" + dir.string()); }, "holds a SentencePiece tokenizer.model and no tokenizer.json");
  fs::remove_all(dir);
}

TEST_CASE("hf tokenizer.json: a merge listed twice takes its last rank, as GPT-2's encoder.py does") {
  // encoder.py ranks merges with dict(zip(merges, range(len(merges)))): the later entry wins,
  // so "a b" ranks 2, after "b c" (1), and "abc" pre-tokenizes as a, bc. Taking the first rank
  // gave ab, c. The same BPE class serves vocab.bpe files and checkpoints.
  const fs::path dir = temp_dir("hf_dup_merge");
  const auto tok = load_json(dir, small_file({"ab", "bc", "abc"}, {"a b", "b c", "a b"}, ""));
  CHECK(tok->encode("abc") == TokenIds{97, 257});
  // Without the repeat, "a b" ranks first: ab, then abc.
  const auto plain = load_json(dir, small_file({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}, ""));
  CHECK(plain->encode("abc") == TokenIds{258});
  fs::remove_all(dir);
}

TEST_CASE("hf tokenizer.json: an added token with another token's bytes under a new id is refused") {
  // The id 259 token "ab" duplicates vocab token 256: accepted, it made a data folder whose
  // encoder.json names "ab" twice, which attend then refused to read back.
  const fs::path dir = temp_dir("hf_added_dup");
  json j = small_file({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}, "");
  j["added_tokens"] = json::array({{{"id", 259}, {"content", "ab"}, {"special", true}}});
  check_error([&] { load_json(dir, j); },
              "added_tokens[0] ('ab', id 259) has the bytes of token 256");
  // The same token under its own id stays accepted.
  j["added_tokens"] = json::array({{{"id", 256}, {"content", "ab"}, {"special", true}}});
  CHECK(load_json(dir, j)->vocab_size() == 259);
  fs::remove_all(dir);
}
