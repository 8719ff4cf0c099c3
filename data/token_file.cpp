#include "data/token_file.h"

#include <cstring>
#include <fstream>

#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace fs = std::filesystem;

void write_token_file(const fs::path& path, const std::vector<int32_t>& tokens, int64_t vocab_size,
                      uint64_t tokenizer_hash) {
  ATTEND_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 32),
               "token file: invalid vocab_size ", vocab_size);
  const uint32_t width = vocab_size <= 65536 ? 2 : 4;
  const uint64_t count = tokens.size(), vocab = static_cast<uint64_t>(vocab_size);
  std::string buf(kTokenHeaderBytes + count * width, '\0');
  std::memcpy(buf.data(), kTokenMagic, 8);
  std::memcpy(buf.data() + 8, &kTokenFileVersion, 4);
  std::memcpy(buf.data() + 12, &width, 4);
  std::memcpy(buf.data() + 16, &count, 8);
  std::memcpy(buf.data() + 24, &vocab, 8);
  std::memcpy(buf.data() + 32, &tokenizer_hash, 8);
  char* body = buf.data() + kTokenHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ATTEND_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "token file: token ", tokens[i],
                 " at position ", i, " is out of range for vocab_size ", vocab_size);
    if (width == 2) {
      const uint16_t v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(body + 2 * i, &v, 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(tokens[i]);
      std::memcpy(body + 4 * i, &v, 4);
    }
  }
  write_file_atomic(path, std::string_view(buf.data(), buf.size()));
}

TokenFile::TokenFile(const fs::path& path) : path_(path), map_(std::make_unique<MappedFile>(path)) {
  const std::string p = path.string();
  ATTEND_CHECK(map_->size() >= 32, p, ": too short for a token file (", map_->size(),
               " bytes; the header alone is 32 or ", kTokenHeaderBytes, ")");
  const char* base = reinterpret_cast<const char*>(map_->data());
  const size_t file_bytes = map_->size();
  auto fail = [&](const std::string& why) { throw Error(p + ": " + why); };
  if (std::memcmp(base, kTokenMagic, 8) != 0)
    fail("not an attend token file (wrong magic; expected ATNDTOKS)");
  uint32_t version, width;
  uint64_t count, vocab;
  std::memcpy(&version, base + 8, 4);
  std::memcpy(&width, base + 12, 4);
  std::memcpy(&count, base + 16, 8);
  std::memcpy(&vocab, base + 24, 8);
  if (version != kTokenFileVersion && version != 1)
    fail(str("unsupported token file version ", version, " (this attend reads versions 1 and ",
             kTokenFileVersion, ")"));
  const size_t header = version == 1 ? 32 : kTokenHeaderBytes;
  if (file_bytes < header) fail(str("too short for a version ", version, " header"));
  if (version >= 2) std::memcpy(&tokenizer_hash_, base + 32, 8);
  if (width != 2 && width != 4) fail(str("invalid token width ", width, " (expected 2 or 4)"));
  if (vocab == 0 || (width == 2 && vocab > 65536))
    fail(str("invalid vocab_size ", vocab, " for ", width, "-byte tokens"));
  if (width == 4 && vocab > (uint64_t{1} << 31))
    fail(str("invalid vocab_size ", vocab, " (token ids are 32-bit signed: at most 2^31)"));
  // count is checked against the file before it is multiplied (a crafted count overflows).
  if (count > (file_bytes - header) / width || file_bytes != header + count * width)
    fail(str("truncated or padded: the header says ", count, " tokens of ", width, " bytes (",
             header + count * width, " bytes in all), the file has ", file_bytes, " bytes"));
  width_ = static_cast<int>(width);
  count_ = static_cast<int64_t>(count);
  vocab_size_ = static_cast<int64_t>(vocab);
  tokens_ = base + header;
  for (int64_t i = 0; i < count_; ++i) {
    if ((*this)[i] >= vocab_size_)
      fail(str("token ", (*this)[i], " at position ", i, " is out of range for vocab_size ",
               vocab_size_));
  }
}

TokenFile::~TokenFile() = default;

uint64_t TokenFile::content_hash() const { return fnv1a64(map_->data(), map_->size()); }

}  // namespace attend::data
