#include "infer/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "nn/lora.h"
#include "tensor/kernels.h"
#include "tensor/kernels/gemm.h"
#include "tensor/parallel.h"
#include "tensor/stored_weight.h"

namespace attend::infer {

namespace {

const float* f32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Why a Linear cannot be multiplied here, or empty.
std::string linear_refused(const std::string& name, const nn::Linear& lin) {
  for (const auto& a : lin.adapters)
    if (a->enabled) return name + " has an adapter on";
  if (!lin.decoding) return name + " has no decoding weights (no DecodingWeights holds the model)";
  if (lin.decoding->format() != WeightFormat::q8_0 &&
      lin.decoding->format() != StoredWeight::format_for_products())
    return name + "'s decoding weights are " + weight_format_name(lin.decoding->format()) +
           ", the products now " + weight_format_name(StoredWeight::format_for_products());
  return "";  // (a bias's dtype: unsupported() checks every parameter is contiguous f32)
}

// The most cache (f32 rows) start() sizes for the steps it is told of: past it, doubling. A
// command's --max_new_tokens may be far past what a reply uses, and the keys' columns touch
// every page of the buffer with the first token.
constexpr int64_t kSizedBytes = int64_t{256} << 20;

// Elements of a new key (and value) a thread of a team writes at least.
constexpr int64_t kCacheWriteGrain = 64;

}  // namespace

std::string Decoder::unsupported(const nn::GPT& model) {
  const nn::GPTConfig& c = model.config;
  if (model.is_training()) return "the model is in training mode";
  for (const auto& [name, p] : model.named_parameters())
    if (p.dtype() != DType::F32 || !p.is_contiguous()) return name + " is not contiguous f32";
  const auto& t = *model.transformer;
  if (t.wte->tokens && t.wte->tokens->enabled) return "the embedding has token rows on";
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const nn::Block& b = (*t.h)[l];
    const std::string at = "layer " + std::to_string(l);
    if (!b.attn->replace_head.empty()) return at + " has a replaced head";
    if (!b.attn->fused) return at + " runs attention's composed ops";
    if (!b.attn->config.causal) return at + "'s attention is not causal";
    for (const auto& [name, lin] :
         {std::pair<std::string, const nn::Linear*>{"attn.c_attn", b.attn->c_attn.get()},
          {"attn.c_proj", b.attn->c_proj.get()},
          {"mlp.c_fc", b.mlp->c_fc.get()},
          {"mlp.c_proj", b.mlp->c_proj.get()}})
      if (std::string why = linear_refused(at + " " + name, *lin); !why.empty()) return why;
  }
  return linear_refused("lm_head", *model.lm_head);
}

Decoder::Decoder(const nn::GPT& model)
    : model_(model),
      C_(model.config.n_embd),
      NH_(model.config.n_head),
      KVH_(model.config.n_kv_head),
      HS_(model.config.n_embd / model.config.n_head),
      H_(model.config.mlp_hidden()),
      V_(model.config.vocab_size),
      window_(model.config.window()) {
  const std::string why = unsupported(model);
  ATTEND_CHECK(why.empty(), "Decoder: ", why);
  const int64_t kv = KVH_ * HS_;
  layers_ = static_cast<size_t>(model.config.n_layer);
  kvd_ = kv;
  x_.resize(C_), h_.resize(C_), att_.resize(C_), y_.resize(C_);
  qkv_.resize(C_ + 2 * kv), rot_.resize(qkv_.size());
  mlp_.resize(model.config.gated_mlp() ? 2 * H_ : H_), act_.resize(H_);
  logits_.resize(V_);
  bf16_ = StoredWeight::format_for_products() == WeightFormat::bf16;
  key_columns_ = !bf16_;
  if (bf16_) key_row_.resize(static_cast<size_t>(kv));
}

// Note [A bf16 cache beside the f32 one]. Under bf16 products attention's two products round
// every key and value to bf16 as they read them: each token, every cached key and value of
// every layer, 2.5x an f32 token's attention on GPT-2's shape (0.8-1.0 against 0.4 ms a
// token, docs/numbers.md 2026-12-07 12:38). So the decoder rounds a key and a value once, as
// they enter the cache, into bf16 bits laid out as the f32 ones beside them, and attention
// reads the bits (kernel::attention_one_query on OneQueryKV<uint16_t>): the same values
// (rounding is idempotent), so the same logits, from half the bytes and with nothing rounded
// a token. The f32 rows stay the cache's truth: finish() hands back the values GPT::forward
// would have kept, whatever the precision it then runs under. 1.5x the f32 cache's memory,
// under bf16 products only. Attention then reads only the bits, so the f32 keys are kept as
// rows (key_columns_ false), as the values are: a new key is written as one column (its
// bits), not two. A small gain: the timer's bucket for the new key went 0.142-0.150 ->
// 0.130-0.139 ms a GPT-2 token (2 threads; f32's is 0.05). The rest of it was page faults:
// the bits' buffer ended in 4 KB pages (regrow now rounds it to whole huge pages;
// docs/numbers.md 2026-12-07 19:31 and 22:52).

void Decoder::start(const std::vector<nn::KVCache>& caches, int64_t more) {
  ATTEND_CHECK(caches.size() == layers_, "Decoder: ", caches.size(), " caches for ", layers_,
               " layers");
  ATTEND_CHECK(more >= 0, "Decoder: ", more, " steps expected");
  const int64_t len = caches[0].length();
  length_ = 0;
  regrow(rows_for(len + 1, len + std::min(more, std::numeric_limits<int64_t>::max() - len)));
  for (size_t l = 0; l < layers_; ++l) {
    const nn::KVCache& c = caches[l];
    ATTEND_CHECK(c.length() == len && c.position == caches[0].position,
                 "Decoder: the layers' caches disagree");
    if (len == 0) continue;
    ATTEND_CHECK(c.k.dim() == 4 && c.k.size(0) == 1 && c.k.size(1) == KVH_ && c.k.size(3) == HS_ &&
                     c.k.dtype() == DType::F32,
                 "Decoder: a cache of shape ", shape_str(c.k.shape()));
    const Tensor ks = kernel::contiguous(c.k), vs = kernel::contiguous(c.v);  // (1, KVH, len, HS)
    float* const k = keys(l);
    float* const v = values(l);
    for (int64_t h = 0; h < KVH_; ++h)
      for (int64_t t = 0; t < len; ++t) {
        const float* kr = ks.data<float>() + (h * len + t) * HS_;
        for (int64_t i = 0; i < HS_; ++i) key_at(k, t, h * HS_ + i) = kr[i];
        std::memcpy(v + t * kvd_ + h * HS_, vs.data<float>() + (h * len + t) * HS_,
                    static_cast<size_t>(HS_) * sizeof(float));
      }
    if (bf16_) {  // the keys' bits as columns, from the f32 rows
      uint16_t* const kb = key_bits(l);
      for (int64_t t = 0; t < len; ++t) {
        kernel::to_bf16_bits(k + t * kvd_, key_row_.data(), kvd_);
        for (int64_t j = 0; j < kvd_; ++j) kb[j * capacity_ + t] = key_row_[static_cast<size_t>(j)];
      }
      kernel::to_bf16_bits(v, value_bits(l), len * kvd_);
    }
  }
  length_ = len;
  position_ = caches[0].position;
}

void Decoder::finish(std::vector<nn::KVCache>& caches) const {
  caches.assign(layers_, nn::KVCache());
  if (length_ == 0) return;
  for (size_t l = 0; l < layers_; ++l) {
    Tensor k = empty({1, KVH_, length_, HS_}), v = empty({1, KVH_, length_, HS_});
    const float* const kc = keys(l);
    for (int64_t h = 0; h < KVH_; ++h)
      for (int64_t t = 0; t < length_; ++t) {
        float* kr = k.data<float>() + (h * length_ + t) * HS_;
        for (int64_t i = 0; i < HS_; ++i) kr[i] = key_at(kc, start_ + t, h * HS_ + i);
        std::memcpy(v.data<float>() + (h * length_ + t) * HS_,
                    values(l) + (start_ + t) * kvd_ + h * HS_,
                    static_cast<size_t>(HS_) * sizeof(float));
      }
    caches[l].append(k, v, window_);  // at most W rows: all kept
    caches[l].position = position_;
  }
}

// Note [The cache sized once]. Room for the rows the caller expects (`expected`, start's: with
// a sliding window at most 2 (W + 1), and at most kSizedBytes), or else twice the rows a step
// needs (a window's buffer then holds 2 (W + 1) rows, compacted when full); at least a huge
// page's worth, at most the context's without a window, and made of whole huge pages (small
// buffers of 4 KB pages faulted 3.4 times a token on stories15m's shape). A "row" here is a
// position's keys and values in every layer. A regrow copies the kept rows into a fresh
// mapping, and the keys are columns, so the next token writes across every page of a
// layer's keys: in a fresh process `attend sample` of 128 GPT-2 tokens regrew once in its
// steps (57 -> 142 rows), 18-27 ms, 0.14-0.21 ms a token (docs/numbers.md 2026-12-07 19:31).
// Sized once for the tokens to come, nothing is copied and each page is touched once; in one
// process, whose later runs reuse pages freed by earlier ones, the two were within the noise.
int64_t Decoder::rows_for(int64_t needed, int64_t expected) const {
  const int64_t row_bytes =
      2 * static_cast<int64_t>(layers_) * kvd_ * static_cast<int64_t>(sizeof(float));
  const int64_t page_rows = (kHugePageBytes + row_bytes - 1) / row_bytes;
  if (window_ > 0) expected = std::min(expected, 2 * (window_ + 1));  // the most a window needs
  expected = std::min(expected, kSizedBytes / row_bytes);
  int64_t rows = std::max({int64_t{16}, expected > needed ? expected : 2 * needed, page_rows});
  if (window_ == 0) rows = std::min(rows, std::max(needed, model_.config.block_size));
  if (rows * row_bytes >= kHugePageBytes) {  // rows covering every byte of the whole pages
    const int64_t pages = (rows * row_bytes + kHugePageBytes - 1) / kHugePageBytes;
    rows = (pages * kHugePageBytes + row_bytes - 1) / row_bytes;
  }
  return rows;
}

// A buffer of `capacity` rows, the kept ones first (as nn::KVCache::append compacts).
void Decoder::regrow(int64_t capacity) {
  const int64_t blocks = 2 * static_cast<int64_t>(layers_);
  Tensor fresh = empty({blocks, capacity, kvd_});
  // The bits in whole huge pages: rows_for fits the f32 rows to them, and the bits, half those
  // bytes, would end in part of one, where the kernel maps 4 KB pages, each faulting as the
  // rows reach it (GPT-2, bf16, 1 thread: 0.07-0.14 ms a token writing the new key and value
  // against 0.04-0.05 in whole pages, 2026-12-07 23:40). Only data() reads it: flat.
  const int64_t page = kHugePageBytes / static_cast<int64_t>(sizeof(uint16_t));
  Tensor fresh_bits =
      bf16_ ? empty({(blocks * capacity * kvd_ + page - 1) / page * page}, DType::BF16) : Tensor();
  // The kept rows of a block (b odd: values, rows of kvd_; b even: keys, as rows or as columns,
  // kvd_ rows of `capacity`) to the front of the fresh block.
  auto move = [&]<typename E>(const Tensor& from, const Tensor& to, bool key_columns) {
    for (int64_t b = 0; b < blocks; ++b) {
      const E* src = from.data<E>() + b * capacity_ * kvd_;
      E* dst = to.data<E>() + b * capacity * kvd_;
      if (b % 2 == 1 || !key_columns) {
        std::memcpy(dst, src + start_ * kvd_, static_cast<size_t>(length_ * kvd_) * sizeof(E));
        continue;
      }
      for (int64_t j = 0; j < kvd_; ++j)
        std::memcpy(dst + j * capacity, src + j * capacity_ + start_,
                    static_cast<size_t>(length_) * sizeof(E));
    }
  };
  if (length_ > 0) {
    move.operator()<float>(kv_, fresh, key_columns_);
    if (bf16_) move.operator()<uint16_t>(kvb_, fresh_bits, true);
  }
  kv_ = std::move(fresh);
  kvb_ = std::move(fresh_bits);
  capacity_ = capacity, start_ = 0;
}

void Decoder::product(const nn::Linear& lin, const float* x, float* y) const {
  ATTEND_CHECK(lin.decoding->multiply_row(x, y), "Decoder: a product its weights do not take");
  if (lin.bias.defined()) {  // kernel::add_'s y + b
    const float* b = lin.bias.data<float>();
    const int64_t n = lin.decoding->out_features();
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] + b[j];
  }
}

const float* Decoder::step(int64_t token) {
  const nn::GPTConfig& c = model_.config;
  ATTEND_CHECK(token >= 0 && token < V_, "GPT: token id ", token,
               " at (0, 0) is out of range for vocab_size ", V_);
  ATTEND_CHECK(window_ > 0 || position_ + 1 <= c.block_size, "GPT: sequence length ",
               position_ + 1, " exceeds block_size ", c.block_size,
               " (decoding past the context needs a sliding-window model)");
  ATTEND_CHECK(bf16_ == (StoredWeight::format_for_products() == WeightFormat::bf16),
               "Decoder: made under ", bf16_ ? "bf16" : "f32", " products, stepped under ",
               weight_format_name(StoredWeight::format_for_products()), " ones");
  // The products and attention split over threads kept for the whole token: one region, not
  // 61 (Note [One region for many loops]).
  with_team([&] { run(token); });
  return logits_.data();
}

void Decoder::run(int64_t token) {
  const auto& t = *model_.transformer;
  const int64_t kv = KVH_ * HS_;
  const float* wte = t.wte->weight.data<float>() + token * C_;
  if (t.wpe) {
    const float* wpe = t.wpe->weight.data<float>() + position_ * C_;
    for (int64_t i = 0; i < C_; ++i) x_[i] = wte[i] + wpe[i];
  } else {
    std::memcpy(x_.data(), wte, static_cast<size_t>(C_) * sizeof(float));
  }
  auto norm = [&](const nn::Norm& n, const float* in, float* out) {
    if (const auto* ln = dynamic_cast<const nn::LayerNorm*>(&n))
      kernel::layer_norm_row_f32(in, C_, f32(ln->weight), f32(ln->bias), ln->eps, out);
    else
      kernel::rms_norm_row_f32(in, C_, f32(n.weight), n.eps, out);
  };
  // Rows this call's query sees: the kept ones and its own, after them.
  const int64_t seen = length_ + 1;
  if (start_ + seen > capacity_) regrow(rows_for(seen));
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS_));
  for (size_t l = 0; l < layers_; ++l) {
    const nn::Block& b = (*t.h)[static_cast<int64_t>(l)];
    const nn::Attention& a = *b.attn;
    norm(*b.ln_1, x_.data(), h_.data());
    product(*a.c_attn, h_.data(), qkv_.data());
    const float* qkv = qkv_.data();
    if (a.config.rope_theta > 0) {
      kernel::rotary_row_f32(qkv_.data(), rot_.data(), C_ + 2 * kv, HS_, C_ + kv, position_,
                             a.config.rope_theta);
      qkv = rot_.data();
    }
    // The new position: column `col` of the keys (under bf16 products the bits' column and the
    // f32 keys' row), that row of the values. A column is a line per element, lines the
    // weights' stream evicted since the last token, each written from DRAM: in a team the
    // threads write their shares of them at once (a software prefetch ahead of c_attn's
    // product cost as much to issue as it saved, 2026-12-07 19:31).
    const int64_t col = start_ + length_;
    float* const k = keys(l);
    uint16_t* const kb = bf16_ ? key_bits(l) : nullptr;
    const float* const key = qkv + C_;
    const float* const value = qkv + C_ + kv;
    parallel_for(kv, team_active() ? kCacheWriteGrain : kv, [&](int64_t j0, int64_t j1) {
      const size_t n = static_cast<size_t>(j1 - j0);
      std::memcpy(values(l) + col * kvd_ + j0, value + j0, n * sizeof(float));
      if (key_columns_)
        for (int64_t j = j0; j < j1; ++j) k[j * capacity_ + col] = key[j];
      else
        std::memcpy(k + col * kvd_ + j0, key + j0, n * sizeof(float));
      if (!bf16_) return;
      uint16_t* const bits = key_row_.data() + j0;
      kernel::to_bf16_bits(key + j0, bits, j1 - j0);
      for (int64_t j = j0; j < j1; ++j) kb[j * capacity_ + col] = bits[j - j0];
      kernel::to_bf16_bits(value + j0, value_bits(l) + col * kvd_ + j0, j1 - j0);
    });
    if (bf16_) {
      kernel::attention_one_query(
          qkv, NH_, HS_, KVH_, seen,
          kernel::OneQueryKV<uint16_t>{kb + start_, value_bits(l) + start_ * kvd_, HS_ * capacity_,
                                       1, capacity_, HS_, kvd_},
          scale, window_, att_.data());
    } else {
      kernel::attention_one_query(
          qkv, NH_, HS_, KVH_, seen,
          kernel::OneQueryKV<float>{k + start_, values(l) + start_ * kvd_, HS_ * capacity_, 1,
                                    capacity_, HS_, kvd_},
          scale, window_, att_.data());
    }
    product(*a.c_proj, att_.data(), y_.data());
    for (int64_t i = 0; i < C_; ++i) x_[i] = x_[i] + y_[i];  // h = x + attn
    norm(*b.ln_2, x_.data(), h_.data());
    product(*b.mlp->c_fc, h_.data(), mlp_.data());
    if (b.mlp->gated)
      kernel::swiglu_row_f32(mlp_.data(), H_, act_.data());
    else
      kernel::gelu_f32(mlp_.data(), act_.data(), H_);
    product(*b.mlp->c_proj, act_.data(), y_.data());
    for (int64_t i = 0; i < C_; ++i) x_[i] = x_[i] + y_[i];  // x = h + mlp
  }
  // A sliding window keeps only the W newest rows for the next token.
  const int64_t kept = window_ > 0 ? std::min(window_, seen) : seen;
  start_ += seen - kept;
  length_ = kept;
  ++position_;
  norm(*t.ln_f, x_.data(), h_.data());
  product(*model_.lm_head, h_.data(), logits_.data());
}

}  // namespace attend::infer
