#include "nn/attention.h"

#include <cmath>
#include <tuple>
#include <utility>

#include "tensor/kernels.h"

namespace attend::nn {

namespace {

// A copy of heads (B, NH, T, HS) with head h's rows set to replace.at(h) (HS); outside
// autograd (see Attention::replace_head).
Tensor replace_heads(const Tensor& heads, const std::map<int64_t, Tensor>& replace) {
  Tensor out = kernel::clone(kernel::contiguous(heads));
  const int64_t B = out.size(0), NH = out.size(1), T = out.size(2), HS = out.size(3);
  std::vector<std::pair<int64_t, std::vector<double>>> rows;
  for (const auto& [h, v] : replace) {
    ATTEND_CHECK(h >= 0 && h < NH && v.numel() == HS, "replace_head: head ", h, " of ", NH,
                 " with ", v.numel(), " values, expected ", HS);
    rows.emplace_back(h, v.to_vector<double>());
  }
  dispatch_float(out.dtype(), "replace_head", [&]<typename E>() {
    E* p = out.data<E>();
    for (const auto& [h, vals] : rows)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < HS; ++k)
            p[((b * NH + h) * T + t) * HS + k] = static_cast<E>(vals[static_cast<size_t>(k)]);
  });
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> KVCache::append(const Tensor& k_new, const Tensor& v_new,
                                          int64_t window) {
  const int64_t len = length(), add = k_new.size(2);
  if (!k_store_.defined() || start_ + len + add > k_store_.size(2)) {
    // Compact the kept rows to the front, in a store with room for twice what is needed.
    const Shape& s = k_new.shape();
    const int64_t capacity = std::max<int64_t>(16, 2 * (len + add));
    Tensor ks = empty({s[0], s[1], capacity, s[3]}, k_new.dtype());
    Tensor vs = empty({s[0], s[1], capacity, s[3]}, v_new.dtype());
    if (len > 0) {
      kernel::copy_(kernel::narrow(ks, 2, 0, len), k);
      kernel::copy_(kernel::narrow(vs, 2, 0, len), v);
    }
    k_store_ = ks, v_store_ = vs, start_ = 0;
  }
  kernel::copy_(kernel::narrow(k_store_, 2, start_ + len, add), k_new);
  kernel::copy_(kernel::narrow(v_store_, 2, start_ + len, add), v_new);
  const int64_t total = len + add;
  std::pair<Tensor, Tensor> seen{kernel::narrow(k_store_, 2, start_, total),
                                 kernel::narrow(v_store_, 2, start_, total)};
  // A sliding window keeps only the W newest positions for the next call (this call's
  // queries still see all of them).
  const int64_t keep = window > 0 ? std::min(window, total) : total;
  start_ += total - keep;
  k = kernel::narrow(k_store_, 2, start_, keep);
  v = kernel::narrow(v_store_, 2, start_, keep);
  return seen;
}

Attention::Attention(const AttentionConfig& c) : config(c) {
  ATTEND_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, "Attention: n_embd ", c.n_embd,
               " must be divisible by n_head ", c.n_head);
  ATTEND_CHECK(c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0, "Attention: n_head ", c.n_head,
               " must be divisible by n_kv_head ", c.n_kv_head);
  ATTEND_CHECK(c.rope_theta == 0 || (c.rope_theta > 1 && head_size() % 2 == 0),
               "Attention: RoPE needs theta > 1 and an even head size, got theta ", c.rope_theta,
               ", head size ", head_size());
  ATTEND_CHECK(c.window >= 0 && (c.window == 0 || c.causal), "Attention: window ", c.window,
               " needs causal attention and must be >= 0");
  const int64_t kv_dim = c.n_kv_head * head_size();
  c_attn =
      register_module("c_attn", std::make_shared<Linear>(c.n_embd, c.n_embd + 2 * kv_dim, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(c.dropout));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Attention::Heads Attention::project_qkv(const Tensor& x, const Tensor& context,
                                        AttentionTrace* trace, int64_t pos0) const {
  const int64_t C = config.n_embd, NH = config.n_head, KVH = config.n_kv_head;
  const int64_t HS = head_size(), kv_dim = KVH * HS;
  const int64_t B = x.size(0), Tq = x.size(1);
  const bool rope = config.rope_theta > 0;
  Tensor q, k, v;
  if (!context.defined()) {
    Tensor qkv = c_attn->forward(x);  // (B, Tq, C + 2 kv_dim)
    if (trace) trace->qkv_raw = qkv;
    if (rope) {
      if (trace) {
        trace->q_raw = transpose(reshape(narrow(qkv, 2, 0, C), {B, Tq, NH, HS}), 1, 2);
        trace->k_raw = transpose(reshape(narrow(qkv, 2, C, kv_dim), {B, Tq, KVH, HS}), 1, 2);
      }
      qkv = rotary(qkv, HS, C + kv_dim, pos0, config.rope_theta);
    }
    if (trace) trace->qkv = qkv;
    q = narrow(qkv, 2, 0, C);
    k = narrow(qkv, 2, C, kv_dim);
    v = narrow(qkv, 2, C + kv_dim, kv_dim);
  } else {
    ATTEND_CHECK(!rope, "Attention: RoPE is for self-attention only");
    ATTEND_CHECK(context.dim() == 3 && context.size(0) == B && context.size(2) == C,
                 "Attention: expected context of shape (", B, ", Tk, ", C, "), got ",
                 shape_str(context.shape()));
    const Tensor& W = c_attn->weight;
    const Tensor& b = c_attn->bias;
    q = linear(x, narrow(W, 0, 0, C), b.defined() ? narrow(b, 0, 0, C) : Tensor());
    Tensor kv = linear(context, narrow(W, 0, C, 2 * kv_dim),
                       b.defined() ? narrow(b, 0, C, 2 * kv_dim) : Tensor());
    k = narrow(kv, 2, 0, kv_dim);
    v = narrow(kv, 2, kv_dim, kv_dim);
  }
  return {transpose(reshape(q, {B, Tq, NH, HS}), 1, 2),            // (B, NH, Tq, HS)
          transpose(reshape(k, {B, k.size(1), KVH, HS}), 1, 2),    // (B, KVH, Tk, HS)
          transpose(reshape(v, {B, v.size(1), KVH, HS}), 1, 2)};   // (B, KVH, Tk, HS)
}

Tensor Attention::attend_composed(const Tensor& q, const Tensor& k, const Tensor& v,
                                  double scale, int64_t offset, AttentionTrace* trace) const {
  const int64_t NH = config.n_head, KVH = config.n_kv_head, G = NH / KVH, HS = head_size();
  const int64_t B = q.size(0), Tq = q.size(2), Tk = k.size(2);
  // Query heads grouped by the key/value head they read: (B, KVH, G, Tq, HS) against
  // (B, KVH, 1, Tk, HS), the 1 broadcast over the group.
  Tensor qg = reshape(q, {B, KVH, G, Tq, HS});
  Tensor scores = matmul(qg, transpose(unsqueeze(k, 2), -1, -2));  // (B, KVH, G, Tq, Tk)
  scores = reshape(scores, {B, NH, Tq, Tk});
  if (trace) {
    trace->scores = scores;
    trace->q = q;
    trace->k = k;
  }
  // softmax(scores / sqrt(HS)) with the future masked (query i sees keys j <= i + Tk - Tq),
  // fused: one pass instead of mul, masked_fill and softmax (its oracle in the tests).
  Tensor weights = scaled_softmax(scores, scale, offset, config.window);  // rows sum to 1
  if (trace) trace->weights = weights;
  Tensor dropped = attn_dropout->forward(weights);
  Tensor out =
      matmul(reshape(dropped, {B, KVH, G, Tq, Tk}), unsqueeze(v, 2));  // (B, KVH, G, Tq, HS)
  out = reshape(out, {B, NH, Tq, HS});
  if (trace) trace->heads = out;
  if (!replace_head.empty()) out = replace_heads(out, replace_head);
  return out;
}

AttentionOutput Attention::forward(const Tensor& x, const Tensor& context, AttentionTrace* trace,
                                   KVCache* cache) const {
  const int64_t C = config.n_embd, NH = config.n_head, KVH = config.n_kv_head;
  const int64_t HS = head_size(), kv_dim = KVH * HS;
  ATTEND_CHECK(x.dim() == 3 && x.size(2) == C, "Attention: expected x of shape (B, T, ", C,
               "), got ", shape_str(x.shape()));
  const int64_t B = x.size(0), Tq = x.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  const bool use_fused = fused && trace == nullptr && replace_head.empty();
  const int64_t W = config.window;
  const int64_t pos0 = cache ? cache->position : 0;
  if (use_fused && !context.defined() && cache == nullptr) {
    // Self-attention in training and evaluation: straight from the packed projections.
    Tensor qkv = c_attn->forward(x);  // (B, Tq, C + 2 kv_dim)
    if (config.rope_theta > 0)
      qkv = rotary(qkv, HS, C + kv_dim, 0, config.rope_theta);  // q and k turned
    Tensor heads = attention_qkv(qkv, NH, KVH, scale, config.causal ? 0 : -1,
                                 attn_dropout->stream(), W);  // (B, Tq, C)
    return {resid_dropout->forward(c_proj->forward(heads))};
  }
  ATTEND_CHECK(cache == nullptr || !context.defined(),
               "Attention: a key/value cache is for self-attention only");
  auto [q, k, v] = project_qkv(x, context, trace, pos0);
  if (cache) {
    std::tie(k, v) = cache->append(k, v, W);
    cache->position += Tq;
  }
  if (trace) trace->position = pos0;
  const int64_t Tk = k.size(2);
  if (config.causal)
    ATTEND_CHECK(Tk >= Tq,
                 "Attention: causal attention needs at least as many keys as queries, got ", Tk,
                 " keys for ", Tq, " queries");
  const int64_t offset = config.causal ? Tk - Tq : -1;
  Tensor out = use_fused  // cross-attention, or self-attention with a cache
                   ? attention(q, k, v, scale, offset, attn_dropout->stream(), W)
                   : attend_composed(q, k, v, scale, offset, trace);  // (B, NH, Tq, HS)
  out = reshape(transpose(out, 1, 2), {B, Tq, C});  // (B, Tq, NH * HS)
  return {resid_dropout->forward(c_proj->forward(out))};
}

}  // namespace attend::nn
