// Token files: a 40-byte header, then the tokens, little-endian.
//
//   offset  size  field
//   0       8     magic "ATNDTOKS"
//   8       4     format version (2)
//   12      4     token width in bytes: 2 when vocab_size <= 65536, else 4
//   16      8     token count N
//   24      8     vocab_size
//   32      8     the tokenizer's hash (data::tokenizer_hash): which tokenizer made the ids
//   40      N*w   the tokens (unsigned)
//
// Version 1 files (32-byte header, no tokenizer hash) are still read; their tokenizer
// hash reads as 0, "unknown".
// Reading memory-maps the file (no copy) and checks the header, the size (a truncated
// body is refused) and that every token is < vocab_size; errors name the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "tensor/util.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

inline constexpr char kTokenMagic[8] = {'A', 'T', 'N', 'D', 'T', 'O', 'K', 'S'};
inline constexpr uint32_t kTokenFileVersion = 2;
inline constexpr size_t kTokenHeaderBytes = 40;

// Written to a temporary name, then renamed over path. tokenizer_hash 0: unknown.
void write_token_file(const std::filesystem::path& path, const std::vector<int32_t>& tokens,
                      int64_t vocab_size, uint64_t tokenizer_hash = 0);

class TokenFile {
 public:
  explicit TokenFile(const std::filesystem::path& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  int64_t vocab_size() const { return vocab_size_; }
  int width() const { return width_; }
  int64_t operator[](int64_t i) const {
    return width_ == 2 ? static_cast<const uint16_t*>(tokens_)[i]
                       : static_cast<const uint32_t*>(tokens_)[i];
  }
  const std::filesystem::path& path() const { return path_; }
  uint64_t tokenizer_hash() const { return tokenizer_hash_; }  // 0: unknown
  // FNV-1a 64 of the whole file, to tell whether a resumed run sees the same data.
  uint64_t content_hash() const;

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> map_;
  const void* tokens_ = nullptr;
  int64_t count_ = 0, vocab_size_ = 0;
  uint64_t tokenizer_hash_ = 0;
  int width_ = 0;
};

}  // namespace attend::data
#pragma GCC visibility pop
