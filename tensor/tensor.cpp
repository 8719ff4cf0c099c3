#include "tensor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <iomanip>
#include <mutex>
#include <ostream>
#include <sstream>
#include <unordered_map>

namespace attend {

namespace {

// A cache of freed large buffers, by rounded size. A training step allocates the same
// sizes every step; without the cache each large buffer is a fresh mmap whose pages
// fault in again on first touch (measured: 3x slower for a (768,128)@(128,384) matmul
// on 2 threads). Buffers under kPoolMin go straight to malloc; the cache holds at most
// kPoolMaxBytes and frees beyond that. Never destroyed, so storages freed during static
// destruction still find it.
// Buffers of kMapMin and more are mapped from the system directly (mmap), so that a fresh
// one is known to be zeros without writing it: zeros() then leaves its pages untouched, and
// a model built to be overwritten by a checkpoint (GPT's Init::for_load) holds no memory
// for its matrices until they are written (GPT-2 124M: 497 MB).
class BufferPool {
 public:
  static constexpr size_t kPoolMin = 64 << 10;
  static constexpr size_t kMapMin = 1 << 20;
  static constexpr size_t kHugePage = kHugePageBytes, kHugeMin = kHugePageBytes;
  static constexpr size_t kPoolMaxBytes = size_t{1} << 30;

  static size_t round(size_t n) {
    if (n < kPoolMin) return std::max<size_t>(64, (n + 63) / 64 * 64);
    return (n + 4095) / 4096 * 4096;
  }

  // Fresh zeroed pages. From kHugeMin on, 2 MB aligned and marked MADV_HUGEPAGE, so that
  // where the kernel's transparent huge pages are on ("madvise" or "always") a first touch
  // maps 2 MB at a time: measured on a 2-core Zen 5 VM (2026-12-07), a 4 KB page's first
  // touch cost 10.4 us (its fault), MAP_POPULATE's 5.5 us, and a huge page 0.23 us for each
  // 4 KB it holds; a checkpoint read into fresh buffers faulted ~46 K times. The range is
  // exactly `bytes` (the slack around the aligned start unmapped), so munmap(p, bytes)
  // frees it. Where huge pages are off, madvise does nothing.
  static void* map(size_t bytes) {
    constexpr int kProt = PROT_READ | PROT_WRITE, kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (bytes < kHugeMin) {
      void* p = ::mmap(nullptr, bytes, kProt, kFlags, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return p;
    }
    void* raw = ::mmap(nullptr, bytes + kHugePage, kProt, kFlags, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto r = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t a = (r + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
    if (a > r) ::munmap(raw, a - r);
    ::munmap(reinterpret_cast<void*>(a + bytes), r + kHugePage - a);
    void* p = reinterpret_cast<void*>(a);
    ::madvise(p, bytes, MADV_HUGEPAGE);  // advice: its failure changes nothing but speed
    return p;
  }

  // *zero: set when the buffer is known to hold zeros (fresh from mmap).
  void* take(size_t bytes, bool* zero) {
    *zero = false;
    if (bytes >= kPoolMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    if (bytes >= kMapMin) {
      *zero = true;
      return map(bytes);
    }
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }

  void give(void* p, size_t bytes) {
    if (bytes >= kPoolMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + bytes <= kPoolMaxBytes) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    unmap_or_free(p, bytes);
  }

  // Frees every cached buffer; returns the bytes.
  size_t release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, list] : free_)
      for (void* p : list) unmap_or_free(p, bytes);
    free_.clear();
    const size_t n = cached_;
    cached_ = 0;
    return n;
  }

 private:
  static void unmap_or_free(void* p, size_t bytes) {
    if (bytes >= kMapMin)
      ::munmap(p, bytes);
    else
      std::free(p);
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

BufferPool& pool() {
  static BufferPool* p = new BufferPool();
  return *p;
}

}  // namespace

namespace {
std::atomic<size_t> g_live{0}, g_peak{0};
}  // namespace

Storage::Storage(size_t n) : nbytes(n) {
  data = pool().take(BufferPool::round(n), &zero);
  const size_t now = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

Storage::~Storage() {
  g_live.fetch_sub(nbytes, std::memory_order_relaxed);
  pool().give(data, BufferPool::round(nbytes));
}

size_t release_storage_cache() { return pool().release(); }

StorageStats storage_stats() {
  return {g_live.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}
void reset_storage_peak() { g_peak.store(g_live.load(std::memory_order_relaxed)); }

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

namespace {

int64_t element_offset(const Tensor& t, const std::vector<int64_t>& index) {
  ATTEND_CHECK(static_cast<int64_t>(index.size()) == t.dim(), "at: expected ", t.dim(),
               " indices for a tensor of shape ", shape_str(t.shape()), ", got ", index.size());
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    int64_t k = index[i] < 0 ? index[i] + t.shape()[i] : index[i];
    ATTEND_CHECK(k >= 0 && k < t.shape()[i], "at: index ", index[i], " is out of range for dim ", i,
                 " of size ", t.shape()[i]);
    off += k * t.strides()[i];
  }
  return off;
}

double read_as_double(const Tensor& t, int64_t off) {
  return dispatch_all(t.dtype(), [&]<typename T>() {
    return static_cast<double>(static_cast<const T*>(t.raw_data())[off]);
  });
}

}  // namespace

double Tensor::item() const {
  ATTEND_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ",
               shape_str(shape()));
  return read_as_double(*this, 0);
}

double Tensor::at(const std::vector<int64_t>& index) const {
  return read_as_double(*this, element_offset(*this, index));
}

void Tensor::set(const std::vector<int64_t>& index, double value) const {
  int64_t off = element_offset(*this, index);
  dispatch_all(dtype(),
               [&]<typename T>() { static_cast<T*>(raw_data())[off] = static_cast<T>(value); });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(numel());
  if (numel() == 0) return out;
  std::vector<int64_t> idx(dim(), 0);
  dispatch_all(dtype(), [&]<typename S>() {
    const S* p = static_cast<const S*>(raw_data());
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = 0;
      for (int64_t d = 0; d < dim(); ++d) off += idx[d] * strides()[d];
      out.push_back(static_cast<T>(p[off]));
      for (int64_t d = dim() - 1; d >= 0; --d) {
        if (++idx[d] < shape()[d]) break;
        idx[d] = 0;
      }
    }
  });
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

Tensor& Tensor::requires_grad_(bool on) {
  ATTEND_CHECK(!on || is_floating(dtype()),
               "requires_grad_: only floating tensors can require grad, got ", dtype_name(dtype()));
  ATTEND_CHECK(on || is_leaf(),
               "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()");
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& src) const {
  ATTEND_CHECK(!src.requires_grad() || src.is_leaf(), "set_data: source must be a leaf");
  impl_->storage = src.impl()->storage;
  impl_->shape = src.shape();
  impl_->strides = src.strides();
  impl_->offset = src.offset();
  impl_->dtype = src.dtype();
  if (impl_->grad && impl_->grad->dtype != src.dtype()) impl_->grad.reset();
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, DType dtype) {
  for (int64_t s : shape) ATTEND_CHECK(s >= 0, "empty: negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(numel(shape) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {
thread_local bool t_unwritten_zeros = false;
}  // namespace

UnwrittenZeros::UnwrittenZeros() : outer_(t_unwritten_zeros) { t_unwritten_zeros = true; }
UnwrittenZeros::~UnwrittenZeros() { t_unwritten_zeros = outer_; }

Tensor zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  // a buffer fresh from the system is zeros already: in an UnwrittenZeros scope its pages
  // stay untouched
  if (!(t_unwritten_zeros && t.impl()->storage->zero))
    std::memset(t.raw_data(), 0, t.numel() * dtype_size(dtype));
  return t;
}

Tensor full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value);
  });
  return t;
}

Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  ATTEND_CHECK(step != 0, "arange: step must be non-zero");
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  Tensor t = empty({n}, dtype);
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + i * step);
  });
  return t;
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  ATTEND_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "tensor: shape ",
               shape_str(shape), " holds ", numel(shape), " elements, got ", values.size(),
               " values");
  Tensor t = empty(shape, dtype);
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

// Printing: PyTorch-like nested brackets; a dim longer than 6 shows its first and last 3.
namespace {

void print_rec(std::ostream& os, const Tensor& t, std::vector<int64_t>& idx, int64_t d,
               int indent) {
  const int64_t n = t.shape()[d];
  const bool abbreviate = n > 6;
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (abbreviate && i == 3) {
      os << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - 3;
    }
    idx[d] = i;
    if (d + 1 == t.dim()) {
      double v = t.at(idx);
      if (is_floating(t.dtype())) {
        os << std::setw(10) << std::setprecision(4) << v;
      } else {
        os << static_cast<int64_t>(v);
      }
    } else {
      print_rec(os, t, idx, d + 1, indent + 1);
    }
    if (i + 1 < n) os << (d + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << ", requires_grad";
  os << ")\n";
  if (numel() == 0) {
    os << "[]";
  } else if (dim() == 0) {
    os << item();
  } else {
    std::vector<int64_t> idx(dim(), 0);
    print_rec(os, *this, idx, 0, 0);
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace attend
