// Reductions: sum and max over chosen dims.
//
// Layout: the reduced dims are moved last (permute + contiguous copy when needed), giving
// O rows of R elements. A row's sum accumulates in double across 8 fixed lanes, in chunks
// of kReduceChunk combined in index order, so the result depends only on the data, never
// on the thread count. When the reduced dims lead a contiguous tensor (bias gradients,
// sum_to) a column path sums rows in order without the copy.
#include <cmath>

#include "tensor/kernels.h"
#include "tensor/parallel.h"

namespace attend::kernel {

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim,
                                    const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(ndim, false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    ATTEND_CHECK(!seen[w], op, ": dim ", d, " appears twice");
    seen[w] = true;
  }
  for (int64_t d = 0; d < ndim; ++d)
    if (seen[d]) out.push_back(d);
  return out;
}

namespace {

struct ReduceLayout {
  std::vector<int64_t> perm;  // kept dims, then reduced dims
  Shape out_shape;            // with keepdim applied
  int64_t rows = 1, len = 1;  // O, R
};

ReduceLayout layout_for(const Shape& shape, const std::vector<int64_t>& rdims, bool keepdim) {
  ReduceLayout L;
  const int64_t ndim = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(ndim, false);
  for (int64_t d : rdims) reduced[d] = true;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[d]) {
      L.perm.push_back(d);
      L.rows *= shape[d];
      L.out_shape.push_back(shape[d]);
    } else if (keepdim) {
      L.out_shape.push_back(1);
    }
  }
  for (int64_t d : rdims) {
    L.perm.push_back(d);
    L.len *= shape[d];
  }
  return L;
}

template <typename T>
double lane_sum(const T* p, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(p[i + k]);
  for (int k = 0; i < n; ++i, ++k) acc[k] += static_cast<double>(p[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Rows of a contiguous (O, R) buffer.
template <typename T>
void row_sums(const T* x, int64_t rows, int64_t len, T* out) {
  const int64_t chunks = std::max<int64_t>(1, (len + kReduceChunk - 1) / kReduceChunk);
  std::vector<double> partial(rows * chunks);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::min(len, kReduceChunk));
  parallel_for(rows * chunks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t r = t / chunks, c = t % chunks;
      int64_t lo = c * kReduceChunk, hi = std::min(len, lo + kReduceChunk);
      partial[t] = lane_sum(x + r * len + lo, hi - lo);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[r * chunks + c];
    out[r] = static_cast<T>(s);
  }
}

// Columns of a contiguous (R, O) buffer, each summed down its rows in order.
template <typename T>
void column_sums(const T* x, int64_t len, int64_t cols, T* out) {
  parallel_for(cols, std::max<int64_t>(16, kElementwiseGrain / std::max<int64_t>(1, len)),
               [&](int64_t b, int64_t e) {
                 std::vector<double> acc(e - b, 0.0);
                 for (int64_t r = 0; r < len; ++r) {
                   const T* row = x + r * cols;
                   for (int64_t c = b; c < e; ++c) acc[c - b] += static_cast<double>(row[c]);
                 }
                 for (int64_t c = b; c < e; ++c) out[c] = static_cast<T>(acc[c - b]);
               });
}

bool leading_dims(const std::vector<int64_t>& rdims) {
  for (size_t i = 0; i < rdims.size(); ++i)
    if (rdims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> rdims = normalize_dims(dims, x.dim(), "sum");
  ReduceLayout L = layout_for(x.shape(), rdims, keepdim);
  return dispatch_float(x.dtype(), "sum", [&]<typename T>() {
    Tensor out = empty(L.out_shape, x.dtype());
    if (L.len == 0) {
      fill_(out, 0.0);
    } else if (x.is_contiguous() && leading_dims(rdims) && L.rows > 1) {
      column_sums(x.data<T>(), L.len, L.rows, out.data<T>());
    } else {
      Tensor xc = contiguous(permute(x, L.perm));
      row_sums(xc.data<T>(), L.rows, L.len, out.data<T>());
    }
    return out;
  });
}

std::pair<Tensor, Tensor> max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> rdims = normalize_dims(dims, x.dim(), "max");
  ReduceLayout L = layout_for(x.shape(), rdims, keepdim);
  ATTEND_CHECK(L.len > 0, "max: cannot reduce over an empty dim in shape ", shape_str(x.shape()));
  return dispatch_float(x.dtype(), "max", [&]<typename T>() {
    Tensor values = empty(L.out_shape, x.dtype());
    Tensor indices = empty(L.out_shape, DType::I64);
    Tensor xc = contiguous(permute(x, L.perm));
    const T* p = xc.data<T>();
    T* v = values.data<T>();
    int64_t* ix = indices.data<int64_t>();
    parallel_for(L.rows, std::max<int64_t>(1, kElementwiseGrain / L.len),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const T* row = p + r * L.len;
                     int64_t best = 0;
                     for (int64_t i = 1; i < L.len && !std::isnan(row[best]); ++i)
                       if (row[i] > row[best] || std::isnan(row[i])) best = i;
                     v[r] = row[best];
                     ix[r] = best;
                   }
                 });
    return std::make_pair(values, indices);
  });
}

Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape,
                    const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t ndim = static_cast<int64_t>(input_shape.size());
  std::vector<int64_t> rdims = normalize_dims(dims, ndim, "max");
  ReduceLayout L = layout_for(input_shape, rdims, keepdim);
  Tensor gc = contiguous(g);
  Tensor ic = contiguous(indices);
  Tensor out = zeros(input_shape, g.dtype());
  dispatch_float(g.dtype(), "max_backward", [&]<typename T>() {
    Tensor buf = zeros({L.rows, L.len}, g.dtype());
    T* b = buf.data<T>();
    const T* gp = gc.data<T>();
    const int64_t* ip = ic.data<int64_t>();
    for (int64_t r = 0; r < L.rows; ++r) b[r * L.len + ip[r]] = gp[r];
    Shape permuted;
    for (int64_t d : L.perm) permuted.push_back(input_shape[d]);
    copy_(permute(out, L.perm), view(buf, permuted));
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  ATTEND_CHECK(x.shape().size() >= shape.size(), "sum_to: cannot reduce shape ",
               shape_str(x.shape()), " to ", shape_str(shape));
  const size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < lead; ++d) dims.push_back(static_cast<int64_t>(d));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && x.shape()[lead + i] != 1) dims.push_back(static_cast<int64_t>(lead + i));
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum(x, dims, true), shape);
}

}  // namespace attend::kernel
