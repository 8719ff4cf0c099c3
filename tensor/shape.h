// Shapes and strides. Glossary used in shape comments across attend:
//   B batch, T time (sequence), C channels, NH heads, KVH key/value heads, HS head size,
//   V vocabulary. Dimension order is PyTorch's: outermost first, row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // in elements, not bytes

// Inline: loops bounded by a tensor's numel() had it recomputed by a call per element.
inline int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2,3)", "()" for a scalar, "(5,)" for 1-D

// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// NumPy/PyTorch broadcasting: align trailing dims; each pair must be equal or one of them 1.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides that read a tensor of `shape`/`strides` as if it had shape `target` (which it
// broadcasts to): stride 0 along broadcast dims.
Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& target);

}  // namespace attend
#pragma GCC visibility pop
