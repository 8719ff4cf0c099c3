// Fuzzing the data parsers (see tests/fuzz.h): token files, attend's tokenizer files and
// Hugging Face's tokenizer.json.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "data/hf_tokenizer.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "fuzz.h"
#include "patterns.h"

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

namespace {

using nlohmann::json;

// A structured mutation of a tokenizer.json: 1-3 changes to its values (a leaf replaced by
// an interesting value, a key removed, a vocab id or merge duplicated, the pattern spliced
// with regex fragments), so that most cases parse and reach the checks behind the parser.
std::string mutate_json(const std::string& good, std::mt19937_64& rng) {
  json j = json::parse(good);
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const std::vector<json> values = {
      -1, 0, 1, 255, 256, 1 << 21, (int64_t{1} << 31) + 5, int64_t{1} << 62, 1e300, 0.5, true, false,
      nullptr, "", " ", "a b", "a  b", "\u00ff\u00fe", "\u20ac", "(", "a{1001}", "(?<=a)", "\\p{Xx}", "[z-a]",
      "(?:(?:(?:a*)*)*)*b", "ByteLevel", "Split", "BPE", "Unigram", "Sequence", "Isolated",
      json::array(), json::object(), json::array({"a", "b"}), json::array({1, 2, 3})};
  static const std::vector<std::string> fragments = {
      "a", "\\p{L}", "\\p{N}+", "[^\\s]", "(?i:ab)", "\\s+(?!\\S)", "|", "*", "+?", "++",
      "{2,3}", "(", ")", "[", "]", "(?=x)", "\\", ".", "\\u0041", "{99999}", "^", "$"};
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int r = 0; r < rounds; ++r) {
    try {  // an earlier round may have changed the shape a later one walks into
    switch (rng() % 5) {
      case 0: {  // a random node (walking down from the root) gets an interesting value
        json* node = &j;
        while ((node->is_object() || node->is_array()) && !node->empty() && rng() % 4 != 0) {
          auto it = node->begin();
          std::advance(it, static_cast<std::ptrdiff_t>(pick(node->size())));
          node = &*it;
        }
        *node = values[pick(values.size())];
        break;
      }
      case 1: {  // remove a key somewhere in the top two levels
        json& o = rng() % 2 ? j : j["model"];
        if (o.is_object() && !o.empty()) {
          auto it = o.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(pick(o.size())));
          o.erase(it);
        }
        break;
      }
      case 2: {  // a vocab entry's id moved to another's, or out past the end
        json& v = j["model"]["vocab"];
        if (v.is_object() && !v.empty()) {
          auto it = v.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(pick(v.size())));
          *it = rng() % 2 ? json(static_cast<int64_t>(pick(v.size()))) : json(static_cast<int64_t>(v.size() + pick(3)));
        }
        break;
      }
      case 3: {  // a merge duplicated, swapped with another, or made of other tokens
        json& m = j["model"]["merges"];
        if (m.is_array() && m.size() > 1) {
          const size_t a = pick(m.size()), b = pick(m.size());
          if (rng() % 2) std::swap(m[a], m[b]);
          else m.insert(m.begin() + static_cast<std::ptrdiff_t>(a), m[b]);
        }
        break;
      }
      default: {  // the pre-tokenizer's pattern spliced with fragments
        json& pt = j["pre_tokenizer"];
        if (pt.is_object() && pt.contains("pretokenizers") && pt["pretokenizers"].is_array() &&
            !pt["pretokenizers"].empty() && pt["pretokenizers"][0].is_object() &&
            pt["pretokenizers"][0].contains("pattern") && pt["pretokenizers"][0]["pattern"].is_object() &&
            pt["pretokenizers"][0]["pattern"].contains("Regex") &&
            pt["pretokenizers"][0]["pattern"]["Regex"].is_string()) {
          std::string p = pt["pretokenizers"][0]["pattern"]["Regex"];
          p.insert(pick(p.size() + 1), fragments[pick(fragments.size())]);
          pt["pretokenizers"][0]["pattern"]["Regex"] = p;
        }
        break;
      }
    }
    } catch (const json::exception&) {
    }
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

TEST_CASE("fuzz: Hugging Face tokenizer.json files are refused cleanly or round-trip text") {
  const fs::path dir = test::temp_dir("fuzz_hf");
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog's " + std::to_string(i * 37) + "\n";
  TokenizerSpec spec = train_bpe_tokenizer(corpus, 300)->spec();
  spec.pattern = test::kLlama3Pattern;
  spec.ignore_merges = true;
  json good = json::parse(hf_tokenizer_json(spec));
  good["added_tokens"] = {{{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}}};
  const std::string good_text = good.dump(1);
  {
    std::ofstream(dir / "good.json") << good_text;
    REQUIRE(load_hf_tokenizer(dir / "good.json")->vocab_size() == 301);
  }
  // Whatever loads must turn text into ids in range and back, or refuse the text cleanly.
  auto round_trips = [](const fs::path& file) -> std::string {
    auto tok = load_hf_tokenizer(file);
    for (const std::string text : {"the lazy dog's 1234567\n", "Fox  jumps\xff!!\n\n", ""}) {
      TokenIds ids;
      try {
        ids = tok->encode(text);
      } catch (const Error&) {
        continue;  // a pattern that exhausts its work bound refuses the text
      }
      for (int32_t id : ids)
        if (id < 0 || id >= tok->vocab_size()) return str("id ", id, " out of range");
      if (tok->decode(ids) != text) return "decode(encode(text)) != text";
    }
    return "";
  };
  const auto load = [](const fs::path& p) { load_hf_tokenizer(p); };
  const auto bytes = test::fuzz_file("hf tokenizer.json (bytes)", good_text, dir / "t.json", 40,
                                     test::fuzz_cases(300), load, round_trips);
  const auto values = test::fuzz_file("hf tokenizer.json (values)", good_text, dir / "t.json", 41,
                                      test::fuzz_cases(600), load, round_trips, mutate_json);
  // The structured mutations must reach past the JSON parser: some load, some do not.
  CHECK(values.accepted > 0);
  CHECK(bytes.findings + values.findings == 0);
  fs::remove_all(dir);
}
