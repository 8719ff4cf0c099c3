#include "io/hdf5_file.h"

#include <limits>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "tensor/half.h"
#include "tensor/kernels.h"
#include "tensor/util.h"

#include <unistd.h>

namespace attend::io::h5 {

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

void File::fail(const std::string& what) const { throw Error(str(path_, ": ", what)); }

namespace {

// Every component of an object's path is a hard link: a soft or external link could point
// anywhere, other files included, and attend writes none.
void check_hard_path(hid_t file, const std::string& name, const std::string& path) {
  for (size_t pos = 1; pos <= name.size();) {
    size_t next = name.find('/', pos);
    if (next == std::string::npos) next = name.size();
    const std::string part = name.substr(0, next);
    H5L_info_t link;
    if (H5Lexists(file, part.c_str(), H5P_DEFAULT) > 0 &&
        H5Lget_info(file, part.c_str(), &link, H5P_DEFAULT) >= 0 && link.type != H5L_TYPE_HARD)
      throw Error(str(path, ": ", part,
                      " is a soft or external link; attend reads only objects stored in the file"));
    pos = next + 1;
  }
}

// A dataset's data lies inside the file: no external raw-data files, no virtual dataset
// assembled from other files (either would read other files, /dev/zero included).
void check_stored_inside(hid_t dataset, const std::string& name, const std::string& path) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (dcpl.get() < 0) throw Error(str(path, ": cannot read the storage of dataset ", name));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL)
    throw Error(str(path, ": dataset ", name,
                    " is a virtual dataset (data from other files); attend reads only data "
                    "stored in the file"));
  if (H5Pget_external_count(dcpl.get()) != 0)
    throw Error(str(path, ": dataset ", name,
                    " keeps its data in external files; attend reads only data stored in the "
                    "file"));
}

}  // namespace

File File::create(const std::string& path) {
  silence_errors();
  File f;
  f.path_ = path;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.get() < 0 || H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
    f.fail("cannot set up the file access properties");
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) f.fail("cannot create the file (is the folder writable?)");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

File File::open(const std::string& path) {
  silence_errors();
  File f;
  f.path_ = path;
  size_t size = 0;
  ::close(open_regular_file(path, &size));  // no FIFO, device or folder reaches HDF5
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) f.fail("cannot open as HDF5: the file is missing, truncated or corrupt");
  f.file_ = Handle(id, H5Fclose);
  return f;
}

void File::close() {
  if (file_.close() < 0) fail("closing the file failed (disk full?)");
}

void File::create_group(const std::string& name) {
  Handle g(H5Gcreate2(file_.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail("cannot create group " + name);
}

bool File::exists(const std::string& name) const {
  // Each path component in turn: H5Lexists needs the parents to exist.
  size_t pos = 1;
  while (true) {
    size_t next = name.find('/', pos);
    std::string part = name.substr(0, next);
    if (H5Lexists(file_.get(), part.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}

std::vector<std::string> File::list(const std::string& group) const {
  check_hard_path(file_.get(), group, path_);
  Handle g(H5Gopen2(file_.get(), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail("missing group " + group);
  H5G_info_t info;
  if (H5Gget_info(g.get(), &info) < 0) fail("cannot read group " + group);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n =
        H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail("cannot list group " + group);
    std::string s(static_cast<size_t>(n), '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1,
                       H5P_DEFAULT);
    // Only hard links: a soft or external link could point anywhere, other files included.
    H5L_info_t link;
    const std::string full = group + "/" + s;
    if (H5Lget_info(file_.get(), full.c_str(), &link, H5P_DEFAULT) < 0 ||
        link.type != H5L_TYPE_HARD)
      fail(full + " is a soft or external link; a checkpoint holds its objects itself");
    names.push_back(s);
  }
  return names;
}

namespace {

hid_t file_type(DType d) {
  switch (d) {
    case DType::F32:
      return H5T_IEEE_F32LE;
    case DType::F64:
      return H5T_IEEE_F64LE;
    case DType::I32:
      return H5T_STD_I32LE;
    case DType::I64:
      return H5T_STD_I64LE;
    case DType::Bool:
      return H5T_STD_U8LE;
    case DType::BF16:  // written as f32 (write_tensor)
      break;
  }
  return -1;
}

hid_t mem_type(DType d) {
  switch (d) {
    case DType::F32:
      return H5T_NATIVE_FLOAT;
    case DType::F64:
      return H5T_NATIVE_DOUBLE;
    case DType::I32:
      return H5T_NATIVE_INT32;
    case DType::I64:
      return H5T_NATIVE_INT64;
    case DType::Bool:
      return H5T_NATIVE_UINT8;
    case DType::BF16:
      break;
  }
  return -1;
}

}  // namespace

void File::write_tensor(const std::string& name, const Tensor& t) {
  // A bf16 tensor (a frozen base, tensor/dtype.h) is written as its f32 values, checkpoints
  // holding f32 weights: widened a chunk of rows at a time, never whole (this runs in the
  // forked writer, whose memory is the trainer's plus what it allocates).
  const bool bf16 = t.dtype() == DType::BF16;
  const Tensor c = bf16 ? t : kernel::contiguous(t);
  const DType stored = bf16 ? DType::F32 : c.dtype();
  const int rank = std::max<int>(1, static_cast<int>(c.dim()));
  std::vector<hsize_t> dims(rank, 1), chunk(rank, 1);
  for (int i = 0; i < c.dim(); ++i) dims[i] = static_cast<hsize_t>(c.shape()[i]);
  // Chunks of about 1 MiB along the first dim (Fletcher32 needs a chunked layout).
  hsize_t row = dtype_size(stored);
  for (int i = 1; i < rank; ++i) row *= dims[i];
  for (int i = 0; i < rank; ++i) chunk[i] = std::max<hsize_t>(1, dims[i]);
  chunk[0] = std::max<hsize_t>(
      1, std::min<hsize_t>(dims[0], (hsize_t{1} << 20) / std::max<hsize_t>(1, row)));
  Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (space.get() < 0 || dcpl.get() < 0 || H5Pset_chunk(dcpl.get(), rank, chunk.data()) < 0 ||
      H5Pset_fletcher32(dcpl.get()) < 0)
    fail("cannot set up dataset " + name);
  Handle d(H5Dcreate2(file_.get(), name.c_str(), file_type(stored), space.get(), H5P_DEFAULT,
                      dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  if (d.get() < 0) fail("cannot create dataset " + name);
  if (c.numel() == 0) return;
  if (!bf16) {
    if (H5Dwrite(d.get(), mem_type(stored), H5S_ALL, H5S_ALL, H5P_DEFAULT, c.raw_data()) < 0)
      fail("cannot write dataset " + name + " (disk full?)");
    return;
  }
  const auto row_elems = static_cast<int64_t>(row / sizeof(float));
  kernel::for_each_f32_block(
      c, static_cast<int64_t>(chunk[0]) * row_elems, [&](const float* v, int64_t first, int64_t n) {
        std::vector<hsize_t> start(rank, 0), count(dims);
        start[0] = static_cast<hsize_t>(first / row_elems);
        count[0] = static_cast<hsize_t>(n / row_elems);
        Handle mem(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
        if (mem.get() < 0 ||
            H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                                nullptr) < 0 ||
            H5Dwrite(d.get(), mem_type(stored), mem.get(), space.get(), H5P_DEFAULT, v) < 0)
          fail("cannot write dataset " + name + " (disk full?)");
      });
}

Tensor File::read_tensor(const std::string& name, DType dtype) const {
  check_hard_path(file_.get(), name, path_);
  Handle d(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail("missing dataset " + name);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot read the shape of " + name);
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Shape shape(dims.begin(), dims.end());
  return read_tensor(name, dtype, shape);
}

Tensor File::read_tensor(const std::string& name, DType dtype, const Shape& shape) const {
  check_hard_path(file_.get(), name, path_);
  Handle d(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail("missing dataset " + name);
  check_stored_inside(d.get(), name, path_);
  Handle type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const bool want_float = is_floating(dtype);
  if ((want_float && cls != H5T_FLOAT) || (!want_float && cls != H5T_INTEGER) ||
      H5Tget_size(type.get()) != dtype_size(dtype))
    fail(str("dataset ", name, " has the wrong element type (expected ", dtype_name(dtype), ")"));
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::max(rank, 0));
  if (rank >= 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Shape got(dims.begin(), dims.end());
  Shape want = shape.empty() ? Shape{1} : shape;
  if (got != want)
    fail(str("dataset ", name, " has shape ", shape_str(got), ", expected ", shape_str(want)));
  // Before allocating: the byte size without overflow, and data actually stored for it
  // (we never compress, so a dataset declaring more than its storage is crafted).
  uint64_t bytes = dtype_size(dtype);
  for (hsize_t d : dims)
    if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d)
      fail(str("dataset ", name, " declares shape ", shape_str(got), ": its size overflows"));
    else
      bytes *= d;
  if (H5Dget_storage_size(d.get()) < bytes)
    fail(str("dataset ", name, " declares ", bytes, " bytes (shape ", shape_str(got),
             ") but stores ", H5Dget_storage_size(d.get())));
  Tensor t = empty(shape, dtype);
  Handle xfer(skip_checksums_ ? H5Pcreate(H5P_DATASET_XFER) : -1, H5Pclose);
  if (skip_checksums_ && (xfer.get() < 0 || H5Pset_edc_check(xfer.get(), H5Z_DISABLE_EDC) < 0))
    fail("cannot make a transfer property list for " + name);
  if (t.numel() > 0 && H5Dread(d.get(), mem_type(dtype), H5S_ALL, H5S_ALL,
                               skip_checksums_ ? xfer.get() : H5P_DEFAULT, t.raw_data()) < 0)
    fail("dataset " + name + " cannot be read: its checksum does not match (corrupt data)");
  return t;
}

void File::hard_link(const std::string& target, const std::string& link) {
  if (H5Lcreate_hard(file_.get(), target.c_str(), file_.get(), link.c_str(), H5P_DEFAULT,
                     H5P_DEFAULT) < 0)
    fail("cannot link " + link + " to " + target);
}

namespace {

Handle open_object(hid_t file, const std::string& object, const std::string& path) {
  check_hard_path(file, object, path);
  hid_t o = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  if (o < 0) throw Error(str(path, ": missing object ", object));
  return Handle(o, H5Oclose);
}

void write_attr(hid_t file, const std::string& path, const std::string& object,
                const std::string& name, hid_t ftype, hid_t mtype, const void* value) {
  Handle o = open_object(file, object, path);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(o.get(), name.c_str()) > 0) H5Adelete(o.get(), name.c_str());
  Handle a(H5Acreate2(o.get(), name.c_str(), ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (a.get() < 0 || H5Awrite(a.get(), mtype, value) < 0)
    throw Error(str(path, ": cannot write attribute ", object, "@", name));
}

// An attribute holding exactly one value: every read below goes through this check, so a
// crafted array attribute is refused before H5Aread could write past a scalar.
Handle open_attr(hid_t file, const std::string& path, const std::string& object,
                 const std::string& name) {
  Handle o = open_object(file, object, path);
  hid_t a = H5Aopen(o.get(), name.c_str(), H5P_DEFAULT);
  if (a < 0) throw Error(str(path, ": missing attribute ", object, "@", name));
  Handle h(a, H5Aclose);
  Handle space(H5Aget_space(a), H5Sclose);
  const H5S_class_t cls = space.get() < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(space.get());
  const hssize_t n = space.get() < 0 ? -1 : H5Sget_simple_extent_npoints(space.get());
  if (cls != H5S_SCALAR && !(cls == H5S_SIMPLE && n == 1))
    throw Error(str(path, ": attribute ", object, "@", name, " holds ", n,
                    " values; expected a single value"));
  return h;
}

}  // namespace

void File::set_attr(const std::string& o, const std::string& n, int64_t v) {
  write_attr(file_.get(), path_, o, n, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void File::set_attr(const std::string& o, const std::string& n, uint64_t v) {
  write_attr(file_.get(), path_, o, n, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void File::set_attr(const std::string& o, const std::string& n, double v) {
  write_attr(file_.get(), path_, o, n, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void File::set_attr(const std::string& o, const std::string& n, const std::string& v) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), std::max<size_t>(1, v.size()));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  std::string padded = v.empty() ? std::string(1, '\0') : v;
  write_attr(file_.get(), path_, o, n, t.get(), t.get(), padded.data());
}

char File::attr_kind(const std::string& o, const std::string& n) const {
  Handle a = open_attr(file_.get(), path_, o, n);
  Handle t(H5Aget_type(a.get()), H5Tclose);
  switch (H5Tget_class(t.get())) {
    case H5T_INTEGER:
      return 'i';
    case H5T_FLOAT:
      return 'f';
    case H5T_STRING:
      return 's';
    default:
      fail("attribute " + o + "@" + n + " has an unsupported type");
  }
}

int64_t File::attr_int(const std::string& o, const std::string& n) const {
  if (attr_kind(o, n) != 'i') fail("attribute " + o + "@" + n + " is not an integer");
  Handle a = open_attr(file_.get(), path_, o, n);
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) fail("cannot read attribute " + o + "@" + n);
  return v;
}

uint64_t File::attr_uint(const std::string& o, const std::string& n) const {
  if (attr_kind(o, n) != 'i') fail("attribute " + o + "@" + n + " is not an integer");
  Handle a = open_attr(file_.get(), path_, o, n);
  uint64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0) fail("cannot read attribute " + o + "@" + n);
  return v;
}

double File::attr_double(const std::string& o, const std::string& n) const {
  const char k = attr_kind(o, n);
  if (k != 'f' && k != 'i') fail("attribute " + o + "@" + n + " is not a number");
  Handle a = open_attr(file_.get(), path_, o, n);
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail("cannot read attribute " + o + "@" + n);
  return v;
}

std::string File::attr_string(const std::string& o, const std::string& n) const {
  if (attr_kind(o, n) != 's') fail("attribute " + o + "@" + n + " is not a string");
  Handle a = open_attr(file_.get(), path_, o, n);
  Handle t(H5Aget_type(a.get()), H5Tclose);
  if (H5Tis_variable_str(t.get()) > 0)
    fail("attribute " + o + "@" + n + " is a variable-length string");
  const size_t size = H5Tget_size(t.get());
  if (size == 0 || size > (size_t{1} << 20))
    fail(str("attribute ", o, "@", n, " is a string of ", size, " bytes (at most 1 MiB)"));
  std::string s(size, '\0');
  if (H5Aread(a.get(), t.get(), s.data()) < 0) fail("cannot read attribute " + o + "@" + n);
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::vector<std::string> File::attr_names(const std::string& o) const {
  Handle obj = open_object(file_.get(), o, path_);
  H5O_info_t info;
  if (H5Oget_info2(obj.get(), &info, H5O_INFO_NUM_ATTRS) < 0) fail("cannot read " + o);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    ssize_t len =
        H5Aget_name_by_idx(obj.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string s(static_cast<size_t>(len), '\0');
    H5Aget_name_by_idx(obj.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1,
                       H5P_DEFAULT);
    names.push_back(s);
  }
  return names;
}

uint64_t File::object_address(const std::string& name) const {
  H5O_info_t info;
  if (H5Oget_info_by_name2(file_.get(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    fail("cannot read " + name);
  return static_cast<uint64_t>(info.addr);
}

}  // namespace attend::io::h5
