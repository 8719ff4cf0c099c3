// safetensors, Hugging Face's tensor file format:
//
//   8 bytes    N, little-endian u64: the header's length
//   N bytes    JSON: {"<name>": {"dtype": "F32"|"F16"|"BF16"|..., "shape": [..],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
//   the rest   the tensors' bytes, little-endian, row-major; offsets count from here
//
// Reading memory-maps the file and checks everything the header declares before any
// tensor is made: the header's length against the file, each dtype (F32, F16 and BF16 are
// read, as f32), each shape (overflow-checked) against its byte range, the ranges inside
// the data and not overlapping. Errors name the file and the tensor.
#pragma once

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/half.h"
#include "tensor/tensor.h"
#include "tensor/util.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::io {

struct SafetensorsEntry {
  std::string dtype;  // as stored: F32, F16, BF16
  Shape shape;
  size_t begin = 0, end = 0;  // byte range in the data section
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor as f32 (F16 and BF16 converted).
  Tensor read(const std::string& name) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> map_;
  const unsigned char* data_ = nullptr;  // the data section
  size_t data_bytes_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A folder's weights as Hugging Face saves them: model.safetensors alone, or the shards that
// model.safetensors.index.json names in its weight_map (each a file name inside the folder).
// The index and the shards must agree: a tensor stored in two files, held by a shard the
// index does not name it in, or named in a file that does not hold it is refused, naming
// the index, the tensor and the files (Hugging Face's loader reads each tensor from the
// file the index names).
class SafetensorsFolder {
 public:
  explicit SafetensorsFolder(const std::filesystem::path& dir);
  SafetensorsFolder(const SafetensorsFolder&) = delete;
  SafetensorsFolder& operator=(const SafetensorsFolder&) = delete;
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  // Every stored tensor, by name.
  const std::map<std::string, Located>& entries() const { return entries_; }
  Tensor read(const std::string& name) const;  // as f32
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> entries_;
};

// Writes the tensors under their names as `dtype` (F32; BF16 and F16 rounded to nearest,
// ties to even), with the header padded to 8 bytes, atomically.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::string& dtype = "F32");

// The 16-bit float conversions live in tensor/half.h; io:: names kept for its callers.
using attend::bf16_to_float;
using attend::float_to_bf16;
using attend::float_to_half;
using attend::half_to_float;

}  // namespace attend::io
#pragma GCC visibility pop
