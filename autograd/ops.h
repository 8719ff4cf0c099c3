// The differentiable operations: attend's tensor API. Each records its backward (see
// autograd/README.md) when grad mode is on and an input requires grad. Dims may be
// negative (counted from the end). Shapes follow PyTorch's semantics.
#pragma once

#include <vector>

#include "autograd/node.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {

// ---- views and copies (ops/views.cpp) ----------------------------------------------------
Tensor view(const Tensor& x, const Shape& shape);     // no copy; one dim may be -1
Tensor reshape(const Tensor& x, const Shape& shape);  // view when possible, else a copy
Tensor flatten(const Tensor& x);                      // (numel,)
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);  // [start, end)
Tensor select(const Tensor& x, int64_t dim, int64_t index);              // drops the dim
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);

// ---- joining and selecting (ops/join.cpp) ------------------------------------------------
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
// Pieces of `size` along dim (the last may be shorter); each a view of x.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);  // mask: bool
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);     // cond: bool

// ---- elementwise (ops/elementwise.cpp) ---------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor sub(double s, const Tensor& a);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor div(double s, const Tensor& a);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double p);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // GPT-2's tanh approximation

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return sub(s, a); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return div(s, a); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

// ---- reductions (ops/reduce.cpp) ---------------------------------------------------------
Tensor sum(const Tensor& x);  // every element, 0-dim result
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Max over dims; the gradient goes to the first maximal element of each reduced block.
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- matmul (ops/matmul.cpp) -------------------------------------------------------------
// (..., M, K) @ (..., K, N) -> (..., M, N), batch dims broadcast; transposed views free.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x w^T + b (b may be undefined), nn::Linear's op: the same numbers as
// add(matmul(x, transpose(w, 0, 1)), b), with the weight's gradient made contiguous.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- fused neural-network ops (ops/nn_ops.cpp), each a single node -----------------------
Tensor softmax(const Tensor& x);      // over the last dim
Tensor log_softmax(const Tensor& x);  // over the last dim
// softmax(scale x) over the last dim of (..., Tq, Tk) scores with key j of query row i
// masked (weight exactly 0) when j > i + offset; offset < 0: no mask. A sliding window
// W > 0 (Mistral; causal only) also masks j <= i + offset - W: each query sees its W
// newest keys. Attention's fused mul + masked_fill + softmax, equal to them bit for bit
// (tests/autograd).
Tensor scaled_softmax(const Tensor& x, double scale, int64_t offset, int64_t window = 0);
// Fused attention, one node (kernel::attention_forward; no (Tq, Tk) tensor is made or
// kept): for each batch and query head h,
//   dropout(scaled_softmax(q k^T, scale, offset)) v  with k, v of key/value head h / G,
// q (B, NH, Tq, HS), k and v (B, KVH, Tk, HS) -> (B, NH, Tq, HS). The dropout masks are
// drop's (drop.p = 0: none), the same as nn::Dropout would draw for the composed weights.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t offset,
                 const DropoutStream& drop, int64_t window = 0);
// The same from self-attention's packed projections qkv (B, T, NH HS + 2 KVH HS), q then k
// then v: (B, T, NH HS), heads concatenated, and qkv's gradient in one tensor.
Tensor attention_qkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, double scale,
                     int64_t offset, const DropoutStream& drop, int64_t window = 0);
// Over the last dim; bias may be an undefined Tensor (no bias).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// logits (..., V), targets (...) integer: mean over targets != ignore_index (PyTorch's
// default ignore_index is -100).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// cross_entropy(linear(x, w, no bias), targets) in one node, x (..., C), w (V, C), targets
// (...): the logits exist only a chunk of rows at a time (kernel::linear_cross_entropy)
// and the gradients are formed in the forward (for an upstream gradient of 1, scaled in
// backward). chunk_rows 0: up to 2^24 logits at once, in multiples of 256 rows. The
// backward hands its gradients out once: retain_graph is refused.
// rows (n, C), defined: w's rows [rows_from, rows_from + n) are w's plus these, and rows is
// differentiated (the trainable token rows of a frozen head, nn/lora.h).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                            int64_t ignore_index = -100, int64_t chunk_rows = 0,
                            const Tensor& rows = Tensor(), int64_t rows_from = 0);
// weight (V, C), ids (...) integer -> (..., C)
Tensor embedding(const Tensor& weight, const Tensor& ids);

// ---- Llama's layers (ops/nn_ops.cpp), each one node -------------------------------------
// RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);
// SwiGLU on packed [gate | up] (..., 2H) -> (..., H): silu(gate) * up.
Tensor swiglu(const Tensor& x);
// Rotary position embedding on x (B, T, D), positions pos0 + t along T: the first `rotated`
// columns, in heads of HS = head_size, have each pair (2i, 2i+1) of a head turned by
// a = (pos0 + t) theta^(-2i / HS):  (x_2i, x_2i+1) -> (x_2i cos a - x_2i+1 sin a,
// x_2i sin a + x_2i+1 cos a); the other columns are unchanged. These are Meta's (and
// llama2.c's) interleaved pairs; Hugging Face's Llama pairs (i, i + HS/2) instead, the same
// model with Wq's and Wk's rows permuted in each head: attend's channel 2i + r is Hugging
// Face's channel r HS/2 + i. Note [RoPE] (tensor/kernels/rope.cpp) has the details.
Tensor rotary(const Tensor& x, int64_t head_size, int64_t rotated, int64_t pos0, double theta);

}  // namespace attend
#pragma GCC visibility pop
