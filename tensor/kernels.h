// Raw kernels: views and computations on tensors, with no autograd. The differentiable
// API in autograd/ops.h calls these in its forwards and its backwards; users normally
// do not call them directly.
//
// Every kernel accepts non-contiguous inputs (views with any strides, broadcast views with
// stride 0) and returns a fresh contiguous tensor unless it is a view. Floating kernels
// take f32 or f64 and require all floating operands to share one dtype.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::kernel {

// ---- views (tensor/kernels/view.cpp): no copy, share storage ---------------------------
Tensor view(const Tensor& x, Shape shape);     // throws if the strides cannot express it
Tensor reshape(const Tensor& x, Shape shape);  // a view when possible, else a copy
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);  // resolves one -1
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& x, const Shape& shape);  // broadcast: size-1 dims get stride 0
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);  // only a size-1 dim
Tensor select(const Tensor& x, int64_t dim, int64_t index);

// ---- copies (tensor/kernels/copy.cpp) -------------------------------------------------
Tensor contiguous(const Tensor& x);  // x itself when already contiguous
Tensor clone(const Tensor& x);       // always a fresh copy
Tensor cast(const Tensor& x, DType dtype);
// A tensor's values as f32, `block` elements at a time in order: f(values, first, count).
// A contiguous bf16 tensor is widened into one block-sized buffer (never the whole f32
// copy: hashing or writing a bf16 base must not hold it twice); any other dtype is cast,
// blocks then pointing into the f32 copy. Serial: safe in a forked child.
void for_each_f32_block(const Tensor& x, int64_t block,
                        const std::function<void(const float*, int64_t, int64_t)>& f);
void copy_(const Tensor& dst, const Tensor& src);  // src broadcast to dst's shape
void add_(const Tensor& dst, const Tensor& src);   // dst += src (src broadcast)
void fill_(const Tensor& dst, double value);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// out = mask ? value : x, mask (bool) broadcast to x.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// out = cond ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Triangular bool masks (rows, cols): tril is true where col <= row + diagonal, triu where
// col >= row + diagonal. The causal attention mask (the future) is triu_mask(T, T, 1).
Tensor tril_mask(int64_t rows, int64_t cols, int64_t diagonal = 0);
Tensor triu_mask(int64_t rows, int64_t cols, int64_t diagonal = 0);

// ---- elementwise (tensor/kernels/elementwise.cpp) -------------------------------------
enum class Unary { Neg, Exp, Log, Sqrt, Tanh, Relu, Gelu, Pow, Affine, Rdiv, Abs };
// Pow: x^p; Affine: x*p + q; Rdiv: p / x.
Tensor unary(Unary op, const Tensor& x, double p = 0, double q = 0);

enum class Binary {
  Add,
  Sub,
  Mul,
  Div,
  ReluGrad,  // (g, x) -> x > 0 ? g : 0
  GeluGrad,  // (g, x) -> g * gelu'(x)
  TanhGrad,  // (g, y) -> g * (1 - y^2), y = tanh(x)
};
Tensor binary(Binary op, const Tensor& a, const Tensor& b);  // broadcasting
const char* binary_name(Binary op);

// ---- reductions (tensor/kernels/reduce.cpp) -------------------------------------------
// `dims` empty means every dim. Sums accumulate in double in a fixed order.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// Values and, for each, the flat index of the (first) maximum within its reduced block,
// reduced dims taken in order (i64). NaN wins, as in PyTorch.
std::pair<Tensor, Tensor> max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// Gradient of max: g placed at the arg-max of each reduced block, zeros elsewhere.
Tensor max_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape,
                    const std::vector<int64_t>& dims, bool keepdim);
// Sums a broadcast result back to `shape` (see Note [Broadcast gradients] in autograd).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- matmul (tensor/kernels/matmul.cpp, gemm.cpp) -------------------------------------
// (..., M, K) @ (..., K, N) -> (..., M, N), batch dims broadcast. Transposed views are
// read through their strides, without a copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// The plain triple loop with a double accumulator: the oracle for tests.
Tensor matmul_naive(const Tensor& a, const Tensor& b);

// ---- neural-network kernels (tensor/kernels/nn.cpp) -----------------------------------
Tensor softmax(const Tensor& x);                            // over the last dim
Tensor softmax_backward(const Tensor& y, const Tensor& g);  // y = softmax(x)
// Attention's softmax over the last dim of (..., Tq, Tk) scores, scaled, with key j of
// query row i masked when j > i + offset (offset < 0: no mask) and, with a sliding window
// W > 0 (causal only), when j <= i + offset - W; tensor/kernels/nn.cpp.
Tensor scaled_softmax(const Tensor& x, double scale, int64_t offset, int64_t window = 0);
Tensor scaled_softmax_backward(const Tensor& y, const Tensor& g, double scale, int64_t offset,
                               int64_t window = 0);
// Fused attention (tensor/kernels/attention.cpp): for every batch b and query head h,
//   out[b, h] = dropout(scaled_softmax(q[b, h] k[b, h / G]^T, scale, offset)) v[b, h / G]
// with q (B, NH, Tq, HS), k and v (B, KVH, Tk, HS), G = NH / KVH, without a (Tq, Tk)
// tensor: scores live in a per-thread block of query rows, keys past a causal block's
// last visible one are never computed. The dropout masks are `drop`'s, element
// ((b NH + h) Tq + i) Tk + j, so the same as nn::Dropout on the composed weights. Every
// operand is read through its strides (the last one 1); `out` (q's shape, last stride 1)
// is written.
// window > 0: the sliding-window mask of scaled_softmax too (keys before a block's first
// visible one are not computed either).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                       int64_t offset, const DropoutStream& drop, const Tensor& out,
                       int64_t window = 0);
// Gradients from the output gradient g (q's shape): dq, dk, dv (the shapes of q, k, v,
// last stride 1, possibly views into one buffer) are written. The weights are recomputed.
void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                        double scale, int64_t offset, const DropoutStream& drop, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, int64_t window = 0);
Tensor log_softmax(const Tensor& x);
Tensor log_softmax_backward(const Tensor& y, const Tensor& g);  // y = log_softmax(x)

struct LayerNormOut {
  Tensor y, mean, rstd;  // mean, rstd: (rows,) over the last dim
};
LayerNormOut layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd);

struct CrossEntropyOut {
  Tensor loss;    // 0-dim
  Tensor lse;     // (N,) log-sum-exp of each row
  int64_t count;  // rows not ignored
};
// logits (N, V), targets (N,) integer; mean over rows whose target != ignore_index.
CrossEntropyOut cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index);
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t count, int64_t ignore_index);
// The LM head and the loss in one: cross_entropy(x w^T, targets) for x (N, C), w (V, C),
// over chunks of `chunk_rows` rows, so at most (chunk_rows, V) logits exist at a time.
// With grads, also the loss's gradients for an upstream gradient of 1: dx (N, C) and dw
// (V, C), each chunk's logits turned into their gradient in place and multiplied out at
// once. The same GEMMs, rows and sums as linear + cross_entropy + their backward: with
// chunk_rows a multiple of 256 (the GEMM's K block) or >= N, the same bits.
struct LinearCrossEntropyOut {
  Tensor loss;  // 0-dim
  Tensor dx, dw, drows;
  int64_t count;
};
// grad_x, grad_w: which gradients to form (a frozen w, LoRA's head, needs none).
// rows (n, C), defined: w's rows [rows_from, rows_from + n) are w's plus these (trainable
// token rows, nn/lora.h): their logits get x rows^T added, dx gets dL rows, and grad_rows
// forms drows (n, C). All-zero rows leave every bit as without them.
LinearCrossEntropyOut linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                                           int64_t ignore_index, bool grad_x, bool grad_w,
                                           int64_t chunk_rows, const Tensor& rows = Tensor(),
                                           int64_t rows_from = 0, bool grad_rows = false);

// weight (V, C), ids any shape of integers in [0, V) -> ids.shape + (C,)
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor embedding_backward(const Tensor& g, const Tensor& ids, int64_t num_rows);
// The same gradient added into dst (num_rows, C), contiguous, in place: each row's sum of
// g rows built from zero in position order, then added to dst's row, so the bits are
// those of add_(dst, embedding_backward(...)) (except that a row no id names is left as
// it is, where adding zero would turn a -0 into +0); rows no id names are not touched.
void embedding_backward_add(const Tensor& g, const Tensor& ids, Tensor& dst);

// ---- Llama's layers (tensor/kernels/nn.cpp, tensor/kernels/rope.cpp) -----------------
// rms_norm over the last dim: rstd = 1 / sqrt(mean(x^2) + eps), y = x rstd w.
struct RMSNormOut {
  Tensor y, rstd;  // rstd: (rows,)
};
RMSNormOut rms_norm(const Tensor& x, const Tensor& weight, double eps);
struct RMSNormGrads {
  Tensor dx, dweight;
};
RMSNormGrads rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd);
// SwiGLU on packed [gate | up] (..., 2H) -> (..., H): silu(gate) * up, silu(a) = a sigmoid(a).
Tensor swiglu(const Tensor& x);
Tensor swiglu_backward(const Tensor& g, const Tensor& x);  // -> (..., 2H)
// Rotary position embedding on x (B, T, D), Meta's convention (see Note [RoPE] in
// tensor/kernels/rope.cpp): the first `rotated` columns, in heads of head_size, have
// each pair (2i, 2i+1) of a head turned by the angle (pos0 + t) theta^(-2i / head_size);
// the columns past `rotated` are copied. sign -1 turns the other way (the backward).
Tensor rotary(const Tensor& x, int64_t head_size, int64_t rotated, int64_t pos0, double theta,
              int sign = 1);

// ---- Decoding's raw rows (infer/decoder.h) ---------------------------------------------
// One token's steps on f32 buffers, without tensors: each runs the same code as its tensor
// kernel above for one row (the same bits; tests/infer/test_decoder.cpp compares).
void layer_norm_row_f32(const float* x, int64_t C, const float* w, const float* b, double eps,
                        float* y);                                                  // b may be null
void rms_norm_row_f32(const float* x, int64_t C, const float* w, double eps, float* y);
void swiglu_row_f32(const float* x, int64_t H, float* y);  // x [gate | up] (2H) -> y (H)
void gelu_f32(const float* x, float* y, int64_t n);        // unary(Gelu)'s elementwise GELU
// rotary for one row of D columns at position pos (sign 1); y may not be x.
void rotary_row_f32(const float* x, float* y, int64_t D, int64_t HS, int64_t rotated, int64_t pos,
                    double theta);
// attention_forward for one query row (B 1, Tq 1, causal: every key visible, or with a
// window W > 0 the last W): q and out (NH, HS); k and v hold KVH heads of Tk rows of HS,
// head h's first key head_stride floats from head 0's, key t row_stride floats from key 0
// (head-major: head_stride >= Tk row_stride, row_stride HS; position-major: row_stride
// >= KVH head_stride, head_stride HS).
void attention_one_query_f32(const float* q, int64_t NH, int64_t HS, const float* k,
                             const float* v, int64_t KVH, int64_t Tk, int64_t head_stride,
                             int64_t row_stride, double scale, int64_t window, float* out);
// The same with the keys and values anywhere: head h's key t, element i, at
// k[h k_head + t k_key + i k_dim], its value at v[h v_head + t v_key + i]. Keys as rows
// (k_dim 1, as above) or as columns (k_key 1: each head HS rows of the keys' i-th elements,
// k_dim >= Tk apart; infer::Decoder's cache), which the scores' product reads as a row-major
// B, without transposing: the same bits. E float, or bf16 bits under bf16 products only
// (to_bf16_bits of the f32 keys and values: a decoder's cache in half the bytes): the products
// round K and V to bf16 as they read them, so the bits give the f32 values' result, reading
// half the bytes and rounding nothing.
template <typename E>
struct OneQueryKV {
  const E* k;
  const E* v;
  int64_t k_head, k_key, k_dim, v_head, v_key;
};
void attention_one_query(const float* q, int64_t NH, int64_t HS, int64_t KVH, int64_t Tk,
                         const OneQueryKV<float>& kv, double scale, int64_t window, float* out);
void attention_one_query(const float* q, int64_t NH, int64_t HS, int64_t KVH, int64_t Tk,
                         const OneQueryKV<uint16_t>& kv, double scale, int64_t window, float* out);

}  // namespace attend::kernel
#pragma GCC visibility pop
