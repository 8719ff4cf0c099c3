#include "io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/half.h"
#include "tensor/kernels.h"
#include "tensor/quant.h"

namespace attend::io {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int64_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

// Bytes of one scalar value type; 0 for string and array.
uint64_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean:
      return 1;
    case GgufType::u16:
    case GgufType::i16:
      return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32:
      return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64:
      return 8;
    default:
      return 0;
  }
}

bool known_type(uint32_t t) { return t <= 12; }

// Bytes a tensor of `type` with ne[0] = ne0 and `count` elements takes ("" when it fits).
std::string tensor_bytes(GgmlType type, int64_t ne0, uint64_t count, uint64_t& bytes) {
  switch (type) {
    case GgmlType::f32:
      bytes = count * 4;
      return "";
    case GgmlType::f16:
    case GgmlType::bf16:
      bytes = count * 2;
      return "";
    case GgmlType::q8_0:
      if (ne0 % quant::kQ8Block != 0)
        return str("is q8_0 with ne[0] = ", ne0, ", not a multiple of 32");
      bytes = count / quant::kQ8Block * quant::kQ8BlockBytes;
      return "";
  }
  return "has an unknown type";
}

// Reads the header with every length checked against what remains of the file.
class Cursor {
 public:
  Cursor(const unsigned char* p, size_t n, std::string file)
      : p_(p), n_(n), file_(std::move(file)) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(str(file_, ": ", why, " (at byte ", pos_, ")"));
  }
  void need(uint64_t bytes, const std::string& what) const {
    if (bytes > left())
      fail(str(what, " needs ", bytes, " bytes, ", left(), " remain in the file"));
  }
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + "'s length");
    need(len, str(what, " (length ", len, ")"));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  // A count of items of at least `min_bytes` each, checked against what remains.
  uint64_t count(const std::string& what, uint64_t min_bytes) {
    const uint64_t n = get<uint64_t>(what);
    if (min_bytes > 0 && n > left() / min_bytes)
      fail(str(what, " is ", n, "; the ", left(), " bytes that remain hold at most ",
               left() / min_bytes));
    return n;
  }

 private:
  const unsigned char* p_;
  size_t n_, pos_ = 0;
  std::string file_;
};

double scalar_number(Cursor& c, GgufType t, const std::string& what) {
  switch (t) {
    case GgufType::u8:
      return c.get<uint8_t>(what);
    case GgufType::i8:
      return c.get<int8_t>(what);
    case GgufType::u16:
      return c.get<uint16_t>(what);
    case GgufType::i16:
      return c.get<int16_t>(what);
    case GgufType::u32:
      return c.get<uint32_t>(what);
    case GgufType::i32:
      return c.get<int32_t>(what);
    case GgufType::f32:
      return c.get<float>(what);
    case GgufType::boolean:
      return c.get<uint8_t>(what) != 0;
    case GgufType::u64:
      return static_cast<double>(c.get<uint64_t>(what));
    case GgufType::i64:
      return static_cast<double>(c.get<int64_t>(what));
    case GgufType::f64:
      return c.get<double>(what);
    default:
      c.fail(str(what, ": not a number type"));
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& key) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::u8:
      v.u = c.get<uint8_t>(key);
      break;
    case GgufType::u16:
      v.u = c.get<uint16_t>(key);
      break;
    case GgufType::u32:
      v.u = c.get<uint32_t>(key);
      break;
    case GgufType::u64:
      v.u = c.get<uint64_t>(key);
      break;
    case GgufType::boolean:
      v.u = c.get<uint8_t>(key) != 0;
      break;
    case GgufType::i8:
      v.i = c.get<int8_t>(key);
      break;
    case GgufType::i16:
      v.i = c.get<int16_t>(key);
      break;
    case GgufType::i32:
      v.i = c.get<int32_t>(key);
      break;
    case GgufType::i64:
      v.i = c.get<int64_t>(key);
      break;
    case GgufType::f32:
      v.f = c.get<float>(key);
      break;
    case GgufType::f64:
      v.f = c.get<double>(key);
      break;
    case GgufType::string:
      v.s = c.string(key);
      break;
    case GgufType::array: {
      const uint32_t e = c.get<uint32_t>(key + "'s element type");
      if (!known_type(e)) c.fail(str(key, ": array element type ", e, " is not a GGUF type"));
      v.elem = static_cast<GgufType>(e);
      if (v.elem == GgufType::array) c.fail(str(key, ": an array of arrays (not read)"));
      const bool strings = v.elem == GgufType::string;
      const uint64_t n = c.count(key + "'s element count", strings ? 8 : scalar_bytes(v.elem));
      if (strings) {
        v.strings.reserve(n);
        for (uint64_t k = 0; k < n; ++k) v.strings.push_back(c.string(key));
      } else {
        v.numbers.reserve(n);
        for (uint64_t k = 0; k < n; ++k) v.numbers.push_back(scalar_number(c, v.elem, key));
      }
      break;
    }
  }
  return v;
}

void put_bytes(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <class T>
void put(std::string& out, T v) {
  put_bytes(out, &v, sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_value(std::string& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::u32:
      put<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case GgufType::u64:
      put<uint64_t>(out, v.u);
      break;
    case GgufType::i32:
      put<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case GgufType::f32:
      put<float>(out, static_cast<float>(v.f));
      break;
    case GgufType::boolean:
      put<uint8_t>(out, v.u ? 1 : 0);
      break;
    case GgufType::string:
      put_string(out, v.s);
      break;
    case GgufType::array:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem));
      if (v.elem == GgufType::string) {
        put<uint64_t>(out, v.strings.size());
        for (const std::string& s : v.strings) put_string(out, s);
      } else {
        put<uint64_t>(out, v.numbers.size());
        for (const double d : v.numbers) {
          if (v.elem == GgufType::i32)
            put<int32_t>(out, static_cast<int32_t>(d));
          else if (v.elem == GgufType::f32)
            put<float>(out, static_cast<float>(d));
          else
            ATTEND_INTERNAL_CHECK(false, "gguf: writing arrays of ", gguf_type_name(v.elem));
        }
      }
      break;
    default:
      ATTEND_INTERNAL_CHECK(false, "gguf: writing a ", gguf_type_name(v.type));
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

std::string ggml_type_name(uint32_t type) {
  // ggml.h's enum ggml_type, by id (ids 4 and 5 were removed; 31-33 are retired).
  static const char* names[] = {"f32",   "f16",   "q4_0",    "q4_1",   nullptr,   nullptr, "q5_0",
                                "q5_1",  "q8_0",  "q8_1",    "q2_K",   "q3_K",    "q4_K",  "q5_K",
                                "q6_K",  "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl",
                                "iq3_s", "iq2_s", "iq4_xs",  "i8",     "i16",     "i32",   "i64",
                                "f64",   "iq1_m", "bf16",    nullptr,  nullptr,   nullptr, "tq1_0",
                                "tq2_0", nullptr, nullptr,   nullptr,  "mxfp4"};
  if (type < sizeof(names) / sizeof(names[0]) && names[type]) return names[type];
  return str("type ", type);
}

GgmlType ggml_type_from(const std::string& w) {
  if (w == "f32") return GgmlType::f32;
  if (w == "f16") return GgmlType::f16;
  if (w == "bf16") return GgmlType::bf16;
  if (w == "q8_0") return GgmlType::q8_0;
  throw Error(str("expected f32, f16, bf16 or q8_0, got '", printable(w), "'"));
}

GgufValue GgufValue::of_u32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::u32;
  r.u = v;
  return r;
}
GgufValue GgufValue::of_f32(float v) {
  GgufValue r;
  r.type = GgufType::f32;
  r.f = v;
  return r;
}
GgufValue GgufValue::of_bool(bool v) {
  GgufValue r;
  r.type = GgufType::boolean;
  r.u = v;
  return r;
}
GgufValue GgufValue::of_string(std::string v) {
  GgufValue r;
  r.type = GgufType::string;
  r.s = std::move(v);
  return r;
}
GgufValue GgufValue::of_strings(std::vector<std::string> v) {
  GgufValue r;
  r.type = GgufType::array;
  r.elem = GgufType::string;
  r.strings = std::move(v);
  return r;
}
GgufValue GgufValue::of_i32s(const std::vector<int32_t>& v) {
  GgufValue r;
  r.type = GgufType::array;
  r.elem = GgufType::i32;
  r.numbers.assign(v.begin(), v.end());
  return r;
}
GgufValue GgufValue::of_f32s(const std::vector<float>& v) {
  GgufValue r;
  r.type = GgufType::array;
  r.elem = GgufType::f32;
  r.numbers.assign(v.begin(), v.end());
  return r;
}

Shape GgufTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }

GgufFile::GgufFile(const fs::path& path) : path_(path) {
  const std::string p = path.string();
  map_ = std::make_unique<MappedFile>(path);
  Cursor c(map_->data(), map_->size(), p);
  if (map_->size() < 24 || c.get<uint32_t>("magic") != kMagic)
    throw Error(str(p, ": not a GGUF file (expected the magic \"GGUF\" and a 24-byte header)"));
  version_ = c.get<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.fail(str("GGUF version ", version_, " is not read (2 and 3 are)"));
  // The smallest tensor info: an empty name, 1 dimension, type, offset (8+4+8+4+8 bytes);
  // the smallest key-value: an empty key, the type, one byte.
  const uint64_t n_tensors = c.count("tensor_count", 32);
  const uint64_t n_kv = c.count("kv_count", 13);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string(str("key ", k));
    const uint32_t t = c.get<uint32_t>(str("key '", printable(key), "''s type"));
    if (!known_type(t))
      c.fail(str("key '", printable(key), "' has value type ", t, ", not a GGUF type"));
    GgufValue v = read_value(c, static_cast<GgufType>(t), str("key '", printable(key), "'"));
    if (!index_.emplace(key, metadata_.size()).second)
      c.fail(str("key '", printable(key), "' appears twice"));
    metadata_.emplace_back(std::move(key), std::move(v));
  }
  uint64_t alignment = 32;
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::u32 || a->u == 0 || (a->u & (a->u - 1)) != 0)
      c.fail(str("general.alignment must be a u32 power of two, got a ", gguf_type_name(a->type),
                 " ", a->u));
    alignment = a->u;
  }
  std::vector<std::pair<uint64_t, std::string>> order;  // offset, name
  for (uint64_t k = 0; k < n_tensors; ++k) {
    std::string name = c.string(str("tensor ", k, "'s name"));
    const std::string what = str("tensor '", printable(name), "'");
    const uint32_t n_dims = c.get<uint32_t>(what + "'s n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      c.fail(str(what, " has n_dims ", n_dims, "; expected 1 to 4"));
    GgufTensorInfo info;
    uint64_t count = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.get<uint64_t>(what + "'s ne");
      if (ne < 1 || ne > kMaxElements || count > kMaxElements / ne)
        c.fail(str(what, " has ne[", d, "] = ", ne,
                   "; each must be >= 1 and their product below 2^40"));
      count *= ne;
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint32_t type = c.get<uint32_t>(what + "'s type");
    if (type != 0 && type != 1 && type != 8 && type != 30)
      c.fail(str(what, " is ", ggml_type_name(type),
                 "; attend reads f32, f16, bf16 and q8_0 tensors (quantize to q8_0 or convert "
                 "to f16 with llama.cpp's tools first)"));
    info.type = static_cast<GgmlType>(type);
    info.offset = c.get<uint64_t>(what + "'s offset");
    const std::string bad = tensor_bytes(info.type, info.ne[0], count, info.bytes);
    if (!bad.empty()) c.fail(str(what, " ", bad));
    if (info.offset % alignment != 0)
      c.fail(
          str(what, "'s offset ", info.offset, " is not a multiple of the alignment ", alignment));
    order.emplace_back(info.offset, name);
    if (!tensors_.emplace(std::move(name), std::move(info)).second)
      c.fail(str(what, " appears twice"));
  }
  const uint64_t data_start = align_up(c.pos(), alignment);
  if (data_start > map_->size())
    c.fail(str("the data section would start at ", data_start, ", past the file's ", map_->size(),
               " bytes"));
  data_ = map_->data() + data_start;
  data_bytes_ = map_->size() - data_start;
  std::sort(order.begin(), order.end());
  uint64_t end = 0;
  std::string last;
  for (const auto& [offset, name] : order) {
    const GgufTensorInfo& info = tensors_.at(name);
    if (offset > data_bytes_ || info.bytes > data_bytes_ - offset)
      throw Error(str(p, ": tensor '", printable(name), "' (",
                      ggml_type_name(static_cast<uint32_t>(info.type)), ", offset ", offset, ", ",
                      info.bytes, " bytes) runs past the data section's ", data_bytes_, " bytes"));
    if (offset < end)
      throw Error(str(p, ": tensors '", printable(last), "' and '", printable(name), "' overlap"));
    end = offset + info.bytes;
    last = name;
  }
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &metadata_[it->second].second;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  ATTEND_CHECK(v, path_.string(), ": no key '", key, "'");
  switch (v->type) {
    case GgufType::u8:
    case GgufType::u16:
    case GgufType::u32:
    case GgufType::u64:
      return v->u;
    case GgufType::i8:
    case GgufType::i16:
    case GgufType::i32:
    case GgufType::i64:
      ATTEND_CHECK(v->i >= 0, path_.string(), ": ", key, " is ", v->i, "; expected >= 0");
      return static_cast<uint64_t>(v->i);
    default:
      throw Error(str(path_.string(), ": ", key, " is a ", gguf_type_name(v->type),
                      "; expected an integer"));
  }
}
uint64_t GgufFile::get_uint(const std::string& key, uint64_t fallback) const {
  return find(key) ? get_uint(key) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  ATTEND_CHECK(v, path_.string(), ": no key '", key, "'");
  if (v->type == GgufType::f32 || v->type == GgufType::f64) return v->f;
  return static_cast<double>(get_uint(key));
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  ATTEND_CHECK(v, path_.string(), ": no key '", key, "'");
  ATTEND_CHECK(v->type == GgufType::string, path_.string(), ": ", key, " is a ",
               gguf_type_name(v->type), "; expected a string");
  return v->s;
}

const GgufValue& GgufFile::get_array(const std::string& key, GgufType elem) const {
  const GgufValue* v = find(key);
  ATTEND_CHECK(v, path_.string(), ": no key '", key, "'");
  ATTEND_CHECK(v->type == GgufType::array && v->elem == elem, path_.string(), ": ", key, " is a ",
               gguf_type_name(v->type), v->type == GgufType::array ? " of " : "",
               v->type == GgufType::array ? gguf_type_name(v->elem) : "", "; expected an array of ",
               gguf_type_name(elem));
  return *v;
}

Tensor GgufFile::read(const std::string& name) const {
  auto it = tensors_.find(name);
  ATTEND_CHECK(it != tensors_.end(), path_.string(), ": no tensor '", printable(name), "'");
  const GgufTensorInfo& info = it->second;
  Tensor t = empty(info.shape(), DType::F32);
  float* out = t.data<float>();
  const unsigned char* src = data_ + info.offset;
  const int64_t n = t.numel();
  switch (info.type) {
    case GgmlType::f32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      break;
    case GgmlType::f16:
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        out[i] = info.type == GgmlType::f16 ? half_to_float(v) : bf16_to_float(v);
      }
      break;
    case GgmlType::q8_0:
      quant::dequantize_q8_0(src, n, out);
      break;
  }
  return t;
}

void write_gguf(const fs::path& path, const GgufMetadata& metadata,
                const std::vector<GgufTensorOut>& tensors, uint32_t alignment) {
  ATTEND_INTERNAL_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf alignment ",
                        alignment);
  std::string head;
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors.size());
  put<uint64_t>(head, metadata.size() + (alignment != 32 ? 1 : 0));
  for (const auto& [key, v] : metadata) {
    put_string(head, key);
    put<uint32_t>(head, static_cast<uint32_t>(v.type));
    put_value(head, v);
  }
  if (alignment != 32) {
    put_string(head, "general.alignment");
    put<uint32_t>(head, static_cast<uint32_t>(GgufType::u32));
    put<uint32_t>(head, alignment);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const GgufTensorOut& t : tensors) {
    const Shape& s = t.values.shape();
    ATTEND_CHECK(!s.empty() && static_cast<int64_t>(s.size()) <= kMaxDims, path.string(),
                 ": tensor ", t.name, " has shape ", shape_str(s),
                 "; GGUF holds 1 to 4 dimensions");
    uint64_t bytes = 0;
    const std::string bad =
        tensor_bytes(t.type, s.back(), static_cast<uint64_t>(t.values.numel()), bytes);
    ATTEND_CHECK(bad.empty(), path.string(), ": tensor ", t.name, " ", bad);
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(s.size()));
    for (auto d = s.rbegin(); d != s.rend(); ++d) put<uint64_t>(head, static_cast<uint64_t>(*d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    sizes.push_back(bytes);
    offset = align_up(offset + bytes, alignment);
  }
  std::string file = std::move(head);
  file.resize(align_up(file.size(), alignment), '\0');
  file.reserve(file.size() + offset);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor c = kernel::contiguous(tensors[k].values);
    const float* x = c.data<float>();
    const int64_t n = c.numel();
    for (int64_t i = 0; i < n; ++i)
      ATTEND_CHECK(
          std::isfinite(x[i]) && (tensors[k].type != GgmlType::f16 || std::fabs(x[i]) <= 65504.0f),
          path.string(), ": tensor ", tensors[k].name, " holds ", x[i], " at element ", i,
          tensors[k].type == GgmlType::f16 ? "; f16 stores finite values up to 65504"
                                           : "; only finite values are stored");
    const size_t at = file.size();
    file.resize(at + sizes[k]);
    auto* dst = reinterpret_cast<unsigned char*>(file.data() + at);
    switch (tensors[k].type) {
      case GgmlType::f32:
        std::memcpy(dst, x, static_cast<size_t>(n) * 4);
        break;
      case GgmlType::f16:
      case GgmlType::bf16:
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t h =
              tensors[k].type == GgmlType::f16 ? float_to_half(x[i]) : float_to_bf16(x[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      case GgmlType::q8_0:
        quant::quantize_q8_0_fast(x, n, dst);  // the reference's bytes
        break;
    }
    file.resize(align_up(file.size(), alignment), '\0');
  }
  write_file_atomic(path, file);
}

}  // namespace attend::io
