// Byte-level BPE: GPT-2's encoding, its file formats, and training from a corpus.
#include <nlohmann/json.hpp>

#include <array>
#include <limits>
#include <memory>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "data/pretokenize.h"
#include "data/regex.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "tensor/error.h"

namespace attend::data {

namespace fs = std::filesystem;

namespace {

struct ByteMap {
  std::array<std::string, 256> to_unicode;             // byte -> UTF-8 of its code point
  std::unordered_map<uint32_t, uint8_t> from_unicode;  // code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool prints = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = prints ? b : next++;
      append_utf8(to_unicode[b], cp);
      from_unicode[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Replaces every (a, b), left to right and without overlaps, by t.
void merge_pair(TokenIds& s, int32_t a, int32_t b, int32_t t) {
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i, ++out) {
    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
      s[out] = t;
      ++i;
    } else {
      s[out] = s[i];
    }
  }
  s.resize(out);
}

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
    std::unordered_map<std::string, int32_t> ids;
    for (size_t id = 0; id < spec_.tokens.size(); ++id) {
      ATTEND_CHECK(!spec_.tokens[id].empty(), "bpe tokenizer: token ", id, " is empty");
      ids.emplace(spec_.tokens[id], static_cast<int32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
      auto it = ids.find(std::string(1, static_cast<char>(b)));
      ATTEND_CHECK(it != ids.end(), "bpe tokenizer: no token for byte ", b,
                   "; a byte-level vocabulary needs all 256");
      byte_id_[b] = it->second;
    }
    const int32_t V = static_cast<int32_t>(spec_.tokens.size());
    for (size_t r = 0; r < spec_.merges.size(); ++r) {
      auto [a, b] = spec_.merges[r];
      ATTEND_CHECK(a >= 0 && a < V && b >= 0 && b < V, "bpe tokenizer: merge ", r,
                   " refers to ids (", a, ", ", b, ") outside the vocabulary of ", V);
      auto it = ids.find(spec_.tokens[a] + spec_.tokens[b]);
      ATTEND_CHECK(it != ids.end(), "bpe tokenizer: merge ", r,
                   " makes a token that is not in the vocabulary");
      // A merge listed twice takes its last rank, as GPT-2's encoder.py (a dict built from
      // zip(merges, range)) and Hugging Face's tokenizers (a map collected in order) do.
      merges_.insert_or_assign(pair_key(a, b), Merge{static_cast<int32_t>(r), it->second});
    }
    if (!spec_.pattern.empty()) regex_ = std::make_unique<Regex>(spec_.pattern);
    if (spec_.ignore_merges) whole_ = std::move(ids);
  }

  TokenIds encode(std::string_view text) const override {
    TokenIds out;
    out.reserve(text.size() / 3);
    for (std::string_view piece : regex_ ? regex_->split(text) : pretokenize(text)) {
      {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        auto it = cache_.find(std::string(piece));
        if (it != cache_.end()) {
          out.insert(out.end(), it->second.begin(), it->second.end());
          continue;
        }
      }
      TokenIds ids = encode_piece(piece);
      out.insert(out.end(), ids.begin(), ids.end());
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() < kCacheMax) cache_.emplace(std::string(piece), std::move(ids));
    }
    return out;
  }

  const TokenizerSpec& spec() const override { return spec_; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  static constexpr size_t kCacheMax = 1 << 20;

  // GPT-2's bpe(): merge the lowest-ranked adjacent pair everywhere, until none is left.
  TokenIds encode_piece(std::string_view piece) const {
    if (!whole_.empty()) {  // ignore_merges: a piece that is a token is that token
      auto it = whole_.find(std::string(piece));
      if (it != whole_.end()) return {it->second};
    }
    TokenIds s;
    s.reserve(piece.size());
    for (char c : piece) s.push_back(byte_id_[static_cast<uint8_t>(c)]);
    while (s.size() >= 2) {
      int32_t best_rank = std::numeric_limits<int32_t>::max(), a = -1, b = -1, merged = -1;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        auto it = merges_.find(pair_key(s[i], s[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          a = s[i], b = s[i + 1], merged = it->second.id;
        }
      }
      if (merged < 0) break;
      merge_pair(s, a, b, merged);
    }
    return s;
  }

  TokenizerSpec spec_;
  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> merges_;
  std::unique_ptr<Regex> regex_;                   // spec_.pattern compiled, if any
  std::unordered_map<std::string, int32_t> whole_;  // ignore_merges: token bytes -> id
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, TokenIds> cache_;
};

}  // namespace


bool unicode_string_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = decode_utf8(s, i);
    if (!c.valid) return false;
    auto it = byte_map().from_unicode.find(c.cp);
    if (it == byte_map().from_unicode.end()) return false;
    out += static_cast<char>(it->second);
    i += c.length;
  }
  return true;
}

std::string bytes_to_unicode_string(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += byte_map().to_unicode[static_cast<uint8_t>(c)];
  return out;
}

std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerSpec spec) {
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Tokenizer> load_bpe_files(const fs::path& encoder_json, const fs::path& vocab_bpe,
                                          const std::string& name) {
  const std::string enc_text = read_file(encoder_json);
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(enc_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(str(encoder_json.string(), ": invalid JSON at byte ", e.byte));
  }
  ATTEND_CHECK(enc.is_object(), encoder_json.string(), ": expected a JSON object of token -> id");
  TokenizerSpec spec{.kind = "bpe", .name = name, .tokens = std::vector<std::string>(enc.size())};
  std::vector<bool> seen(enc.size(), false);
  std::unordered_map<std::string, int32_t> ids;  // token string (mapped) -> id
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    ATTEND_CHECK(it.value().is_number_integer(), encoder_json.string(), ": token '", it.key(),
                 "' has a value that is not an integer id");
    const int64_t id = it.value().get<int64_t>();
    ATTEND_CHECK(id >= 0 && id < static_cast<int64_t>(enc.size()) && !seen[id],
                 encoder_json.string(), ": token '", it.key(), "' has id ", id, "; ids must be 0..",
                 enc.size() - 1, ", each once");
    std::string bytes;
    ATTEND_CHECK(unicode_string_to_bytes(it.key(), bytes), encoder_json.string(), ": token '",
                 it.key(), "' has a character outside GPT-2's byte-to-unicode map");
    seen[id] = true;
    spec.tokens[id] = bytes;
    ids.emplace(it.key(), static_cast<int32_t>(id));
  }

  const std::string bpe_text = read_file(vocab_bpe);
  size_t pos = 0, line_no = 0;
  while (pos < bpe_text.size()) {
    size_t end = bpe_text.find('\n', pos);
    if (end == std::string::npos) end = bpe_text.size();
    std::string_view line(bpe_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    ATTEND_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                     line.find(' ', sp + 1) == std::string_view::npos,
                 vocab_bpe.string(), ": line ", line_no, " is '", line,
                 "', expected two tokens separated by one space");
    const std::string a(line.substr(0, sp)), b(line.substr(sp + 1));
    auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
    ATTEND_CHECK(ia != ids.end(), vocab_bpe.string(), ": line ", line_no,
                 ": merge of unknown token '", a, "'");
    ATTEND_CHECK(ib != ids.end(), vocab_bpe.string(), ": line ", line_no,
                 ": merge of unknown token '", b, "'");
    ATTEND_CHECK(iab != ids.end(), vocab_bpe.string(), ": line ", line_no, ": the merged token '",
                 a + b, "' is not in ", encoder_json.filename().string());
    spec.merges.emplace_back(ia->second, ib->second);
  }
  return make_bpe_tokenizer(std::move(spec));
}

std::unique_ptr<Tokenizer> train_bpe_tokenizer(std::string_view corpus, int64_t vocab_size) {
  ATTEND_CHECK(vocab_size >= 256, "bpe: vocab_size must be at least 256 (the byte tokens), got ",
               vocab_size);
  ATTEND_CHECK(!corpus.empty(), "bpe: the corpus is empty");
  TokenizerSpec spec{.kind = "bpe", .name = "bpe:" + std::to_string(vocab_size)};
  for (int b = 0; b < 256; ++b) spec.tokens.emplace_back(1, static_cast<char>(b));

  // Unique pieces with their counts; each a sequence of token ids.
  std::unordered_map<std::string_view, int64_t> counts;
  for (std::string_view p : pretokenize(corpus)) ++counts[p];
  struct Word {
    TokenIds syms;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(counts.size());
  for (auto& [p, c] : counts) {
    TokenIds s;
    for (char ch : p) s.push_back(static_cast<uint8_t>(ch));
    words.push_back({std::move(s), c});
  }
  // A fixed word order, so that nothing depends on hash-map iteration.
  std::sort(words.begin(), words.end(),
            [](const Word& x, const Word& y) { return x.syms < y.syms; });

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> words (may be stale)
  for (size_t w = 0; w < words.size(); ++w) {
    const TokenIds& s = words[w].syms;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t k = pair_key(s[i], s[i + 1]);
      pair_count[k] += words[w].count;
      auto& v = where[k];
      if (v.empty() || v.back() != static_cast<int32_t>(w)) v.push_back(static_cast<int32_t>(w));
    }
  }
  // Max-heap on (count, then smaller first id, then smaller second id); stale entries are
  // skipped when popped.
  using Entry = std::pair<int64_t, uint64_t>;
  auto worse = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (auto& [k, c] : pair_count) heap.push({c, k});

  while (static_cast<int64_t>(spec.tokens.size()) < vocab_size && !heap.empty()) {
    auto [c, key] = heap.top();
    heap.pop();
    auto pc = pair_count.find(key);
    if (pc == pair_count.end() || pc->second != c || c <= 0) continue;
    const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xffffffffu);
    const int32_t t = static_cast<int32_t>(spec.tokens.size());
    spec.tokens.push_back(spec.tokens[a] + spec.tokens[b]);
    spec.merges.emplace_back(a, b);

    std::unordered_map<uint64_t, int64_t> delta;
    std::vector<int32_t> touched = std::move(where[key]);
    where.erase(key);
    for (int32_t w : touched) {
      TokenIds& s = words[w].syms;
      bool has = false;
      for (size_t i = 0; i + 1 < s.size() && !has; ++i) has = s[i] == a && s[i + 1] == b;
      if (!has) continue;
      const int64_t n = words[w].count;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= n;
      merge_pair(s, a, b, t);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t k = pair_key(s[i], s[i + 1]);
        delta[k] += n;
        if (s[i] == t || s[i + 1] == t) {
          auto& v = where[k];
          if (v.empty() || v.back() != w) v.push_back(w);
        }
      }
    }
    for (auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& cnt = pair_count[k];
      cnt += d;
      if (cnt > 0) heap.push({cnt, k});
    }
  }
  // A corpus with fewer distinct pairs than asked for stops early: the name says what the
  // tokenizer is, not what was asked (bpe:99999999 on a small corpus is bpe:2665).
  spec.name = "bpe:" + std::to_string(spec.tokens.size());
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace attend::data
