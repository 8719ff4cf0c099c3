#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::io {

namespace fs = std::filesystem;

namespace {
size_t dtype_bytes(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}
}  // namespace

namespace {

// One header entry, checked: "" or what is wrong with it.
std::string parse_entry(const nlohmann::json& v, size_t data_bytes, SafetensorsEntry& e) {
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
      !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
    return "expected {dtype, shape, data_offsets: [begin, end]}";
  e.dtype = v["dtype"].get<std::string>();
  const size_t width = dtype_bytes(e.dtype);
  if (width == 0) return str("dtype ", e.dtype, " is not supported (F32, F16, BF16)");
  uint64_t count = 1;
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40))
      return "shape entries must be integers below 2^40";
    const uint64_t k = d.get<uint64_t>();
    if (k != 0 && count > (uint64_t{1} << 50) / k) return "shape overflows";
    count *= k;
    e.shape.push_back(static_cast<int64_t>(k));
  }
  for (const auto& o : v["data_offsets"])
    if (!o.is_number_unsigned()) return "data_offsets must be non-negative integers";
  e.begin = v["data_offsets"][0].get<uint64_t>();
  e.end = v["data_offsets"][1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_bytes)
    return str("data_offsets [", e.begin, ", ", e.end, ") outside the data's ", data_bytes,
               " bytes");
  if (e.end - e.begin != count * width)
    return str("shape ", shape_str(e.shape), " of ", e.dtype, " needs ", count * width,
               " bytes, data_offsets give ", e.end - e.begin);
  return "";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  const std::string p = path.string();
  map_ = std::make_unique<MappedFile>(path);
  const size_t file_bytes = map_->size();
  ATTEND_CHECK(file_bytes >= 8, p, ": ", file_bytes,
               " bytes is too short for safetensors (8-byte header length)");
  const unsigned char* base = map_->data();
  auto fail = [&](const std::string& why) { throw Error(p + ": " + why); };
  uint64_t n = 0;
  std::memcpy(&n, base, 8);
  if (n > file_bytes - 8 || n > (uint64_t{100} << 20))
    fail(str("header length ", n, " does not fit the file's ", file_bytes,
             " bytes (or exceeds 100 MiB)"));
  data_ = base + 8 + n;
  data_bytes_ = file_bytes - 8 - n;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(base + 8), n));
  } catch (const nlohmann::json::exception& e) {
    fail(str("the header is not valid JSON: ", e.what()));
  }
  if (!h.is_object()) fail("the header is not a JSON object");
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    SafetensorsEntry e;
    const std::string problem = parse_entry(v, data_bytes_, e);
    if (!problem.empty()) fail("tensor '" + name + "': " + problem);
    ranges.emplace_back(e.begin, e.end);
    entries_[name] = std::move(e);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail("two tensors' data_offsets overlap");
}

SafetensorsFile::~SafetensorsFile() = default;

Tensor SafetensorsFile::read(const std::string& name) const {
  auto it = entries_.find(name);
  ATTEND_CHECK(it != entries_.end(), path_.string(), ": no tensor '", name, "'");
  const SafetensorsEntry& e = it->second;
  Tensor t = empty(e.shape, DType::F32);
  float* out = t.data<float>();
  const unsigned char* src = data_ + e.begin;
  const int64_t n = t.numel();
  if (e.dtype == "F32") {
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = e.dtype == "F16" ? half_to_float(v) : bf16_to_float(v);
    }
  }
  return t;
}

void write_safetensors(const fs::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& dtype) {
  ATTEND_CHECK(dtype == "F32" || dtype == "BF16" || dtype == "F16", path.string(),
               ": cannot write dtype ", dtype, " (F32, BF16 or F16)");
  const size_t width = dtype == "F32" ? 4 : 2;
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t offset = 0;
  std::vector<Tensor> data;
  for (const auto& [name, t] : tensors) {
    Tensor c = kernel::contiguous(kernel::cast(t, DType::F32));
    const size_t bytes = static_cast<size_t>(c.numel()) * width;
    h[name] = {{"dtype", dtype}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.reserve(out.size() + offset);
  for (const Tensor& c : data) {
    if (width == 4) {
      out.append(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * 4);
      continue;
    }
    const float* p = c.data<float>();
    const int64_t n = c.numel();
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t v = dtype == "BF16" ? float_to_bf16(p[i]) : float_to_half(p[i]);
      out.append(reinterpret_cast<const char*>(&v), 2);  // little-endian hosts only, as the reader
    }
  }
  write_file_atomic(path, out, Durability::RenameAndFsync);
}

SafetensorsFolder::SafetensorsFolder(const fs::path& dir) : dir_(dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  std::map<std::string, std::string> weight_map;  // tensor -> file, from an index
  const fs::path index_file = dir / "model.safetensors.index.json";
  if (fs::exists(index_file, ec)) {
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(read_file(index_file));
    } catch (const nlohmann::json::exception& e) {
      throw Error(str(index_file.string(), ": invalid JSON: ", e.what()));
    }
    ATTEND_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
                 index_file.string(), ": expected an object weight_map");
    std::set<std::string> names;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      ATTEND_CHECK(file.is_string(), index_file.string(), ": weight_map[", printable(tensor),
                   "] must be a file name");
      const std::string f = file.get<std::string>();
      ATTEND_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                   index_file.string(), ": weight_map[", printable(tensor), "] is '",
                   printable(f), "'; expected a file name in the folder");
      names.insert(f);
      weight_map[tensor] = f;
    }
    for (const std::string& f : names) files.push_back(dir / f);
  } else {
    files.push_back(dir / "model.safetensors");
  }
  for (const fs::path& f : files) {
    files_.push_back(std::make_unique<SafetensorsFile>(f));
    const SafetensorsFile* file = files_.back().get();
    for (const auto& [name, e] : file->entries()) {
      ATTEND_CHECK(entries_.emplace(name, Located{file, &e}).second, f.string(), ": tensor ",
                   printable(name), " is stored in two files");
      if (weight_map.empty()) continue;
      auto it = weight_map.find(name);
      ATTEND_CHECK(it != weight_map.end(), index_file.string(), ": ", f.filename().string(),
                   " holds ", printable(name), ", which the weight_map does not name");
      ATTEND_CHECK(it->second == f.filename().string(), index_file.string(), ": weight_map[",
                   printable(name), "] is '", printable(it->second), "' but ",
                   f.filename().string(), " holds it");
    }
  }
  for (const auto& [name, file] : weight_map)
    ATTEND_CHECK(entries_.count(name), index_file.string(), ": weight_map names ", printable(name),
                 " in '", printable(file), "', which does not hold it");
}

Tensor SafetensorsFolder::read(const std::string& name) const {
  auto it = entries_.find(name);
  ATTEND_CHECK(it != entries_.end(), dir_.string(), ": no tensor ", printable(name));
  return it->second.file->read(name);
}

}  // namespace attend::io
