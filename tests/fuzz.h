// A small mutation fuzzer of our own for the parsers of untrusted files: seeded and
// deterministic (std::mt19937_64), bounded by a case count (ATTEND_FUZZ_CASES, default
// given by the test; scripts/fuzz.sh runs many more). Each case mutates a valid file
// (bit flips, interesting bytes and integers, truncation, duplicated or inserted runs),
// writes it, and calls the loader. Outcomes:
//   refused   the loader threw attend::Error (a clean error naming the file)
//   accepted  it loaded; `accepted` then checks it is consistent (a silent wrong accept
//             is a finding)
//   finding   any other exception (an "internal error"), or an inconsistent accept
// A crash or a hang is a finding too: it ends the test process, which CTest reports.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "test_util.h"

namespace attend::test {

inline int64_t fuzz_cases(int64_t default_cases) {
  const char* env = std::getenv("ATTEND_FUZZ_CASES");
  return env ? std::max<int64_t>(1, std::atoll(env)) : default_cases;
}

inline std::string mutate(const std::string& good, std::mt19937_64& rng) {
  std::string s = good;
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int r = 0; r < rounds && !s.empty(); ++r) {
    switch (rng() % 6) {
      case 0:  // flip one bit
        s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1: {  // an interesting byte
        static const unsigned char bytes[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe};
        s[pick(s.size())] = static_cast<char>(bytes[rng() % 6]);
        break;
      }
      case 2: {  // an interesting 64-bit (or 32-bit) integer, little-endian
        static const uint64_t ints[] = {0,
                                        ~0ull,
                                        0x7fffffffffffffffull,
                                        1ull << 31,
                                        1ull << 32,
                                        (1ull << 62) + 16,
                                        0x80000000ull,
                                        65536,
                                        65537};
        const uint64_t v = ints[rng() % 9];
        const size_t width = rng() % 2 ? 8 : 4;
        if (s.size() >= width) std::memcpy(s.data() + pick(s.size() - width + 1), &v, width);
        break;
      }
      case 3:  // truncate
        s.resize(pick(s.size()));
        break;
      case 4: {  // duplicate a run
        const size_t at = pick(s.size()), len = std::min<size_t>(1 + rng() % 64, s.size() - at);
        s.insert(at, s.substr(at, len));
        break;
      }
      default: {  // insert random bytes
        std::string junk(1 + rng() % 16, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), junk);
        break;
      }
    }
  }
  return s;
}

struct FuzzCounts {
  int64_t cases = 0, refused = 0, accepted = 0, findings = 0;
};

// Runs `cases` mutations of `good` through load(path); accepted(path) returns "" or what is
// inconsistent about a file that loaded. `mutator` replaces the byte mutations (a
// structured fuzzer mutates the file's values rather than its bytes).
inline FuzzCounts fuzz_file(
    const std::string& what, const std::string& good, const std::filesystem::path& path,
    uint64_t seed, int64_t cases, const std::function<void(const std::filesystem::path&)>& load,
    const std::function<std::string(const std::filesystem::path&)>& accepted = nullptr,
    const std::function<std::string(const std::string&, std::mt19937_64&)>& mutator = nullptr) {
  std::mt19937_64 rng(seed);
  FuzzCounts n;
  for (int64_t k = 0; k < cases; ++k) {
    const std::string bytes = mutator ? mutator(good, rng) : mutate(good, rng);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    ++n.cases;
    std::string finding;
    try {
      load(path);
      ++n.accepted;
      if (accepted) finding = accepted(path);
    } catch (const Error&) {
      ++n.refused;
    } catch (const std::exception& e) {
      finding = std::string("not an attend::Error: ") + e.what();
    }
    if (!finding.empty()) {
      ++n.findings;
      INFO(what, " case ", k, " (seed ", seed, "): ", finding);
      CHECK(finding.empty());
      std::filesystem::copy_file(path, path.string() + ".finding" + std::to_string(k),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  MESSAGE(what, ": ", n.cases, " cases, ", n.refused, " refused, ", n.accepted, " accepted, ",
          n.findings, " findings");
  std::fprintf(stderr, "FUZZ %s: %lld cases, %lld refused, %lld accepted, %lld findings\n",
               what.c_str(), static_cast<long long>(n.cases), static_cast<long long>(n.refused),
               static_cast<long long>(n.accepted), static_cast<long long>(n.findings));
  // A fuzzer whose mutations all load has stopped mutating (or its loader checks nothing):
  // it must not pass empty.
  CHECK_MESSAGE(n.refused > 0, what, ": no case was refused in ", n.cases, " cases");
  return n;
}

}  // namespace attend::test
