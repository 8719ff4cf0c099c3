// Strided iteration over N operands that share one logical shape (an output and its
// broadcast inputs). Dims are first coalesced: size-1 dims dropped, and neighbours merged
// where every operand's strides allow it, so contiguous operands become one flat run.
// run(begin, end, body) walks the flat logical range [begin, end) in runs along the last
// dim, calling body(offsets, n, inner_strides): n elements, operand k at offsets[k] +
// i * inner_strides[k].
#pragma once

#include <array>
#include <vector>

#include "tensor/parallel.h"
#include "tensor/tensor.h"

namespace attend::kernel {

template <size_t N>
class StridedLoop {
 public:
  using Offsets = std::array<int64_t, N>;

  StridedLoop(const Shape& shape, const std::array<Strides, N>& strides) {
    numel_ = attend::numel(shape);
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      bool merge = !shape_.empty();
      for (size_t k = 0; k < N && merge; ++k) {
        merge = strides_[k].back() == strides[k][d] * shape[d];
      }
      if (merge) {
        shape_.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) strides_[k].back() = strides[k][d];
      } else {
        shape_.push_back(shape[d]);
        for (size_t k = 0; k < N; ++k) strides_[k].push_back(strides[k][d]);
      }
    }
  }

  int64_t numel() const { return numel_; }

  template <typename Body>
  void run(int64_t begin, int64_t end, Body&& body) const {
    if (begin >= end) return;
    const size_t nd = shape_.size();
    Offsets off{}, inner{};
    if (nd == 0) {  // a single element
      body(off, int64_t{1}, inner);
      return;
    }
    std::vector<int64_t> idx(nd);
    int64_t rem = begin;
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % shape_[d];
      rem /= shape_[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * strides_[k][d];
    }
    for (size_t k = 0; k < N; ++k) inner[k] = strides_[k][nd - 1];
    int64_t pos = begin;
    while (pos < end) {
      int64_t n = std::min(shape_[nd - 1] - idx[nd - 1], end - pos);
      body(off, n, inner);
      pos += n;
      idx[nd - 1] += n;
      for (size_t k = 0; k < N; ++k) off[k] += n * inner[k];
      for (size_t d = nd - 1; d > 0 && idx[d] == shape_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (size_t k = 0; k < N; ++k) off[k] += strides_[k][d - 1] - shape_[d] * strides_[k][d];
      }
    }
  }

  // The whole range, split across threads when large.
  template <typename Body>
  void parallel_run(Body&& body) const {
    parallel_for(numel_, kElementwiseGrain, [&](int64_t b, int64_t e) { run(b, e, body); });
  }

 private:
  Shape shape_;
  std::array<Strides, N> strides_;
  int64_t numel_ = 0;
};

}  // namespace attend::kernel
