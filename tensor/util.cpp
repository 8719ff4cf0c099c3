#include "tensor/util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "tensor/error.h"

namespace attend {

namespace fs = std::filesystem;

int open_regular_file(const fs::path& path, size_t* size) {
  const std::string p = path.string();
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ATTEND_CHECK(err != ENOENT, p, ": cannot open: no such file");
    throw Error(str(p, ": cannot open for reading: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error(str(p, dir ? ": is a folder, expected a file"
                           : ": not a regular file (a FIFO, device or socket); expected a file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

std::string read_file(const fs::path& path) {
  std::error_code ec;
  ATTEND_CHECK(fs::exists(fs::symlink_status(path, ec)), path.string(), ": no such file");
  size_t size = 0;
  const int fd = open_regular_file(path, &size);
  std::string s;
  try {
    s.resize(size);
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, s.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(str(path.string(), n == 0 ? ": changed size while being read"
                                            : str(": read failed: ", std::strerror(err))));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return s;
}

std::string printable(std::string_view bytes, size_t max) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (bytes.size() > max) out += "...";
  return out;
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  ATTEND_CHECK(fd >= 0, p.string(), ": cannot open to sync: ", std::strerror(errno));
  const int r = ::fsync(fd);
  ::close(fd);
  ATTEND_CHECK(r == 0, p.string(), ": fsync failed: ", std::strerror(errno));
}

void write_file_atomic(const fs::path& path, std::string_view bytes, Durability durability) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  ATTEND_CHECK(fd >= 0, tmp.string(), ": cannot create: ", std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(str(tmp.string(), ": ", what, ": ", std::strerror(err)));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed (disk full?)");
    done += static_cast<size_t>(n);
  }
  if (durability == Durability::RenameAndFsync && ::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(str(tmp.string(), ": close failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(
        str(path.string(), ": cannot rename the written file into place: ", std::strerror(err)));
  }
  if (durability == Durability::RenameAndFsync) {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    fsync_path(dir, true);
  }
}

namespace {
const std::string kInsideStage = ".attend-staging.";
}  // namespace

StagedFolder::StagedFolder(const fs::path& out, const std::string& what,
                           bool (*owns)(const std::string&))
    : what_(what) {
  std::error_code ec;
  // Absolute, so that "." or "dir/.." name a folder that can be swapped.
  out_ = fs::absolute(out, ec).lexically_normal();
  ATTEND_CHECK(!ec, what, ": ", out.string(), ": ", ec.message());
  if (out_.filename().empty()) out_ = out_.parent_path();  // "dir/" -> "dir"
  const fs::file_status st = fs::symlink_status(out_, ec);
  bool empty = false;
  if (fs::exists(st)) {
    ATTEND_CHECK(!fs::is_symlink(st), what, ": ", out.string(),
                 " is a symbolic link; give the folder itself");
    ATTEND_CHECK(fs::is_directory(st), what, ": ", out.string(), " exists and is not a folder");
    empty = true;
    for (const auto& e : fs::directory_iterator(out_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(kInsideStage, 0) == 0) continue;  // an interrupted fill's stage
      empty = false;
      ATTEND_CHECK(owns(name), what, ": ", out.string(), " holds ", name, ", which ", what,
                   " did not write; choose a new or empty folder");
    }
    ATTEND_CHECK(!ec, what, ": ", out.string(), ": cannot list: ", ec.message());
  } else {
    const fs::path parent = out_.parent_path();
    fs::create_directories(parent, ec);
    ATTEND_CHECK(!ec, what, ": cannot create ", parent.string(), ", the folder --out ",
                 out.string(), " goes in: ", ec.message());
  }
  inside_ = empty;
  if (inside_) {
    stage_ = out_ / (kInsideStage + std::to_string(::getpid()));
  } else {
    stage_ = out_;
    stage_ += ".staging." + std::to_string(::getpid());
  }
  fs::remove_all(stage_, ec);
  ATTEND_CHECK(::mkdir(stage_.c_str(), 0700) == 0, what, ": cannot create a folder beside ",
               out.string(), " (", stage_.string(), "): ", std::strerror(errno));
}

StagedFolder::~StagedFolder() {
  std::error_code ec;
  if (!committed_) fs::remove_all(stage_, ec);
}

void StagedFolder::commit() {
  std::error_code ec;
  if (inside_) {
    // out_ was empty: move each file in, then drop the stage.
    for (const auto& e : fs::directory_iterator(stage_, ec)) {
      const fs::path to = out_ / e.path().filename();
      ATTEND_CHECK(::rename(e.path().c_str(), to.c_str()) == 0, to.string(),
                   ": cannot move into place: ", std::strerror(errno));
    }
    ATTEND_CHECK(!ec, stage_.string(), ": cannot list: ", ec.message());
    ::rmdir(stage_.c_str());
    committed_ = true;
    return;
  }
  ::chmod(stage_.c_str(), 0755);
  if (!fs::exists(fs::symlink_status(out_, ec))) {
    ATTEND_CHECK(::rename(stage_.c_str(), out_.c_str()) == 0, out_.string(),
                 ": cannot move the new folder into place: ", std::strerror(errno));
  } else {
    ATTEND_CHECK(
        ::renameat2(AT_FDCWD, stage_.c_str(), AT_FDCWD, out_.c_str(), RENAME_EXCHANGE) == 0,
        out_.string(), ": cannot swap in the new folder: ", std::strerror(errno));
    fs::remove_all(stage_, ec);  // now the old folder
  }
  committed_ = true;
}

namespace {
// The text as an error message shows it: at most 60 characters.
std::string shown(const std::string& t) { return t.size() > 60 ? t.substr(0, 60) + "..." : t; }
}  // namespace

MappedFile::MappedFile(const fs::path& path) {
  const int fd = open_regular_file(path, &size_);
  if (size_ > 0) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) map_ = nullptr;
  }
  const int err = errno;
  ::close(fd);
  ATTEND_CHECK(size_ == 0 || map_ != nullptr, path.string(), ": cannot memory-map: ",
               std::strerror(err));
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

int64_t parse_int(const std::string& text, const std::string& what) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(first, end, v);
  ATTEND_CHECK(ec == std::errc() && p == end && !text.empty(), what, ": expected an integer, got '",
               shown(text), "'");
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  double v = 0;
  const char* end = text.data() + text.size();
  const char* first = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(first, end, v);
  ATTEND_CHECK(ec == std::errc() && p == end && !text.empty(), what, ": expected a number, got '",
               shown(text), "'");
  ATTEND_CHECK(std::isfinite(v), what, ": expected a finite number, got '", shown(text), "'");
  return v;
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

}  // namespace attend

namespace attend {

namespace {

using Words32 = uint32_t __attribute__((vector_size(64)));
using Words64 = uint64_t __attribute__((vector_size(64)));

// Words: 64 bytes of T's bit patterns; kExponent: T's exponent field.
template <typename T, typename Words, auto kExponent>
bool all_finite_impl(const T* p, int64_t n) {
  constexpr int64_t kLanes = 64 / sizeof(T);
  Words bad = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Words w;
    std::memcpy(&w, p + i, sizeof w);
    bad |= (w & kExponent) == kExponent;
  }
  bool ok = true;
  for (int64_t l = 0; l < kLanes; ++l) ok &= bad[l] == 0;
  for (; i < n; ++i) ok &= std::isfinite(p[i]);
  return ok;
}

}  // namespace

bool all_finite(const float* p, int64_t n) {
  return all_finite_impl<float, Words32, 0x7f800000u>(p, n);
}
bool all_finite(const double* p, int64_t n) {
  return all_finite_impl<double, Words64, 0x7ff0000000000000ull>(p, n);
}

// XXH64 from its specification (xxhash.h's XXH64 section, doc/xxhash_spec.md): five odd
// primes; each lane takes its 8-byte words as acc = rotl(acc + w P2, 31) P1; the lanes are
// merged, the total length added, the last < 32 bytes mixed in 8, 4 and 1 at a time, and
// the result avalanched.
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull,
                   kP5 = 0x27D4EB2F165667C5ull;
static_assert(std::endian::native == std::endian::little, "XXH64 reads little-endian words");

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t word64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
inline uint64_t word32(const unsigned char* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
inline uint64_t lane_round(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }
inline uint64_t merge(uint64_t h, uint64_t lane) {
  return (h ^ lane_round(0, lane)) * kP1 + kP4;
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed) {
  lane_[0] = seed + kP1 + kP2;
  lane_[1] = seed + kP2;
  lane_[2] = seed;
  lane_[3] = seed - kP1;
}

void Xxh64::add(const void* data, size_t n) {
  if (n == 0) return;  // data may be null then
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (held_n_ > 0) {  // finish the held stripe first
    const size_t take = std::min(n, 32 - held_n_);
    std::memcpy(held_ + held_n_, p, take);
    held_n_ += take, p += take, n -= take;
    if (held_n_ < 32) return;
    for (int l = 0; l < 4; ++l) lane_[l] = lane_round(lane_[l], word64(held_ + 8 * l));
    held_n_ = 0;
  }
  uint64_t a = lane_[0], b = lane_[1], c = lane_[2], d = lane_[3];
  for (; n >= 32; p += 32, n -= 32) {
    a = lane_round(a, word64(p));
    b = lane_round(b, word64(p + 8));
    c = lane_round(c, word64(p + 16));
    d = lane_round(d, word64(p + 24));
  }
  lane_[0] = a, lane_[1] = b, lane_[2] = c, lane_[3] = d;
  std::memcpy(held_, p, n);
  held_n_ = n;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(lane_[0], 1) + rotl(lane_[1], 7) + rotl(lane_[2], 12) + rotl(lane_[3], 18);
    for (const uint64_t lane : lane_) h = merge(h, lane);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = held_;
  size_t n = held_n_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ lane_round(0, word64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ word32(p) * kP1, 23) * kP2 + kP3;
    p += 4, n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ *p * kP5, 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace attend
