// Fused attention, forward and backward (declared in tensor/kernels.h).
//
// Per (batch, query head) and block of kRows query rows [r0, r1), with the keys [k0, nk)
// visible to some row of the block (k0 = 0 but under a sliding window; nk all Tk, or
// r1 - 1 + offset + 1 under the causal mask; K[:nk] below stands for K[k0:nk]):
//   forward   S = Q_blk K[:nk]^T                 (gemm, rows x nk, in a per-thread buffer)
//             P = scaled_softmax(S) row by row     (kernels/rowmath.h, as the composed op)
//             Pd = P * mask                        (dropout, drawn from the same stream)
//             O_blk = Pd V[:nk]                    (gemm, written into out)
//   backward  per (batch, key/value head), which owns dK and dV of that head, over its G
//             query heads and their blocks:
//             S, P recomputed as above; dPd = dO_blk V[:nk]^T; dP = dPd * mask
//             dS = (P (dP - sum_j dP_j P_j)) scale  (rowmath.h, as scaled_softmax_backward)
//             dV[:nk] += Pd^T dO_blk;  dQ_blk = dS K[:nk];  dK[:nk] += dS^T Q_blk
// Keys outside [k0, nk) get no work; masked keys inside a block have P = 0 and dS = 0. Tasks
// write disjoint outputs and each sums in a fixed order, so the result does not depend on
// the thread count. With the same gemm K-blocking as the composed path the forward gives
// its bits; the gradients sum in another order (tests compare them with a tolerance and
// gradcheck in f64).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/kernels/gemm_rows.h"
#include "tensor/kernels/rowmath.h"
#include "tensor/parallel.h"

namespace attend::kernel {

namespace {

constexpr int64_t kRows = 32;  // query rows per block

// (B, H, T, HS) through its strides; the last stride is 1.
struct Heads {
  int64_t B, H, T, HS, sb, sh, st;
  int64_t sd = 1;  // between a row's elements: 1 but for one query's keys as columns (K^T)
};

Heads heads_of(const Tensor& x, const char* op, const char* name) {
  ATTEND_CHECK(x.dim() == 4, op, ": expected ", name, " of shape (B, H, T, HS), got ",
               shape_str(x.shape()));
  ATTEND_CHECK(x.size(3) <= 1 || x.strides()[3] == 1, op, ": ", name,
               " must have a last stride of 1, got ", x.strides()[3]);
  return {x.size(0),      x.size(1),      x.size(2),     x.size(3),
          x.strides()[0], x.strides()[1], x.strides()[2]};
}

struct Plan {
  Heads q, k, v;
  int64_t G, nblk;
};

Plan plan(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t offset,
          const DropoutStream& drop) {
  Plan p{heads_of(q, op, "q"), heads_of(k, op, "k"), heads_of(v, op, "v"), 0, 0};
  ATTEND_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && is_floating(q.dtype()), op,
               ": expected q, k, v of one floating dtype");
  ATTEND_CHECK(p.k.B == p.q.B && p.v.B == p.q.B && p.k.H == p.v.H && p.k.T == p.v.T &&
                   p.k.HS == p.q.HS && p.v.HS == p.q.HS && p.k.H > 0 && p.q.H % p.k.H == 0,
               op, ": q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
               shape_str(v.shape()), " do not fit (B, NH, Tq, HS), (B, KVH, Tk, HS) twice");
  ATTEND_CHECK(offset < 0 || p.k.T >= p.q.T, op,
               ": causal attention needs at least as many keys as queries, got ", p.k.T,
               " keys for ", p.q.T, " queries");
  if (drop.p > 0) check_dropout_range(drop, p.q.B * p.q.H * p.q.T * p.k.T);
  ATTEND_CHECK(p.k.T > 0, op, ": expected at least one key");
  p.G = p.q.H / p.k.H;
  p.nblk = (p.q.T + kRows - 1) / kRows;
  return p;
}

// K and V are packed for the GEMM once per (batch, key/value head) and thread, not once per
// query block (gemm_prepacked: the same bits as gemm), where the keys fit one packed column
// block (the GEMM's NC, 3072; gemm_prepacked refuses more).
constexpr int64_t kMaxPrepackedKeys = 3072;

// C (M, n) = A @ B[:k, :n], B (K, N): from B's panels packed once by pack_b_all when
// `packed` is set, else read through B's strides. The same bits either way. B as bf16 bits
// (a decoder's cache under bf16 products): gemm_bf16_bits, the bits of its f32 values.
template <typename T, typename KV>
void product(int64_t M, int64_t n, int64_t k, MatrixRef<T> A, const KV* packed, int64_t K,
             int64_t N, MatrixRef<KV> B, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<KV, uint16_t>) {
    gemm_bf16_bits(M, n, k, A, B, C, ldc);
  } else if (packed) {
    gemm_prepacked<T>(M, n, k, A, packed, K, N, C, ldc);
  } else {
    gemm<T>(M, n, k, A, B, C, ldc, false);
  }
}

// The keys a block of query rows [r0, r0 + rows) needs: [k0, nk) (first_key and end_key in
// kernels/rowmath.h; both grow with the row).
struct KeyRange {
  int64_t k0, nk;
};
inline KeyRange block_keys(int64_t r0, int64_t rows, int64_t Tk, int64_t offset, int64_t window) {
  return {first_key(r0, offset, window), end_key(r0 + rows - 1, Tk, offset)};
}

// A per-thread buffer that only grows (slot 0..5).
template <typename T>
T* scratch(int slot, int64_t n) {
  thread_local std::vector<T> buffers[6];
  auto& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// The forward on checked operands (forward_impl, one_query).
// grain: (batch, head, block) tasks a thread must have before threads are used. KV: K's and
// V's elements, T or (under bf16 products, T float) bf16 bits.
template <typename T, typename KV = T>
void forward_core(const Plan& p, const Heads& ho, const T* Q, const KV* K, const KV* V, T* O,
                  double scale, int64_t offset, const DropoutStream& drop, int64_t window,
                  int64_t grain = 1) {
  const int64_t NH = p.q.H, Tq = p.q.T, Tk = p.k.T, HS = p.q.HS;
  const T ts = static_cast<T>(scale);
  // A few query rows (a token at a time while sampling) read K and V in place through the
  // few-rows products (gemm_rows.h): packing them would read the cache, write a copy and
  // read that, every token and layer.
  const bool dropping = drop.p > 0, prepack = std::is_same_v<KV, T> && p.k.sd == 1 &&
                                              Tk <= kMaxPrepackedKeys && window == 0 &&
                                              Tq > gemm_detail::kMaxFewRows;
  parallel_for(p.q.B * NH * p.nblk, grain, [&](int64_t s, int64_t e) {
    T* S = scratch<T>(0, kRows * Tk);
    T* M = dropping ? scratch<T>(1, Tk) : nullptr;
    KV* PK = nullptr;                                                     // K^T
    KV* PV = nullptr;                                                     // V
    int64_t packed_for = -1;                                              // b * KVH + kvh
    for (int64_t task = s; task < e; ++task) {
      const int64_t blk = task % p.nblk, bh = task / p.nblk, h = bh % NH, b = bh / NH;
      const int64_t kvh = h / p.G, r0 = blk * kRows, rows = std::min(kRows, Tq - r0);
      const auto [k0, nk] = block_keys(r0, rows, Tk, offset, window);
      const int64_t w = nk - k0;  // the block's keys
      const T* qb = Q + b * p.q.sb + h * p.q.sh + r0 * p.q.st;
      const KV* kb = K + b * p.k.sb + kvh * p.k.sh;
      const KV* vb = V + b * p.v.sb + kvh * p.v.sh;
      T* ob = O + b * ho.sb + h * ho.sh + r0 * ho.st;
      if constexpr (std::is_same_v<KV, T>) {
        if (prepack && packed_for != b * p.k.H + kvh) {
          if (!PK) {
            PK = scratch<T>(3, packed_b_size<T>(HS, Tk));
            PV = scratch<T>(4, packed_b_size<T>(Tk, HS));
          }
          pack_b_all<T>(HS, Tk, {kb, 1, p.k.st}, PK);
          pack_b_all<T>(Tk, HS, {vb, p.v.st, 1}, PV);
          packed_for = b * p.k.H + kvh;
        }
      }
      const KV* kw = kb + k0 * p.k.st;  // key k0 on
      const KV* vw = vb + k0 * p.v.st;
      product<T, KV>(rows, w, HS, {qb, p.q.st, 1}, PK, HS, Tk, {kw, p.k.sd, p.k.st}, S, w);
      for (int64_t i = 0; i < rows; ++i) {
        T* y = S + i * w;
        const int64_t lo = first_key(r0 + i, offset, window) - k0;
        const int64_t valid = end_key(r0 + i, Tk, offset) - k0;
        softmax_row_range(y, y, lo, valid, w, ts);
        if (dropping && valid > lo) {
          dropout_fill(drop, static_cast<uint64_t>((bh * Tq + r0 + i) * Tk + k0 + lo), valid - lo,
                       M + lo);
          for (int64_t j = lo; j < valid; ++j) y[j] *= M[j];
        }
      }
      product<T, KV>(rows, HS, w, {S, w, 1}, PV, Tk, HS, {vw, p.v.st, 1}, ob, ho.st);
    }
  });
}

// Multiply-adds of one query's scores (heads x keys x head size) from which its attention
// takes threads.
constexpr int64_t kOneQueryThreadWork = int64_t{1} << 17;

template <typename T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t offset,
                  const DropoutStream& drop, const Tensor& out, int64_t window) {
  const Plan p = plan("attention", q, k, v, offset, drop);
  const Heads ho = heads_of(out, "attention", "out");
  ATTEND_CHECK(out.shape() == q.shape() && out.dtype() == q.dtype(),
               "attention: out must have q's shape and dtype");
  forward_core<T>(p, ho, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), scale, offset,
                  drop, window);
}

template <typename T>
void backward_impl(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                   int64_t offset, const DropoutStream& drop, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, int64_t window) {
  const Plan p = plan("attention_backward", q, k, v, offset, drop);
  const Heads hg = heads_of(g, "attention_backward", "g"),
              hdq = heads_of(dq, "attention_backward", "dq"),
              hdk = heads_of(dk, "attention_backward", "dk"),
              hdv = heads_of(dv, "attention_backward", "dv");
  ATTEND_CHECK(g.shape() == q.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() &&
                   dv.shape() == v.shape() && g.dtype() == q.dtype() && dq.dtype() == q.dtype() &&
                   dk.dtype() == q.dtype() && dv.dtype() == q.dtype(),
               "attention_backward: g, dq, dk, dv must have the shapes and dtype of q, q, k, v");
  const int64_t NH = p.q.H, KVH = p.k.H, Tq = p.q.T, Tk = p.k.T, HS = p.q.HS;
  const T *Q = q.data<T>(), *K = k.data<T>(), *V = v.data<T>(), *GO = g.data<T>();
  T *DQ = dq.data<T>(), *DK = dk.data<T>(), *DV = dv.data<T>();
  const T ts = static_cast<T>(scale);
  const bool dropping = drop.p > 0, prepack = Tk <= kMaxPrepackedKeys && window == 0;
  parallel_for(p.q.B * KVH, 1, [&](int64_t s, int64_t e) {
    T* P = scratch<T>(0, kRows * Tk);
    T* D = scratch<T>(2, kRows * Tk);
    T* M = dropping ? scratch<T>(1, Tk) : nullptr;
    T* PK = prepack ? scratch<T>(3, packed_b_size<T>(HS, Tk)) : nullptr;   // K^T
    T* PVT = prepack ? scratch<T>(4, packed_b_size<T>(HS, Tk)) : nullptr;  // V^T
    T* PKK = prepack ? scratch<T>(5, packed_b_size<T>(Tk, HS)) : nullptr;  // K
    for (int64_t task = s; task < e; ++task) {
      const int64_t b = task / KVH, kvh = task % KVH;
      const T* kb = K + b * p.k.sb + kvh * p.k.sh;
      const T* vb = V + b * p.v.sb + kvh * p.v.sh;
      if (prepack) {
        pack_b_all<T>(HS, Tk, {kb, 1, p.k.st}, PK);
        pack_b_all<T>(HS, Tk, {vb, 1, p.v.st}, PVT);
        pack_b_all<T>(Tk, HS, {kb, p.k.st, 1}, PKK);
      }
      T* dkb = DK + b * hdk.sb + kvh * hdk.sh;
      T* dvb = DV + b * hdv.sb + kvh * hdv.sh;
      for (int64_t t = 0; t < Tk; ++t) {
        std::fill(dkb + t * hdk.st, dkb + t * hdk.st + HS, T(0));
        std::fill(dvb + t * hdv.st, dvb + t * hdv.st + HS, T(0));
      }
      for (int64_t h = kvh * p.G; h < (kvh + 1) * p.G; ++h) {
        const int64_t bh = b * NH + h;
        for (int64_t blk = 0; blk < p.nblk; ++blk) {
          const int64_t r0 = blk * kRows, rows = std::min(kRows, Tq - r0);
          const auto [k0, nk] = block_keys(r0, rows, Tk, offset, window);
          const int64_t w = nk - k0;  // the block's keys
          const T* qb = Q + b * p.q.sb + h * p.q.sh + r0 * p.q.st;
          const T* gb = GO + b * hg.sb + h * hg.sh + r0 * hg.st;
          const T* kw = kb + k0 * p.k.st;
          const T* vw = vb + k0 * p.v.st;
          product<T>(rows, w, HS, {qb, p.q.st, 1}, PK, HS, Tk, {kw, 1, p.k.st}, P, w);
          product<T>(rows, w, HS, {gb, hg.st, 1}, PVT, HS, Tk, {vw, 1, p.v.st}, D, w);
          for (int64_t i = 0; i < rows; ++i) {
            T* y = P + i * w;
            T* d = D + i * w;
            const int64_t lo = first_key(r0 + i, offset, window) - k0;
            const int64_t valid = end_key(r0 + i, Tk, offset) - k0;
            softmax_row_range(y, y, lo, valid, w, ts);
            const bool drop_row = dropping && valid > lo;
            if (drop_row) {
              dropout_fill(drop, static_cast<uint64_t>((bh * Tq + r0 + i) * Tk + k0 + lo),
                           valid - lo, M + lo);
              for (int64_t j = lo; j < valid; ++j) d[j] *= M[j];
            }
            softmax_grad_row_range(y, d, d, lo, valid, w, ts);
            if (drop_row)
              for (int64_t j = lo; j < valid; ++j) y[j] *= M[j];
          }
          // dV[k0:nk] += Pd^T dO_blk, dQ_blk = dS K[k0:nk], dK[k0:nk] += dS^T Q_blk
          gemm<T>(w, HS, rows, {P, 1, w}, {gb, hg.st, 1}, dvb + k0 * hdv.st, hdv.st, false, true);
          T* dqb = DQ + b * hdq.sb + h * hdq.sh + r0 * hdq.st;
          product<T>(rows, HS, w, {D, w, 1}, PKK, Tk, HS, {kw, p.k.st, 1}, dqb, hdq.st);
          gemm<T>(w, HS, rows, {D, 1, w}, {qb, p.q.st, 1}, dkb + k0 * hdk.st, hdk.st, false, true);
        }
      }
    }
  });
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                       int64_t offset, const DropoutStream& drop, const Tensor& out,
                       int64_t window) {
  ATTEND_CHECK(window >= 0 && (window == 0 || offset >= 0), "attention: window ", window,
               " needs a causal mask and must be >= 0");
  dispatch_float(q.dtype(), "attention", [&]<typename T>() {
    forward_impl<T>(q, k, v, scale, offset, drop, out, window);
  });
}

namespace {

// Whether KVH heads of Tk rows of HS elements, heads `head` apart and rows `row` apart (the
// elements adjacent), overlap nowhere: heads apart and rows within them, or the reverse.
bool rows_apart(int64_t KVH, int64_t Tk, int64_t HS, int64_t head, int64_t row) {
  return (row >= HS && head >= (Tk - 1) * row + HS) || (head >= HS && row >= (KVH - 1) * head + HS);
}

template <typename E>
void one_query(const float* q, int64_t NH, int64_t HS, int64_t KVH, int64_t Tk,
               const OneQueryKV<E>& kv, double scale, int64_t window, float* out) {
  constexpr const char* name =
      std::is_same_v<E, float> ? "attention_one_query (f32)" : "attention_one_query (bf16 bits)";
  ATTEND_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0 && HS > 0 && Tk > 0 && window >= 0, name, ": ",
               NH, " query heads, ", KVH, " key/value heads of ", Tk, " keys, head size ", HS,
               ", window ", window);
  // Keys as rows (k_dim 1) or as columns (k_key 1: per head HS rows of Tk keys, k_dim apart).
  const bool key_rows = kv.k_dim == 1 && rows_apart(KVH, Tk, HS, kv.k_head, kv.k_key);
  const bool key_columns = kv.k_key == 1 && kv.k_dim >= Tk && kv.k_head >= (HS - 1) * kv.k_dim + Tk;
  ATTEND_CHECK(key_rows || key_columns, name, ": keys with heads ", kv.k_head, " apart, keys ",
               kv.k_key, " apart, elements ", kv.k_dim, " apart overlap or are neither rows nor ",
               "columns (", KVH, " heads of ", Tk, " keys of ", HS, ")");
  ATTEND_CHECK(rows_apart(KVH, Tk, HS, kv.v_head, kv.v_key), name, ": values with heads ",
               kv.v_head, " apart, rows ", kv.v_key, " apart overlap (", KVH, " heads of ", Tk,
               " rows of ", HS, ")");
  if constexpr (std::is_same_v<E, uint16_t>)
    ATTEND_CHECK(gemm_precision() == GemmPrecision::bf16, name, ": bf16 keys and values under ",
                 gemm_precision_name(gemm_precision()), " products");
  const Heads hq{1, NH, 1, HS, NH * HS, HS, HS};
  const Heads hk{1, KVH, Tk, HS, 0, kv.k_head, kv.k_key, kv.k_dim};  // (one batch: sb unread)
  const Heads hv{1, KVH, Tk, HS, 0, kv.v_head, kv.v_key};
  const Plan p{hq, hk, hv, NH / KVH, 1};
  // Threads over the heads only for long enough rows of keys: below, a fork and join of two
  // cost more than they save (bench_decode_attention, 2026-12-07: at 1 / 2 threads, GPT-2's
  // shape 9.1 / 10.2-12.5 us a layer at 64 keys, 38-49 / 24-35 at 256; stories15m's 13.2 /
  // 10.7-14.4 at 256 keys, 54 / 38-45 at 1,024).
  // In a team (Note [One region for many loops], as the decoder runs a token) the other
  // threads take their heads for a post, 0.2 us, not a fork: always worth it.
  const int64_t keys = Tk - first_key(0, Tk - 1, window);
  const bool split = team_active() || NH * keys * HS >= kOneQueryThreadWork;
  const int64_t grain = split ? 1 : NH;
  forward_core<float, E>(p, hq, q, kv.k, kv.v, out, scale, Tk - 1, DropoutStream{}, window, grain);
}

}  // namespace

void attention_one_query(const float* q, int64_t NH, int64_t HS, int64_t KVH, int64_t Tk,
                         const OneQueryKV<float>& kv, double scale, int64_t window, float* out) {
  one_query(q, NH, HS, KVH, Tk, kv, scale, window, out);
}

void attention_one_query(const float* q, int64_t NH, int64_t HS, int64_t KVH, int64_t Tk,
                         const OneQueryKV<uint16_t>& kv, double scale, int64_t window, float* out) {
  one_query(q, NH, HS, KVH, Tk, kv, scale, window, out);
}

void attention_one_query_f32(const float* q, int64_t NH, int64_t HS, const float* k, const float* v,
                             int64_t KVH, int64_t Tk, int64_t head_stride, int64_t row_stride,
                             double scale, int64_t window, float* out) {
  one_query(q, NH, HS, KVH, Tk,
            OneQueryKV<float>{k, v, head_stride, row_stride, 1, head_stride, row_stride}, scale,
            window, out);
}

void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                        double scale, int64_t offset, const DropoutStream& drop, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, int64_t window) {
  ATTEND_CHECK(window >= 0 && (window == 0 || offset >= 0), "attention_backward: window ", window,
               " needs a causal mask and must be >= 0");
  dispatch_float(q.dtype(), "attention_backward", [&]<typename T>() {
    backward_impl<T>(g, q, k, v, scale, offset, drop, dq, dk, dv, window);
  });
}

}  // namespace attend::kernel
