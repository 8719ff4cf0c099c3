// A thin RAII layer over HDF5's C API: the few calls checkpoints need, each checked, with
// errors that name the file and the object instead of dumping HDF5's error stack.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace attend::io::h5 {

// An hid_t closed by the function given with it.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id_ = o.id_, close_ = o.close_;
    o.id_ = -1;
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  // Closes now and reports failure (H5Fclose's result matters for a file being written).
  herr_t close() {
    herr_t r = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return r;
  }

 private:
  void reset() {
    if (id_ >= 0) close_(id_);
    id_ = -1;
  }
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Turns off HDF5's automatic error printing (once per process).
void silence_errors();

class File {
 public:
  // Create: latest file format (checksummed metadata). Open: read-only.
  static File create(const std::string& path);
  static File open(const std::string& path);
  void close();  // throws if HDF5 could not flush and close the file
  const std::string& path() const { return path_; }

  void create_group(const std::string& name);
  bool exists(const std::string& name) const;
  std::vector<std::string> list(const std::string& group) const;

  // Datasets: chunked, Fletcher32-checksummed, little-endian f32/f64/i32/i64/u8.
  void write_tensor(const std::string& name, const Tensor& t);
  // Reads checking the stored element type and shape first.
  Tensor read_tensor(const std::string& name, DType dtype, const Shape& shape) const;
  // From now on reads skip the datasets' Fletcher32 sums: for a caller that knows these
  // bytes were checked already (load's second read of a file its child process verified,
  // unchanged since: Fletcher32 was a fifth of starting `attend sample`).
  void skip_checksums() { skip_checksums_ = true; }
  Tensor read_tensor(const std::string& name, DType dtype) const;  // any shape
  void hard_link(const std::string& target, const std::string& link);
  // The file address of the object at `name`: equal for two hard links to one object.
  uint64_t object_address(const std::string& name) const;

  void set_attr(const std::string& object, const std::string& name, int64_t v);
  void set_attr(const std::string& object, const std::string& name, uint64_t v);
  void set_attr(const std::string& object, const std::string& name, double v);
  void set_attr(const std::string& object, const std::string& name, const std::string& v);
  int64_t attr_int(const std::string& object, const std::string& name) const;
  uint64_t attr_uint(const std::string& object, const std::string& name) const;
  double attr_double(const std::string& object, const std::string& name) const;
  std::string attr_string(const std::string& object, const std::string& name) const;
  // The class of a stored attribute: 'i' integer, 'f' float, 's' string.
  char attr_kind(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_names(const std::string& object) const;

 private:
  [[noreturn]] void fail(const std::string& what) const;
  Handle file_;
  std::string path_;
  bool skip_checksums_ = false;
};

}  // namespace attend::io::h5
