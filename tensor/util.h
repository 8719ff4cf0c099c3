// Helpers every library shares: reading and atomically writing whole files, the FNV-1a 64
// hash, and strict number parsing for text that comes from a user (flags, files).
// Errors are attend::Error naming the path, or `what` (a flag, a file and field) and the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

// The whole file; throws naming the path if it cannot be opened or read, or is not a
// regular file once links are resolved (a FIFO, a device, a folder: refused without
// blocking or reading). The size comes from the opened file.
std::string read_file(const std::filesystem::path& path);

// Opens a file for reading only if it is a regular file (after links): O_NONBLOCK, so a
// FIFO never blocks the open, then fstat on the descriptor. Returns the descriptor
// (O_CLOEXEC, blocking again) and sets *size; throws naming the path.
int open_regular_file(const std::filesystem::path& path, size_t* size);

// Text for an error message: printable ASCII as itself, every other byte as \xNN, cut
// to `max` bytes of the input with "..." after.
std::string printable(std::string_view bytes, size_t max = 200);

// How far write_file_atomic goes to make the new content survive a crash.
enum class Durability {
  Rename,          // temporary file in the same folder, closed (checked), renamed over path
  RenameAndFsync,  // also fsync the file before the rename and the folder after it
};
// Readers see the old content or the new, never a mix. The temporary file is
// path + ".tmp.<pid>", created exclusively (O_EXCL, no symlink followed) and removed on
// any failure, so a full disk leaves the old file and no debris.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes,
                       Durability durability = Durability::Rename);
// An output folder built whole beside its destination and swapped in at the end, so the
// previous folder stays usable until the new one is complete and nothing is ever written
// through a link already in it. The stage is `out` + ".staging.<pid>", fresh (0700); files
// go into path(). commit() puts it in place of `out` in one step (renameat2's exchange
// where `out` exists, the old folder then removed); without commit() the stage is removed.
// `owns(name)` says which names in an existing `out` the command wrote: any other entry
// (a user's own file) refuses the folder, naming it, before anything is written.
// Missing parents of `out` are created (as `train --out` does). An existing empty `out`
// (".", a mount point, a folder made for it) is filled in place instead: the stage is made
// inside it (".attend-staging.<pid>") and its files moved in by commit(), so a folder that
// cannot be renamed still works, and a failure leaves it empty.
class StagedFolder {
 public:
  StagedFolder(const std::filesystem::path& out, const std::string& what,
               bool (*owns)(const std::string& name));
  ~StagedFolder();
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;
  const std::filesystem::path& path() const { return stage_; }
  void commit();

 private:
  std::filesystem::path out_, stage_;
  std::string what_;
  bool inside_ = false;  // the stage is inside an empty out_
  bool committed_ = false;
};

// MemAvailable from /proc/meminfo in bytes, or -1 where it is unknown.
int64_t available_memory_bytes();

// fsync a file or folder; throws naming it.
void fsync_path(const std::filesystem::path& path, bool directory);

// A whole regular file, memory-mapped read-only (no copy); unmapped when destroyed. Throws
// naming the path if it cannot be opened, is not a regular file, or cannot be mapped. An
// empty file maps to data() == nullptr, size() == 0.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

// FNV-1a 64: start with kFnvOffset and feed bytes in order.
inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Whether every value is finite (no exponent field all ones), in one pass of vectors
// without an early exit: loading a model checks every weight (std::isfinite a value at a
// time was 7% of starting `attend sample` on GPT-2 124M).
bool all_finite(const float* p, int64_t n);
bool all_finite(const double* p, int64_t n);

// XXH64 (Yann Collet's xxHash, 64-bit, as its specification defines it): the same bytes
// in pieces or whole give the same value. Four lanes of 8-byte words, independent of each
// other, so a core hashes several bytes a cycle (FNV-1a takes one byte per multiply's
// latency). Checked against the xxhsum program (tests/tensor/test_errors.cpp).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void add(const void* data, size_t n);
  uint64_t digest() const;  // of every byte added so far; more may follow

 private:
  uint64_t lane_[4];
  uint64_t seed_, total_ = 0;
  unsigned char held_[32];  // a stripe's start, until its 32 bytes are in
  size_t held_n_ = 0;
};
inline uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0) {
  Xxh64 h(seed);
  h.add(data, n);
  return h.digest();
}

// The whole text as a base-10 integer / a finite number, else Error
// "<what>: expected an integer, got '<text>'".
int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);

}  // namespace attend
#pragma GCC visibility pop
