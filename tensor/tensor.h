// Tensor: a handle to an N-dimensional, strided view of shared storage.
//
// Storage is one 64-byte aligned buffer; views (reshape, transpose, narrow, expand, ...)
// share it and differ only in shape, strides and offset. Copying a Tensor copies the
// handle, not the data. This header holds data and metadata only: the differentiable
// operations live in autograd/ops.h, the raw kernels in tensor/kernels.h.
//
// The autograd fields (requires_grad, grad, grad_fn) live here so that every tensor can
// carry them, but the graph and the engine belong to autograd/: Tensor::backward is
// defined in autograd/engine.cpp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/shape.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

namespace autograd {
struct Node;
}

// An aligned buffer, freed with its last owner.
struct Storage;

// Bytes held by live storages (every tensor's buffer, and what ops keep for backward) now,
// and the most held at once since the last reset_storage_peak(): what a step's activations
// cost, whatever the allocator keeps cached (bench_train prints it). Process-wide.
struct StorageStats {
  size_t live = 0, peak = 0;
};
StorageStats storage_stats();
// Freed large buffers are kept for reuse by size (a step allocates the same sizes again and
// again), up to 1 GB. This hands them all back to the system: after a phase whose buffers
// will not come back (a checkpoint read and copied into the model, a model converted).
// Returns the bytes released.
size_t release_storage_cache();
void reset_storage_peak();
// Buffers of this size and more are mapped 2 MB aligned and advised as transparent huge
// pages (tensor.cpp's BufferPool::map): one that is a whole number of them long has no tail
// of 4 KB pages, each a fault of its own on first touch.
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;

struct Storage {
  explicit Storage(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  bool zero = false;  // known to hold zeros when made (a fresh mapping), until written
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;

  // Autograd metadata (see autograd/README.md).
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return attend::numel(impl_->shape); }
  bool is_contiguous() const;

  // Pointer to the first element of this view; T must match the dtype.
  template <typename T>
  T* data() const {
    ATTEND_CHECK(dtype_of<T>() == dtype(), "data: tensor has dtype ", dtype_name(dtype()),
                 ", asked for ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(impl_->storage->data) + impl_->offset;
  }
  void* raw_data() const {
    return static_cast<char*>(impl_->storage->data) + impl_->offset * dtype_size(dtype());
  }

  // Element access, converting through double (for tests and printing, not kernels).
  double item() const;  // the only element of a one-element tensor
  double at(const std::vector<int64_t>& index) const;
  void set(const std::vector<int64_t>& index, double value) const;
  // All elements in logical row-major order.
  template <typename T>
  std::vector<T> to_vector() const;

  // Autograd metadata.
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& requires_grad_(bool on = true);
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) const { impl_->grad = g.impl_; }
  void zero_grad() const { impl_->grad.reset(); }  // PyTorch's set_to_none
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  // Same storage and view, outside the graph.
  Tensor detach() const;
  // Makes this handle's TensorImpl (shared by every copy of the handle) point at src's
  // data, shape and dtype; autograd metadata stays. For converting a module's
  // parameters in place (dtype changes, loading).
  void set_data(const Tensor& src) const;
  // Runs reverse-mode autodiff from this tensor (autograd/engine.cpp). A non-scalar needs
  // an explicit `grad` of its shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  std::string to_string() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A tensor over existing storage (views use this).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

// Creation. Fresh contiguous storage; none of these record a graph.
Tensor empty(const Shape& shape, DType dtype = DType::F32);
Tensor zeros(const Shape& shape, DType dtype = DType::F32);

// While one lives (on its thread), zeros() leaves a buffer fresh from the system unwritten:
// its pages read as zeros and hold no memory until first written. For tensors that are
// written whole next, or never (parameters a checkpoint replaces: GPT's Init::for_load).
// Elsewhere zeros() writes every buffer: one read before it is written (a gradient summed
// into) would take two page faults a page, the shared zero page's and then the copy's
// (GPT-2's training step took 37% more faults in all when every fresh buffer was left).
class UnwrittenZeros {
 public:
  UnwrittenZeros();
  ~UnwrittenZeros();
  UnwrittenZeros(const UnwrittenZeros&) = delete;
  UnwrittenZeros& operator=(const UnwrittenZeros&) = delete;

 private:
  bool outer_;
};
Tensor ones(const Shape& shape, DType dtype = DType::F32);
Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32);
// Values in row-major order; their count must equal the shape's element count.
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype = DType::F32);
Tensor scalar_tensor(double value, DType dtype = DType::F32);  // 0-dim

}  // namespace attend
#pragma GCC visibility pop
