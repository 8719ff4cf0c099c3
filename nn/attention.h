// Attention, one class for what the attention texts teach.
//
// Shapes: B batch, Tq query positions, Tk key positions, C = n_embd channels,
// NH = n_head query heads, KVH = n_kv_head key/value heads, HS = C / NH head size.
//
//   q = x Wq^T             (B, NH, Tq, HS)     Wq, Wk, Wv packed in c_attn.weight as
//   k = s Wk^T, v = s Wv^T (B, KVH, Tk, HS)    [q | k | v] along the output dim:
//                                               (C + 2 * KVH * HS, C)
//   s = x (self-attention) or a second sequence `context` (cross-attention)
//   scores = q k^T / sqrt(HS)   (B, NH, Tq, Tk): row i is query position i, column j key j
//   causal: scores[i, j] = -inf where j > i + (Tk - Tq)  (the future; exactly 0 after
//           softmax, never a finite sentinel)
//   weights = softmax(scores) over each row (rows sum to 1), then attention dropout
//   out_h = weights_h v_{h / (NH / KVH)}      (B, NH, Tq, HS)
//   y = concat_h(out_h) Wo^T + bo             (B, Tq, C), Wo = c_proj.weight, then
//                                              residual dropout
//
// Llama: with rope_theta > 0, q and k are turned by rotary position embeddings after the
// projection (Note [RoPE] in tensor/kernels/rope.cpp; positions from 0, or from the
// cache's position); the scores then depend on i - j only. Mistral: with window W > 0
// (causal only), query i sees keys j with i - W < j <= i (plus the offset with a cache).
//
// MHA is KVH = NH, MQA is KVH = 1, GQA anything between (NH divisible by KVH): query
// head h reads key/value head h / (NH / KVH), Llama's repeat_kv, computed without
// copying k and v (the key/value heads broadcast over their group in the matmul).
//
// Heads as a sum: concat_h(out_h) Wo^T = sum_h out_h Wo[:, h*HS:(h+1)*HS]^T. Each head
// writes its own slice of c_proj's columns into the residual stream: a value "down"
// projection (Wv rows of the head, C -> HS) then an "up" projection (C <- HS). The tests
// check this identity.
//
// Saved for backward: everything the composed ops save (q, k, v, the softmax output, the
// dropout masks).
#pragma once

#include <map>
#include <utility>

#include "nn/layers.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

struct AttentionConfig {
  int64_t n_embd = 768;    // C
  int64_t n_head = 12;     // NH
  int64_t n_kv_head = 12;  // KVH: NH for MHA, 1 for MQA
  bool causal = true;
  bool bias = true;
  double dropout = 0.0;
  double rope_theta = 0;  // > 0: rotary position embeddings on q and k with this theta
  int64_t window = 0;     // > 0: sliding-window attention over the W newest keys
};

// Keys and values of earlier positions, for decoding one token at a time. With a sliding
// window W it rolls: only the W newest positions are kept (older ones are never seen
// again), so decoding runs past any length in O(W) memory.
struct KVCache {
  Tensor k, v;            // (B, KVH, T_cached, HS): views of the stores' kept rows
  int64_t position = 0;   // positions seen: the next token's position
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
  // Appends this call's rows (B, KVH, Tq, HS) and returns every cached row this call's
  // queries see (views). The rows live in stores with room to spare, doubled when full, so
  // a token costs its own rows, not a copy of the whole cache; under a sliding window W
  // only the W newest rows are kept for the next call (older ones are dropped when the
  // store is compacted).
  std::pair<Tensor, Tensor> append(const Tensor& k_new, const Tensor& v_new, int64_t window);

 private:
  Tensor k_store_, v_store_;  // (B, KVH, capacity, HS)
  int64_t start_ = 0;         // the first kept row in the stores
};

struct AttentionOutput {
  Tensor y;  // (B, Tq, C)
};

// What a forward shows of itself when asked (the explorer reads attention through this,
// so it never re-derives how c_attn packs q, k and v).
struct AttentionTrace {
  Tensor scores;   // (B, NH, Tq, Tk) q_i . k_j, before the 1/sqrt(HS) scale and the mask
  Tensor weights;  // (B, NH, Tq, Tk) after softmax, before dropout; rows sum to 1
  Tensor heads;    // (B, NH, Tq, HS) each head's weighted sum of values, before concat
  Tensor q;        // (B, NH, Tq, HS) the queries (the explorer's neuron view), rotated with RoPE
  Tensor k;        // (B, KVH, Tk, HS) the keys, cached positions included, rotated with RoPE
  Tensor q_raw, k_raw;  // with RoPE: q and k before rotation (shapes of q and k's new rows)
  Tensor qkv_raw;       // (B, Tq, C + 2 KVH HS) c_attn's output (self-attention)
  Tensor qkv;           // the same after RoPE (the same tensor without it)
  int64_t position = 0;  // the first query's position
};

class Attention : public Module {
 public:
  explicit Attention(const AttentionConfig& config);
  // Self-attention when context is undefined; cross-attention on context (B, Tk, C)
  // otherwise. With a cache (self-attention only), x holds the new positions and the
  // cache the earlier ones; it is extended in place.
  // With a trace, its fields are filled.
  AttentionOutput forward(const Tensor& x, const Tensor& context = Tensor(),
                          AttentionTrace* trace = nullptr, KVCache* cache = nullptr) const;
  int64_t head_size() const { return config.n_embd / config.n_head; }

  // Head ablation (evaluation only, outside autograd): head h's output is replaced by
  // replace_head[h], an (HS) vector, at every position (zeros: the head removed; its mean
  // output over some data: the head reduced to a constant). Empty: the plain forward.
  std::map<int64_t, Tensor> replace_head;

  // The fused kernel (attend::attention: no (Tq, Tk) scores or weights are made or kept)
  // whenever nobody asks for them, i.e. without a trace or replace_head. false: always the
  // composed ops (matmul, scaled_softmax, Dropout, matmul), the fused kernel's oracle.
  bool fused = true;

  AttentionConfig config;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> attn_dropout, resid_dropout;

 private:
  // q (B, NH, Tq, HS), k and v (B, KVH, Tk, HS): projected from x (self-attention, RoPE
  // turned from position pos0) or from x and context (cross-attention), split into heads.
  struct Heads {
    Tensor q, k, v;
  };
  Heads project_qkv(const Tensor& x, const Tensor& context, AttentionTrace* trace,
                    int64_t pos0) const;
  // The composed path (the fused kernel's oracle; traces, head ablation): scores, the
  // masked softmax, dropout, weights x values, heads replaced where asked. (B, NH, Tq, HS).
  Tensor attend_composed(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         int64_t offset, AttentionTrace* trace) const;
};

}  // namespace attend::nn
#pragma GCC visibility pop
