// GGUF, the file llama.cpp (and ollama, LM Studio, llama-cpp-python, node-llama-cpp) runs
// models from: the container only, metadata and a tensor table; which names and keys a
// model writes is convert/gguf_io.h's. Version 3 (version 2 is read too: the same layout),
// little-endian:
//
//   u32 magic "GGUF"   u32 version   u64 tensor_count   u64 kv_count
//   kv_count times:      string key, u32 value type, the value
//   tensor_count times:  string name, u32 n_dims (1..4), u64 ne[n_dims], u32 ggml type,
//                        u64 offset (from the data section's start, a multiple of the
//                        alignment)
//   padding to general.alignment (u32, a power of two; 32 when absent), then the data
//
// A string is a u64 length and that many bytes (no terminator). Value types: u8 0, i8 1,
// u16 2, i16 3, u32 4, i32 5, f32 6, bool 7, string 8, array 9 (u32 element type, u64
// count, the elements), u64 10, i64 11, f64 12. ne is ggml's order, the fastest-varying
// dimension first: the reverse of attend's shapes, so a Linear weight (out, in) is
// ne = [in, out] and a row of W is ggml's row.
//
// Tensor types read and written: F32 (0), F16 (1), Q8_0 (8: tensor/quant.h's blocks along
// ne[0], which must be a multiple of 32) and BF16 (30). A file holding any other type
// (K-quants, Q4_0, IQ types...) is refused when opened, naming the tensor and its type.
//
// Reading memory-maps the file and checks, before anything is sized from it: the magic and
// version; every count and length against the bytes that remain (so a huge count in a
// short file is refused, not allocated); nested arrays (refused: no model key uses them);
// duplicate keys and tensor names; n_dims, each ne >= 1 and their product (overflow
// checked); each tensor's byte range inside the data section, aligned, and no two
// overlapping. Errors name the file, and the key or tensor, and the value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/util.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::io {

enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* gguf_type_name(GgufType t);

enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };
// ggml's name for any type id ("q4_K", "iq2_xxs", ...; "type 77" for an unknown one).
std::string ggml_type_name(uint32_t type);
// f32, f16, bf16, q8_0 (attend's --dtype words); throws naming the word otherwise.
GgmlType ggml_type_from(const std::string& word);

// One metadata value: a number, a bool, a string, or an array of numbers or strings.
struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType elem = GgufType::u32;  // an array's element type
  uint64_t u = 0;                 // u8..u64, and bool
  int64_t i = 0;                  // i8..i64
  double f = 0;                   // f32, f64
  std::string s;
  std::vector<std::string> strings;  // an array of strings
  std::vector<double> numbers;       // an array of numbers (integers exact below 2^53)

  static GgufValue of_u32(uint32_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue of_strings(std::vector<std::string> v);
  static GgufValue of_i32s(const std::vector<int32_t>& v);
  static GgufValue of_f32s(const std::vector<float>& v);
};
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

struct GgufTensorInfo {
  std::vector<int64_t> ne;  // ggml's order: ne[0] varies fastest
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0, bytes = 0;  // within the data section
  Shape shape() const;             // attend's order: ne reversed
};

class GgufFile {
 public:
  explicit GgufFile(const std::filesystem::path& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  const GgufMetadata& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  // Typed reads of a key; each throws naming the file, the key, and what it holds instead.
  // `need` false: absent gives `fallback`.
  uint64_t get_uint(const std::string& key) const;
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double get_float(const std::string& key) const;  // f32, f64 (or an integer)
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  const GgufValue& get_array(const std::string& key, GgufType elem) const;

  const std::map<std::string, GgufTensorInfo>& tensors() const { return tensors_; }
  // A tensor as f32 in attend's shape (F16, BF16 converted; Q8_0 dequantized).
  Tensor read(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> map_;
  uint32_t version_ = 0;
  const unsigned char* data_ = nullptr;  // the data section
  uint64_t data_bytes_ = 0;
  GgufMetadata metadata_;
  std::map<std::string, size_t> index_;  // key -> metadata_ position
  std::map<std::string, GgufTensorInfo> tensors_;
};

// A tensor to write: attend's shape and f32 values, stored as `type` (rounded to nearest,
// ties to even, for F16 and BF16; Q8_0 blocks along the last dimension, which must be a
// multiple of 32). Values must be finite.
struct GgufTensorOut {
  std::string name;
  Tensor values;
  GgmlType type = GgmlType::f32;
};

// Writes a GGUF v3 file atomically (a temporary file renamed over `path`, never through a
// link), tensors in the order given, each aligned to `alignment` (32: general.alignment is
// written only when it differs). Throws naming the tensor for a value it cannot store.
void write_gguf(const std::filesystem::path& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorOut>& tensors, uint32_t alignment = 32);

}  // namespace attend::io
#pragma GCC visibility pop
