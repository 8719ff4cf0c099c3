// Batched matmul: (..., M, K) @ (..., K, N) -> (..., M, N), batch dims broadcast.
// Each batch is one gemm over strided views of the operands (no copies). Many small
// batches (attention's (B*NH) T x T products) run in parallel one gemm per thread;
// few large ones parallelise inside the gemm.
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace {

struct MatmulPlan {
  Shape batch, out_shape;
  Strides a_batch, b_batch;  // broadcast strides of the batch dims
  int64_t M, N, K, nbatch;
};

MatmulPlan plan(const Tensor& a, const Tensor& b) {
  ATTEND_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: expected tensors with at least 2 dims, got ",
               shape_str(a.shape()), " @ ", shape_str(b.shape()));
  ATTEND_CHECK(a.dtype() == b.dtype(), "matmul: expected operands of one dtype, got ",
               dtype_name(a.dtype()), " @ ", dtype_name(b.dtype()));
  ATTEND_CHECK(is_floating(a.dtype()), "matmul: expected a floating dtype (f32 or f64), got ",
               dtype_name(a.dtype()));
  ATTEND_CHECK(a.size(-1) == b.size(-2), "matmul: expected a.shape[-1] == b.shape[-2], got ",
               shape_str(a.shape()), " @ ", shape_str(b.shape()));
  MatmulPlan p;
  p.M = a.size(-2);
  p.K = a.size(-1);
  p.N = b.size(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Strides as(a.strides().begin(), a.strides().end() - 2),
      bs(b.strides().begin(), b.strides().end() - 2);
  p.batch = broadcast_shapes(ab, bb, "matmul");
  p.a_batch = broadcast_strides(ab, as, p.batch);
  p.b_batch = broadcast_strides(bb, bs, p.batch);
  p.nbatch = numel(p.batch);
  p.out_shape = p.batch;
  p.out_shape.push_back(p.M);
  p.out_shape.push_back(p.N);
  return p;
}

template <typename T, typename Gemm>
void run_batches(const MatmulPlan& p, const Tensor& a, const Tensor& b, const Tensor& out,
                 Gemm gemm_one) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const MatrixRef<T> a0{pa, a.strides()[a.dim() - 2], a.strides()[a.dim() - 1]};
  const MatrixRef<T> b0{pb, b.strides()[b.dim() - 2], b.strides()[b.dim() - 1]};
  auto one = [&](int64_t bi, bool parallel) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (size_t d = p.batch.size(); d-- > 0;) {
      int64_t i = rem % p.batch[d];
      rem /= p.batch[d];
      oa += i * p.a_batch[d];
      ob += i * p.b_batch[d];
    }
    MatrixRef<T> A = a0, B = b0;
    A.data += oa;
    B.data += ob;
    gemm_one(A, B, po + bi * p.M * p.N, parallel);
  };
  const bool small = p.M * p.N * p.K < (1 << 20);
  if (p.nbatch > 1 && small) {
    parallel_for(p.nbatch, 1, [&](int64_t s, int64_t e) {
      for (int64_t bi = s; bi < e; ++bi) one(bi, false);
    });
  } else {
    for (int64_t bi = 0; bi < p.nbatch; ++bi) one(bi, true);
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() > 2 && b.dim() == 2 && a.size(-1) == b.size(0)) {
    // (..., M, K) @ (K, N): one (prod(...) * M, K) @ (K, N) product (Linear layers).
    Shape out_shape = a.shape();
    out_shape.back() = b.size(1);
    return reshape(matmul(reshape(a, {-1, a.size(-1)}), b), out_shape);
  }
  MatmulPlan p = plan(a, b);
  Tensor out = empty(p.out_shape, a.dtype());
  dispatch_float(a.dtype(), "matmul", [&]<typename T>() {
    run_batches<T>(p, a, b, out, [&](MatrixRef<T> A, MatrixRef<T> B, T* C, bool parallel) {
      gemm<T>(p.M, p.N, p.K, A, B, C, p.N, parallel);
    });
  });
  return out;
}

Tensor matmul_naive(const Tensor& a, const Tensor& b) {
  MatmulPlan p = plan(a, b);
  Tensor out = empty(p.out_shape, a.dtype());
  dispatch_float(a.dtype(), "matmul", [&]<typename T>() {
    run_batches<T>(p, a, b, out, [&](MatrixRef<T> A, MatrixRef<T> B, T* C, bool) {
      gemm_naive<T>(p.M, p.N, p.K, A, B, C, p.N);
    });
  });
  return out;
}

}  // namespace attend::kernel
