// Kernels of the fused neural-network ops, each over rows of the last dim (rows in
// parallel, each row in a fixed order, statistics accumulated in double).
//
// softmax:      y_i = exp(x_i - m) / sum_j exp(x_j - m),  m = max_j x_j
//   backward:   dx_i = y_i (g_i - sum_j g_j y_j)
// scaled_softmax (attention's, fused): rows of (..., Tq, Tk) scores, row i of Tq,
//               z_j = scale x_j for j <= i + offset (all j when offset < 0) and, with a
//               window W > 0, j > i + offset - W; else -inf,
//               y = softmax(z): masked keys get exactly 0 and are never exponentiated
//   backward:   dx_j = (y_j (g_j - sum_k g_k y_k)) scale, 0 on masked keys
//   The rows are kernels/rowmath.h's (vectorised: exp_f32 in f32, sums over 8 lanes),
//   shared with the fused attention kernel, which therefore computes the same weights.
// log_softmax:  y_i = x_i - m - log sum_j exp(x_j - m)
//   backward:   dx_i = g_i - exp(y_i) sum_j g_j
// layer_norm:   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased var),
//               y = xhat * w + b
//   backward:   dxhat = g * w
//               dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//               dw = sum_rows g * xhat,  db = sum_rows g
// cross_entropy (mean over the n rows whose target is not ignored):
//               loss = (1/n) sum_rows (lse_r - x_{r, t_r}),  lse_r = log sum_j exp(x_rj)
//   backward:   dx_rj = g (exp(x_rj - lse_r) - [j == t_r]) / n, zero on ignored rows
// embedding:    out[..., :] = W[id, :];  backward: dW[id, :] += g[..., :] (in order)
// rms_norm:     xhat = x rstd, rstd = 1 / sqrt(mean(x^2) + eps), y = xhat * w
//   backward:   dxhat = g * w,  dx = rstd * (dxhat - xhat * mean(dxhat * xhat))
//               dw = sum_rows g * xhat
// swiglu:       x = [a | b] (..., 2H), y = silu(a) b, silu(a) = a s, s = sigmoid(a)
//   backward:   da = g b s (1 + a (1 - s)),  db = g silu(a)
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/kernels/rowmath.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace {

int64_t last_dim(const Tensor& x, const char* op) {
  ATTEND_CHECK(x.dim() >= 1, op, ": expected at least 1 dim, got a 0-dim tensor");
  return x.size(-1);
}

// Runs f(row) over the rows of the last dim, in parallel for large inputs.
template <typename F>
void for_rows(int64_t rows, int64_t len, F f) {
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, len)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) f(r);
               });
}

// The max is exact in any order: kLanes lanes, so it vectorises.
template <typename T>
T row_max(const T* x, int64_t n) {
  T lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = lane[l] > x[i + l] ? lane[l] : x[i + l];
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t l = 0; l < kLanes; ++l) m = std::max(m, lane[l]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// log sum_j exp(x_j) of one row of V logits.
template <typename T>
T row_lse(const T* xr, int64_t V) {
  const T m = row_max(xr, V);
  const double s =
      lane_sum(V, [&](int64_t i) { return static_cast<double>(exp_fast<T>(xr[i] - m)); });
  return m + static_cast<T>(std::log(s));
}

// dr = (softmax(xr) - onehot(t)) scale from the row's log-sum-exp (dr may be xr).
template <typename T>
void row_ce_grad(const T* xr, T* dr, int64_t V, T lse, int64_t t, T scale) {
  for (int64_t i = 0; i < V; ++i) dr[i] = exp_fast<T>(xr[i] - lse) * scale;
  dr[t] -= scale;
}

int64_t target_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::I64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

// The rows whose target is not ignore_index, each checked to be a class in [0, V).
int64_t count_targets(const Tensor& t, int64_t N, int64_t V, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t c = target_at(t, r);
    if (c == ignore_index) continue;
    ATTEND_CHECK(c >= 0 && c < V, "cross_entropy: target ", c, " at position ", r,
                 " is out of range for ", V, " classes");
    ++count;
  }
  return count;
}

}  // namespace

Tensor scaled_softmax(const Tensor& x, double scale, int64_t offset, int64_t window) {
  ATTEND_CHECK(x.dim() >= (offset < 0 ? 1 : 2),
               "scaled_softmax: expected (..., Tq, Tk) scores, got ", x.dim(), " dims");
  ATTEND_CHECK(window >= 0 && (window == 0 || offset >= 0), "scaled_softmax: window ", window,
               " needs a causal mask (offset >= 0) and must be >= 0");
  const int64_t tq = x.dim() >= 2 ? x.size(-2) : 1, n = x.size(-1);
  Tensor xc = contiguous(x);
  Tensor y = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "scaled_softmax", [&]<typename T>() {
    const T* in = xc.data<T>();
    T* out = y.data<T>();
    const T ts = static_cast<T>(scale);
    for_rows(x.numel() / std::max<int64_t>(n, 1), n, [&](int64_t r) {
      const int64_t i = r % tq;
      softmax_row_range(in + r * n, out + r * n, first_key(i, offset, window),
                        end_key(i, n, offset), n, ts);
    });
  });
  return y;
}

Tensor scaled_softmax_backward(const Tensor& y, const Tensor& g, double scale, int64_t offset,
                               int64_t window) {
  ATTEND_CHECK(y.dim() >= (offset < 0 ? 1 : 2) && y.shape() == g.shape(),
               "scaled_softmax_backward: y and g must be the same (..., Tq, Tk) shape");
  const int64_t tq = y.dim() >= 2 ? y.size(-2) : 1, n = y.size(-1);
  Tensor yc = contiguous(y), gc = contiguous(g);
  Tensor dx = empty(y.shape(), y.dtype());
  dispatch_float(y.dtype(), "scaled_softmax_backward", [&]<typename T>() {
    const T *yp = yc.data<T>(), *gp = gc.data<T>();
    T* dp = dx.data<T>();
    const T ts = static_cast<T>(scale);
    for_rows(y.numel() / std::max<int64_t>(n, 1), n, [&](int64_t r) {
      const int64_t i = r % tq;
      softmax_grad_row_range(yp + r * n, gp + r * n, dp + r * n, first_key(i, offset, window),
                             end_key(i, n, offset), n, ts);
    });
  });
  return dx;
}

// Plain softmax is the scaled one at scale 1 with no mask (x * 1 is exact: the same bits).
Tensor softmax(const Tensor& x) {
  last_dim(x, "softmax");
  return scaled_softmax(x, 1.0, -1);
}

Tensor softmax_backward(const Tensor& y, const Tensor& g) {
  last_dim(y, "softmax_backward");
  return scaled_softmax_backward(y, g, 1.0, -1);
}

Tensor log_softmax(const Tensor& x) {
  const int64_t n = last_dim(x, "log_softmax");
  Tensor xc = contiguous(x);
  Tensor y = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "log_softmax", [&]<typename T>() {
    const T* in = xc.data<T>();
    T* out = y.data<T>();
    for_rows(x.numel() / std::max<int64_t>(n, 1), n, [&](int64_t r) {
      const T* xr = in + r * n;
      const T m = row_max(xr, n);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(xr[i] - m));
      const T shift = m + static_cast<T>(std::log(s));
      for (int64_t i = 0; i < n; ++i) out[r * n + i] = xr[i] - shift;
    });
  });
  return y;
}

Tensor log_softmax_backward(const Tensor& y, const Tensor& g) {
  const int64_t n = last_dim(y, "log_softmax_backward");
  Tensor yc = contiguous(y), gc = contiguous(g);
  Tensor dx = empty(y.shape(), y.dtype());
  dispatch_float(y.dtype(), "log_softmax_backward", [&]<typename T>() {
    const T *yp = yc.data<T>(), *gp = gc.data<T>();
    T* dp = dx.data<T>();
    for_rows(y.numel() / std::max<int64_t>(n, 1), n, [&](int64_t r) {
      const T *yr = yp + r * n, *gr = gp + r * n;
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += gr[i];
      for (int64_t i = 0; i < n; ++i) dp[r * n + i] = gr[i] - std::exp(yr[i]) * static_cast<T>(s);
    });
  });
  return dx;
}

namespace {

// One row of each norm, never inlined: the Tensor kernels below and decoding's raw rows
// (layer_norm_row_f32, ...) run the same machine code, so the same bits.
template <typename T>
[[gnu::noinline]] void layer_norm_row(const T* xr, int64_t C, const T* w, const T* b, double eps,
                                      T* y, T* mean_out, T* rstd_out) {
  const double mean = lane_sum(C, [&](int64_t i) { return static_cast<double>(xr[i]); }) / C;
  const double ss = lane_sum(C, [&](int64_t i) {
    const double d = xr[i] - mean;
    return d * d;
  });
  const double rstd = 1.0 / std::sqrt(ss / C + eps);
  *mean_out = static_cast<T>(mean);
  *rstd_out = static_cast<T>(rstd);
  const T tm = static_cast<T>(mean), tr = static_cast<T>(rstd);
  for (int64_t i = 0; i < C; ++i) {
    T v = (xr[i] - tm) * tr * w[i];
    y[i] = b ? v + b[i] : v;
  }
}

template <typename T>
[[gnu::noinline]] void rms_norm_row(const T* xr, int64_t C, const T* w, double eps, T* y,
                                    T* rstd_out) {
  const double ss = lane_sum(C, [&](int64_t i) {
    const double v = xr[i];
    return v * v;
  });
  const double rstd = 1.0 / std::sqrt(ss / C + eps);
  *rstd_out = static_cast<T>(rstd);
  const T tr = static_cast<T>(rstd);
  for (int64_t i = 0; i < C; ++i) y[i] = xr[i] * tr * w[i];
}

}  // namespace

void layer_norm_row_f32(const float* x, int64_t C, const float* w, const float* b, double eps,
                        float* y) {
  float mean, rstd;
  layer_norm_row<float>(x, C, w, b, eps, y, &mean, &rstd);
}

void rms_norm_row_f32(const float* x, int64_t C, const float* w, double eps, float* y) {
  float rstd;
  rms_norm_row<float>(x, C, w, eps, y, &rstd);
}

LayerNormOut layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t C = last_dim(x, "layer_norm");
  ATTEND_CHECK(weight.shape() == Shape{C}, "layer_norm: expected weight of shape (", C,
               ",) for input ", shape_str(x.shape()), ", got ", shape_str(weight.shape()));
  ATTEND_CHECK(!bias.defined() || bias.shape() == Shape{C}, "layer_norm: expected bias of shape (",
               C, ",) for input ", shape_str(x.shape()), ", got ", shape_str(bias.shape()));
  ATTEND_CHECK(weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
               "layer_norm: expected input, weight and bias of one dtype");
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor xc = contiguous(x), wc = contiguous(weight);
  Tensor bc = bias.defined() ? contiguous(bias) : Tensor();
  LayerNormOut o{empty(x.shape(), x.dtype()), empty({rows}, x.dtype()), empty({rows}, x.dtype())};
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    const T *xp = xc.data<T>(), *w = wc.data<T>();
    const T* b = bc.defined() ? bc.data<T>() : nullptr;
    T *yp = o.y.data<T>(), *mp = o.mean.data<T>(), *rp = o.rstd.data<T>();
    for_rows(rows, C, [&](int64_t r) {
      layer_norm_row<T>(xp + r * C, C, w, b, eps, yp + r * C, mp + r, rp + r);
    });
  });
  return o;
}

LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1);
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor gc = contiguous(g), xc = contiguous(x), wc = contiguous(weight);
  LayerNormGrads out{empty(x.shape(), x.dtype()), Tensor(), Tensor()};
  Tensor g_xhat = empty({rows, C}, x.dtype());  // g * xhat, summed over rows for dw
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const T *gp = gc.data<T>(), *xp = xc.data<T>(), *w = wc.data<T>();
    const T *mp = mean.data<T>(), *rp = rstd.data<T>();
    T *dx = out.dx.data<T>(), *gx = g_xhat.data<T>();
    for_rows(rows, C, [&](int64_t r) {
      const T *gr = gp + r * C, *xr = xp + r * C;
      const T m = mp[r], rs = rp[r];
      // Two lane sums (no stores, so they vectorise), then one pass that writes.
      const double sum_d =
          lane_sum(C, [&](int64_t i) { return static_cast<double>(gr[i] * w[i]); });
      const double sum_dx = lane_sum(C, [&](int64_t i) {
        const T xhat = (xr[i] - m) * rs;
        return static_cast<double>(gr[i] * w[i]) * xhat;
      });
      for (int64_t i = 0; i < C; ++i) gx[r * C + i] = gr[i] * ((xr[i] - m) * rs);
      const T mean_d = static_cast<T>(sum_d / C), mean_dx = static_cast<T>(sum_dx / C);
      for (int64_t i = 0; i < C; ++i) {
        const T xhat = (xr[i] - m) * rs;
        dx[r * C + i] = rs * (gr[i] * w[i] - mean_d - xhat * mean_dx);
      }
    });
  });
  out.dweight = sum(g_xhat, {0}, false);
  out.dbias = sum(reshape(gc, {rows, C}), {0}, false);
  return out;
}

CrossEntropyOut cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  ATTEND_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape (N, V), got ",
               shape_str(logits.shape()));
  ATTEND_CHECK(is_integer(targets.dtype()), "cross_entropy: expected integer targets, got ",
               dtype_name(targets.dtype()));
  ATTEND_CHECK(targets.shape() == Shape{logits.size(0)},
               "cross_entropy: expected targets of shape (", logits.size(0), ",) for logits ",
               shape_str(logits.shape()), ", got ", shape_str(targets.shape()));
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor lc = contiguous(logits), tc = contiguous(targets);
  const int64_t count = count_targets(tc, N, V, ignore_index);
  CrossEntropyOut o{empty({}, logits.dtype()), empty({N}, logits.dtype()), count};
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const T* lp = lc.data<T>();
    T* lse = o.lse.data<T>();
    for_rows(N, V, [&](int64_t r) { lse[r] = row_lse(lp + r * V, V); });
    double total = 0;
    for (int64_t r = 0; r < N; ++r) {
      const int64_t t = target_at(tc, r);
      if (t != ignore_index) total += static_cast<double>(lse[r]) - lp[r * V + t];
    }
    // All rows ignored: 0/0 = NaN, as PyTorch.
    o.loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(count));
  });
  return o;
}

Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, int64_t count, int64_t ignore_index) {
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor lc = contiguous(logits), tc = contiguous(targets);
  Tensor dx = empty(logits.shape(), logits.dtype());
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    const T scale = static_cast<T>(g.item() / static_cast<double>(count));
    const T *lp = lc.data<T>(), *ls = lse.data<T>();
    T* dp = dx.data<T>();
    for_rows(N, V, [&](int64_t r) {
      const int64_t t = target_at(tc, r);
      T* dr = dp + r * V;
      if (t == ignore_index) {
        std::fill(dr, dr + V, T(0));
        return;
      }
      row_ce_grad(lp + r * V, dr, V, ls[r], t, scale);
    });
  });
  return dx;
}

LinearCrossEntropyOut linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                                           int64_t ignore_index, bool grad_x, bool grad_w,
                                           int64_t chunk_rows, const Tensor& rows_in,
                                           int64_t rows_from, bool grad_rows) {
  const bool has_rows = rows_in.defined();
  grad_rows = grad_rows && has_rows;
  const bool grads = grad_x || grad_w || grad_rows;
  ATTEND_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
               "linear_cross_entropy: expected x (N, C) and w (V, C), got ", shape_str(x.shape()),
               " and ", shape_str(w.shape()));
  // w bf16: a frozen head (its values widened, tensor/dtype.h), never differentiated
  const bool w16 = w.dtype() == DType::BF16;
  ATTEND_CHECK((x.dtype() == w.dtype() && is_floating(x.dtype())) ||
                   (w16 && x.dtype() == DType::F32),
               "linear_cross_entropy: expected x and w of one floating dtype (or f32 x and a bf16 "
               "w), got ", dtype_name(x.dtype()), " and ", dtype_name(w.dtype()));
  ATTEND_CHECK(!(w16 && grad_w), "linear_cross_entropy: a bf16 w is frozen: no gradient for it");
  ATTEND_CHECK(is_integer(targets.dtype()) && targets.shape() == Shape{x.size(0)},
               "linear_cross_entropy: expected integer targets of shape (", x.size(0), ",), got ",
               shape_str(targets.shape()), " ", dtype_name(targets.dtype()));
  ATTEND_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be positive, got ",
               chunk_rows);
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  const int64_t n_rows = has_rows ? rows_in.size(0) : 0;
  ATTEND_CHECK(!has_rows || (rows_in.dim() == 2 && rows_in.size(1) == C &&
                             rows_in.dtype() == x.dtype() && rows_from >= 0 &&
                             rows_from + n_rows <= V),
               "linear_cross_entropy: expected rows (n, ", C, ") of x's dtype inside w's ", V,
               " rows, got ", shape_str(rows_in.shape()), " ", dtype_name(rows_in.dtype()),
               " from row ", rows_from);
  Tensor xc = contiguous(x), wc = contiguous(w), tc = contiguous(targets);
  const Tensor dc = has_rows ? contiguous(rows_in) : Tensor();
  const int64_t count = count_targets(tc, N, V, ignore_index);
  LinearCrossEntropyOut o{empty({}, x.dtype()), Tensor(), Tensor(), Tensor(), count};
  if (grad_x) o.dx = empty({N, C}, x.dtype());
  if (grad_w) o.dw = empty({V, C}, x.dtype());
  if (grad_rows) o.drows = empty({n_rows, C}, x.dtype());
  dispatch_float(x.dtype(), "linear_cross_entropy", [&]<typename T>() {
    const T* xp = xc.data<T>();
    const T* wp = w16 ? nullptr : wc.data<T>();
    // x w^T into L, and dL w into dx: through the bf16 weight's products for a bf16 w (the
    // bits of gemm on its f32 values)
    const T* dp = has_rows ? dc.data<T>() : nullptr;
    auto logits = [&](int64_t r0, int64_t rows, T* L) {
      // the token rows' part, each logit's finished sum added once
      auto add_rows = [&] {
        if (has_rows)
          gemm<T>(rows, n_rows, C, {xp + r0 * C, C, 1}, {dp, 1, C}, L + rows_from, V, true, true);
      };
      if constexpr (std::is_same_v<T, float>) {
        if (w16) {
          gemm_bf16_weight_t(rows, V, C, {xp + r0 * C, C, 1}, wc.data<uint16_t>(), L, V);
          add_rows();
          return;
        }
      }
      gemm<T>(rows, V, C, {xp + r0 * C, C, 1}, {wp, 1, C}, L, V, true);
      add_rows();
    };
    auto input_grad = [&](int64_t r0, int64_t rows, const T* L) {
      T* dx = o.dx.data<T>() + r0 * C;
      auto add_rows = [&] {  // dL[:, rows] D
        if (has_rows)
          gemm<T>(rows, C, n_rows, {L + rows_from, V, 1}, {dp, C, 1}, dx, C, true, true);
      };
      if constexpr (std::is_same_v<T, float>) {
        if (w16) {
          gemm_bf16_weight(rows, C, V, {L, V, 1}, wc.data<uint16_t>(), dx, C);
          add_rows();
          return;
        }
      }
      gemm<T>(rows, C, V, {L, V, 1}, {wp, C, 1}, dx, C, true);
      add_rows();
    };
    const int64_t rows_max = std::min(N, chunk_rows);
    Tensor buf = empty({rows_max, V}, x.dtype());  // one chunk's logits, then their gradient
    std::vector<T> lse(static_cast<size_t>(rows_max));
    T* L = buf.data<T>();
    const T scale = static_cast<T>(1.0 / static_cast<double>(count));
    double total = 0;
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, N - r0);
      logits(r0, rows, L);  // x w^T
      for_rows(rows, V, [&](int64_t i) { lse[static_cast<size_t>(i)] = row_lse(L + i * V, V); });
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t t = target_at(tc, r0 + i);
        if (t != ignore_index)
          total += static_cast<double>(lse[static_cast<size_t>(i)]) - L[i * V + t];
      }
      if (!grads) continue;
      for_rows(rows, V, [&](int64_t i) {
        const int64_t t = target_at(tc, r0 + i);
        T* row = L + i * V;
        if (t == ignore_index)
          std::fill(row, row + V, T(0));
        else
          row_ce_grad(row, row, V, lse[static_cast<size_t>(i)], t, scale);
      });
      if (grad_x) input_grad(r0, rows, L);  // dL w
      if (grad_w)  // dL^T x
        gemm<T>(V, C, rows, {L, 1, V}, {xp + r0 * C, C, 1}, o.dw.data<T>(), C, true, r0 > 0);
      if (grad_rows)  // dL[:, rows]^T x
        gemm<T>(n_rows, C, rows, {L + rows_from, 1, V}, {xp + r0 * C, C, 1}, o.drows.data<T>(), C,
                true, r0 > 0);
    }
    // All rows ignored: 0/0 = NaN, as PyTorch.
    o.loss.data<T>()[0] = static_cast<T>(total / static_cast<double>(count));
  });
  return o;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  ATTEND_CHECK(weight.dim() == 2, "embedding: expected a weight of shape (V, C), got ",
               shape_str(weight.shape()));
  ATTEND_CHECK(is_integer(ids.dtype()), "embedding: expected integer ids, got ",
               dtype_name(ids.dtype()));
  const int64_t V = weight.size(0), C = weight.size(1), n = ids.numel();
  Tensor idc = contiguous(ids), wc = contiguous(weight);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = target_at(idc, i);
    ATTEND_CHECK(id >= 0 && id < V, "embedding: id ", id, " at position ", i,
                 " is out of range for a table of ", V, " rows");
  }
  Shape shape = ids.shape();
  shape.push_back(C);
  if (weight.dtype() == DType::BF16) {  // a frozen bf16 table: rows widened to f32
    Tensor out = empty(shape, DType::F32);
    const uint16_t* w = wc.data<uint16_t>();
    float* o = out.data<float>();
    for_rows(n, C, [&](int64_t i) { from_bf16_bits(w + target_at(idc, i) * C, o + i * C, C); });
    return out;
  }
  Tensor out = empty(shape, weight.dtype());
  dispatch_float(weight.dtype(), "embedding", [&]<typename T>() {
    const T* w = wc.data<T>();
    T* o = out.data<T>();
    for_rows(n, C, [&](int64_t i) {
      const T* src = w + target_at(idc, i) * C;
      std::copy(src, src + C, o + i * C);
    });
  });
  return out;
}

Tensor embedding_backward(const Tensor& g, const Tensor& ids, int64_t num_rows) {
  const int64_t C = g.size(-1), n = ids.numel();
  Tensor gc = contiguous(g), idc = contiguous(ids);
  Tensor dw = zeros({num_rows, C}, g.dtype());
  dispatch_float(g.dtype(), "embedding_backward", [&]<typename T>() {
    const T* gp = gc.data<T>();
    T* d = dw.data<T>();
    // Rows in order, so repeated ids accumulate in a fixed order.
    for (int64_t i = 0; i < n; ++i) {
      T* dst = d + target_at(idc, i) * C;
      const T* src = gp + i * C;
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  });
  return dw;
}

void embedding_backward_add(const Tensor& g, const Tensor& ids, Tensor& dst) {
  const int64_t C = g.size(-1), n = ids.numel();
  ATTEND_CHECK(dst.dim() == 2 && dst.size(1) == C && dst.dtype() == g.dtype() &&
                   dst.is_contiguous(),
               "embedding_backward_add: expected a contiguous (rows, ", C, ") ",
               dtype_name(g.dtype()), " destination, got ", shape_str(dst.shape()), " ",
               dtype_name(dst.dtype()));
  Tensor gc = contiguous(g), idc = contiguous(ids);
  // Positions grouped by id, each group in position order (a stable sort).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return target_at(idc, a) < target_at(idc, b);
  });
  dispatch_float(g.dtype(), "embedding_backward_add", [&]<typename T>() {
    const T* gp = gc.data<T>();
    T* d = dst.data<T>();
    std::vector<T> sum(static_cast<size_t>(C));
    for (int64_t s = 0; s < n;) {
      const int64_t row = target_at(idc, order[static_cast<size_t>(s)]);
      ATTEND_CHECK(row >= 0 && row < dst.size(0), "embedding_backward_add: id ", row,
                   " is out of range for ", dst.size(0), " rows");
      std::fill(sum.begin(), sum.end(), T(0));
      for (; s < n && target_at(idc, order[static_cast<size_t>(s)]) == row; ++s) {
        const T* src = gp + order[static_cast<size_t>(s)] * C;
        for (int64_t c = 0; c < C; ++c) sum[static_cast<size_t>(c)] += src[c];
      }
      T* out = d + row * C;
      for (int64_t c = 0; c < C; ++c) out[c] = out[c] + sum[static_cast<size_t>(c)];
    }
  });
}

RMSNormOut rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t C = last_dim(x, "rms_norm");
  ATTEND_CHECK(weight.shape() == Shape{C}, "rms_norm: expected weight of shape (", C,
               ",) for input ", shape_str(x.shape()), ", got ", shape_str(weight.shape()));
  ATTEND_CHECK(weight.dtype() == x.dtype(), "rms_norm: expected input and weight of one dtype");
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor xc = contiguous(x), wc = contiguous(weight);
  RMSNormOut o{empty(x.shape(), x.dtype()), empty({rows}, x.dtype())};
  dispatch_float(x.dtype(), "rms_norm", [&]<typename T>() {
    const T *xp = xc.data<T>(), *w = wc.data<T>();
    T *yp = o.y.data<T>(), *rp = o.rstd.data<T>();
    for_rows(rows, C, [&](int64_t r) { rms_norm_row<T>(xp + r * C, C, w, eps, yp + r * C, rp + r); });
  });
  return o;
}

RMSNormGrads rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd) {
  const int64_t C = x.size(-1);
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor gc = contiguous(g), xc = contiguous(x), wc = contiguous(weight);
  RMSNormGrads out{empty(x.shape(), x.dtype()), Tensor()};
  Tensor g_xhat = empty({rows, C}, x.dtype());  // g * xhat, summed over rows for dw
  dispatch_float(x.dtype(), "rms_norm_backward", [&]<typename T>() {
    const T *gp = gc.data<T>(), *xp = xc.data<T>(), *w = wc.data<T>(), *rp = rstd.data<T>();
    T *dx = out.dx.data<T>(), *gx = g_xhat.data<T>();
    for_rows(rows, C, [&](int64_t r) {
      const T *gr = gp + r * C, *xr = xp + r * C;
      const T rs = rp[r];
      const double sum_dx = lane_sum(
          C, [&](int64_t i) { return static_cast<double>(gr[i] * w[i]) * (xr[i] * rs); });
      const T mean_dx = static_cast<T>(sum_dx / C);
      for (int64_t i = 0; i < C; ++i) {
        const T xhat = xr[i] * rs;
        gx[r * C + i] = gr[i] * xhat;
        dx[r * C + i] = rs * (gr[i] * w[i] - xhat * mean_dx);
      }
    });
  });
  out.dweight = sum(g_xhat, {0}, false);
  return out;
}

namespace {

// sigmoid(a) from exp(-|a|) (never overflows).
template <typename T>
[[gnu::always_inline]] inline T sigmoid(T a) {
  const T e = exp_fast<T>(a < T(0) ? a : -a);
  return a < T(0) ? e / (T(1) + e) : T(1) / (T(1) + e);
}

template <typename T>
[[gnu::noinline]] void swiglu_row(const T* a, int64_t H, T* o) {
  const T* b = a + H;
  for (int64_t i = 0; i < H; ++i) o[i] = a[i] * sigmoid(a[i]) * b[i];
}

int64_t swiglu_half(const Tensor& x, const char* op) {
  const int64_t n = last_dim(x, op);
  ATTEND_CHECK(n % 2 == 0, op, ": expected packed [gate | up] with an even last dim, got ",
               shape_str(x.shape()));
  return n / 2;
}

}  // namespace

Tensor swiglu(const Tensor& x) {
  const int64_t H = swiglu_half(x, "swiglu");
  const int64_t rows = H ? x.numel() / (2 * H) : 0;
  Shape shape = x.shape();
  shape.back() = H;
  Tensor xc = contiguous(x), y = empty(shape, x.dtype());
  dispatch_float(x.dtype(), "swiglu", [&]<typename T>() {
    const T* xp = xc.data<T>();
    T* yp = y.data<T>();
    for_rows(rows, 2 * H, [&](int64_t r) { swiglu_row<T>(xp + r * 2 * H, H, yp + r * H); });
  });
  return y;
}

void swiglu_row_f32(const float* x, int64_t H, float* y) { swiglu_row<float>(x, H, y); }

Tensor swiglu_backward(const Tensor& g, const Tensor& x) {
  const int64_t H = swiglu_half(x, "swiglu_backward");
  const int64_t rows = H ? x.numel() / (2 * H) : 0;
  ATTEND_CHECK(g.numel() == rows * H, "swiglu_backward: g ", shape_str(g.shape()),
               " does not fit x ", shape_str(x.shape()));
  Tensor xc = contiguous(x), gc = contiguous(g), dx = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "swiglu_backward", [&]<typename T>() {
    const T *xp = xc.data<T>(), *gp = gc.data<T>();
    T* dp = dx.data<T>();
    for_rows(rows, 2 * H, [&](int64_t r) {
      const T *a = xp + r * 2 * H, *b = a + H, *gr = gp + r * H;
      T *da = dp + r * 2 * H, *db = da + H;
      for (int64_t i = 0; i < H; ++i) {
        const T s = sigmoid(a[i]);
        da[i] = gr[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));
        db[i] = gr[i] * a[i] * s;
      }
    });
  });
  return dx;
}

}  // namespace attend::kernel
