#include "nn/gpt.h"

#include "nn/lora.h"

#include <cmath>
#include <map>
#include <optional>

#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::nn {

std::string describe(const GPTConfig& c) {
  if (!c.is_llama()) return "GPT";
  if (c.window() > 0) return "Llama (Mistral, sliding window " + std::to_string(c.window()) + ")";
  return "Llama";
}

int64_t GPTConfig::mlp_hidden() const {
  if (hidden_dim > 0) return hidden_dim;
  if (!gated_mlp()) return 4 * n_embd;
  // Llama's rule (Meta's FeedForward): 2/3 of 4C, rounded up to a multiple of multiple_of.
  const int64_t h = 2 * (4 * n_embd) / 3;
  return (h + multiple_of - 1) / multiple_of * multiple_of;
}

void GPTConfig::validate(const std::string& flag) const {
  // Without a flag prefix, messages name the struct: "GPTConfig: n_head ...".
  const std::string who = flag.empty() ? "GPTConfig: " : "";
  auto positive = [&](const char* field, int64_t v) {
    ATTEND_CHECK(v > 0, who, flag, field, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("block_size", block_size);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_kv_head", n_kv_head);
  positive("n_embd", n_embd);
  ATTEND_CHECK(n_embd % n_head == 0, who, flag, "n_embd ", n_embd, " must be divisible by ", flag,
               "n_head ", n_head);
  ATTEND_CHECK(n_head % n_kv_head == 0, who, flag, "n_head ", n_head, " must be divisible by ",
               flag, "n_kv_head ", n_kv_head);
  ATTEND_CHECK(dropout >= 0 && dropout < 1, who, flag, "dropout must be in [0, 1), got ", dropout);
  ATTEND_CHECK(vocab_size <= (int64_t{1} << 31), who, flag, "vocab_size ", vocab_size,
               " exceeds 2^31 (token ids are 32-bit)");
  ATTEND_CHECK(arch == "gpt2" || arch == "llama", who, flag, "arch must be gpt2 or llama, got '",
               printable(arch), "'");
  ATTEND_CHECK(norm_eps > 0 && norm_eps < 1, who, flag, "norm_eps must be in (0, 1), got ",
               norm_eps);
  ATTEND_CHECK(hidden_dim >= 0 && hidden_dim <= (int64_t{1} << 40), who, flag,
               "hidden_dim must be in [0, 2^40] (0: the architecture's rule), got ", hidden_dim);
  ATTEND_CHECK(multiple_of > 0 && multiple_of <= (int64_t{1} << 20), who, flag,
               "multiple_of must be in [1, 2^20], got ", multiple_of);
  ATTEND_CHECK(sliding_window >= 0, who, flag, "sliding_window must be >= 0 (0: off), got ",
               sliding_window);
  if (is_llama()) {
    ATTEND_CHECK(!bias, who, flag, "bias must be false for arch llama (a Llama has no biases)");
    ATTEND_CHECK((n_embd / n_head) % 2 == 0, who, flag, "arch llama needs an even head size for "
                 "RoPE: ", flag, "n_embd ", n_embd, " / ", flag, "n_head ", n_head, " = ",
                 n_embd / n_head);
    ATTEND_CHECK(rope_theta > 1 && rope_theta < 1e12, who, flag,
                 "rope_theta must be in (1, 1e12), got ", rope_theta);
  } else {
    ATTEND_CHECK(tie_embeddings, who, flag,
                 "tie_embeddings must be true for arch gpt2 (GPT-2's lm_head is wte)");
    ATTEND_CHECK(sliding_window == 0, who, flag, "sliding_window needs arch llama, got ",
                 sliding_window, " with arch gpt2");
  }
  ATTEND_CHECK(lora_rank >= 0 && lora_rank <= n_embd, who, flag, "lora_rank must be in [0, ",
               flag, "n_embd ", n_embd, "] (0: no adapters), got ", lora_rank);
  if (lora_rank > 0) {
    ATTEND_CHECK(std::isfinite(lora_alpha) && lora_alpha > 0 && lora_alpha <= 1e6, who, flag,
                 "lora_alpha must be in (0, 1e6], got ", lora_alpha);
    ATTEND_CHECK(lora_dropout >= 0 && lora_dropout < 1, who, flag,
                 "lora_dropout must be in [0, 1), got ", lora_dropout);
    parse_lora_targets(*this, lora_targets);
  }
  ATTEND_CHECK(lora_new_tokens >= 0 && lora_new_tokens < vocab_size, who, flag,
               "lora_new_tokens must be in [0, ", flag, "vocab_size ", vocab_size, "), got ",
               lora_new_tokens);
  ATTEND_CHECK(lora_new_tokens == 0 || lora_rank > 0, who, flag, "lora_new_tokens ",
               lora_new_tokens, " needs ", flag, "lora_rank > 0 (the rows train beside adapters)");
  // Sizes a machine could hold, so that every count below fits int64 without overflow.
  const double C = static_cast<double>(n_embd);
  const double H = hidden_dim > 0 ? static_cast<double>(hidden_dim) : 4 * C;
  const double params = 2 * static_cast<double>(vocab_size) * C +
                        static_cast<double>(block_size) * C +
                        static_cast<double>(n_layer) * (4 * C * C + 3 * H * C + 13 * C + H) + 2 * C;
  ATTEND_CHECK(params < 1e15, who, "the model would have about ", params, " parameters (", flag,
               "n_layer ", n_layer, ", ", flag, "n_embd ", n_embd, ", ", flag, "vocab_size ",
               vocab_size, ", ", flag, "block_size ", block_size,
               "); attend refuses more than 10^15");
}

namespace {

GPTConfig gpt(int64_t V, int64_t block, int64_t layers, int64_t heads, int64_t C,
              double dropout = 0.0) {
  GPTConfig c;
  c.vocab_size = V, c.block_size = block, c.n_layer = layers, c.n_head = heads;
  c.n_kv_head = heads, c.n_embd = C, c.dropout = dropout;
  return c;
}

GPTConfig llama(int64_t V, int64_t block, int64_t layers, int64_t heads, int64_t kv_heads,
                int64_t C, int64_t hidden, double theta, bool tied, int64_t window = 0) {
  GPTConfig c;
  c.arch = "llama", c.bias = false;
  c.vocab_size = V, c.block_size = block, c.n_layer = layers, c.n_head = heads;
  c.n_kv_head = kv_heads, c.n_embd = C, c.hidden_dim = hidden, c.rope_theta = theta;
  c.tie_embeddings = tied, c.sliding_window = window;
  return c;
}

const std::map<std::string, GPTConfig>& presets() {
  static const std::map<std::string, GPTConfig> p = {
      //                    V      block  layer head C
      {"gpt2", gpt(50257, 1024, 12, 12, 768)},
      {"gpt2-medium", gpt(50257, 1024, 24, 16, 1024)},
      {"gpt2-large", gpt(50257, 1024, 36, 20, 1280)},
      {"gpt2-xl", gpt(50257, 1024, 48, 25, 1600)},
      {"gpt3-175b", gpt(50257, 2048, 96, 96, 12288)},
      {"shakespeare-char", gpt(65, 256, 6, 6, 384, 0.2)},
      {"cpu-char", gpt(65, 64, 4, 4, 128)},
      //                            V       block  layer head kvh C     H      theta   tied
      // cpu-char's size: H 352 is Llama's rule at C 128 with multiple_of 32 (llama2.c's)
      {"llama-char", llama(65, 64, 4, 4, 4, 128, 352, 10000.0, true)},
      // llama2.c's stories15M (its model.py ModelArgs: dim 288, multiple_of 32 -> H 768)
      {"stories15m", llama(32000, 256, 6, 6, 6, 288, 768, 10000.0, true)},
      // Meta's Llama 2 7B and Llama 3 8B, Mistral AI's Mistral 7B v0.1 (their config.json)
      {"llama2-7b", llama(32000, 4096, 32, 32, 32, 4096, 11008, 10000.0, false)},
      {"llama3-8b", llama(128256, 8192, 32, 32, 8, 4096, 14336, 500000.0, false)},
      {"mistral-7b", llama(32000, 32768, 32, 32, 8, 4096, 14336, 10000.0, false, 4096)},
  };
  return p;
}

}  // namespace

GPTConfig gpt_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(str("unknown preset '", name, "'; known presets: ", known));
  }
  return it->second;
}

std::vector<std::string> gpt_preset_names() {
  return {"gpt2",     "gpt2-medium", "gpt2-large", "gpt2-xl",   "gpt3-175b", "shakespeare-char",
          "cpu-char", "llama-char",  "stories15m", "llama2-7b", "llama3-8b", "mistral-7b"};
}

ParameterCount count_parameters(const GPTConfig& c) {
  c.validate();
  const int64_t C = c.n_embd, HS = C / c.n_head, kv = c.n_kv_head * HS, H = c.mlp_hidden();
  ParameterCount p;
  p.n_layer = c.n_layer;
  p.token_embedding = c.vocab_size * C;
  p.position_embedding = c.learned_positions() ? c.block_size * C : 0;
  p.lm_head = c.tie_embeddings ? 0 : c.vocab_size * C;
  p.attn_q = C * C;
  p.attn_k = kv * C;
  p.attn_v = kv * C;
  p.attn_o = C * C;
  p.mlp_gate = c.gated_mlp() ? H * C : 0;
  p.mlp_fc = H * C;
  p.mlp_proj = H * C;
  p.layernorms = c.bias ? 4 * C : 2 * C;
  p.biases = c.bias ? (C + 2 * kv) + C + H + C : 0;
  p.final_layernorm = c.bias ? 2 * C : C;
  p.lora = lora_parameters_per_layer(c);
  p.lora_head = lora_head_parameters(c);
  p.lora_tokens = lora_token_parameters(c);
  return p;
}

MLP::MLP(int64_t C, int64_t H, bool bias, double p, bool gated_) : gated(gated_) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(C, gated ? 2 * H : H, bias));
  if (gated) {
    swiglu = register_module("swiglu", std::make_shared<SwiGLU>());
  } else {
    gelu = register_module("gelu", std::make_shared<GELU>());
  }
  c_proj = register_module("c_proj", std::make_shared<Linear>(H, C, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor MLP::forward(const Tensor& x, TapMap* taps) const {
  Tensor fc = c_fc->forward(x);
  Tensor h = gated ? swiglu->forward(fc) : gelu->forward(fc);
  Tensor y = dropout->forward(c_proj->forward(h));
  if (taps) {
    (*taps)["mlp.c_fc"] = fc;
    (*taps)["mlp.act"] = h;
    (*taps)["mlp.c_proj"] = y;
  }
  return y;
}

namespace {

std::shared_ptr<Norm> make_norm(const GPTConfig& c) {
  if (c.norm() == GPTConfig::NormKind::rms_norm)
    return std::make_shared<RMSNorm>(c.n_embd, c.norm_eps);
  return std::make_shared<LayerNorm>(c.n_embd, c.bias, c.norm_eps);
}

}  // namespace

Block::Block(const GPTConfig& c) {
  ln_1 = register_module("ln_1", make_norm(c));
  AttentionConfig a;
  a.n_embd = c.n_embd, a.n_head = c.n_head, a.n_kv_head = c.n_kv_head, a.causal = true;
  a.bias = c.bias, a.dropout = c.dropout;
  if (c.rotary()) a.rope_theta = c.rope_theta;
  a.window = c.window();
  attn = register_module("attn", std::make_shared<Attention>(a));
  ln_2 = register_module("ln_2", make_norm(c));
  mlp = register_module("mlp", std::make_shared<MLP>(c.n_embd, c.mlp_hidden(), c.bias, c.dropout,
                                                     c.gated_mlp()));
}

Tensor Block::forward(const Tensor& x, AttentionTrace* trace, KVCache* cache,
                      TapMap* taps) const {
  AttentionTrace local;
  AttentionTrace* tr = trace ? trace : taps ? &local : nullptr;
  const Tensor h1 = ln_1->forward(x);
  AttentionOutput a = attn->forward(h1, Tensor(), tr, cache);
  Tensor h = add(x, a.y);
  const Tensor h2 = ln_2->forward(h);
  Tensor out = add(h, mlp->forward(h2, taps));
  if (taps) {
    TapMap& t = *taps;
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    const int64_t qk = C + attn->config.n_kv_head * attn->head_size();
    t["ln_1"] = h1;
    t["attn.c_attn"] = tr->qkv_raw;
    if (attn->config.rope_theta > 0) t["attn.rope"] = narrow(tr->qkv, 2, 0, qk);
    t["attn.q"] = tr->q;
    t["attn.scores"] = mul(tr->scores, 1.0 / std::sqrt(static_cast<double>(attn->head_size())));
    t["attn.weights"] = tr->weights;
    t["attn.heads"] = tr->heads;
    t["attn.concat"] = reshape(transpose(tr->heads, 1, 2), {B, T, C});
    t["attn.c_proj"] = a.y;
    t["residual_1"] = h;
    t["ln_2"] = h2;
    t["residual_2"] = out;
  }
  return out;
}

GPT::Transformer::Transformer(const GPTConfig& c) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  if (c.learned_positions())
    wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = register_module("h", std::make_shared<ModuleList<Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
  ln_f = register_module("ln_f", make_norm(c));
}

GPT::GPT(const GPTConfig& c, uint64_t seed, bool init)
    : GPT(c, seed, init ? Init::all : Init::none) {}

GPT::GPT(const GPTConfig& c, uint64_t seed, Init init) : config((c.validate(), c)) {
  // the base's matrices stay unwritten unless drawn here (a checkpoint's replace them)
  std::optional<UnwrittenZeros> unwritten;
  if (init != Init::all) unwritten.emplace();
  transformer = register_module("transformer", std::make_shared<Transformer>(c));
  lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));
  if (c.tie_embeddings) lm_head->tie_weight(transformer->wte->weight);
  attach_dropout_context(*this, dropout_context);
  dropout_context->seed = seed;
  if (init == Init::none) {
    add_lora(*this, nullptr);
    return;
  }
  Generator gen(seed);
  init_weights(gen, init == Init::all);
  add_lora(*this, &gen);  // after the base's draws, which then equal a plain model's
}

void GPT::init_weights(Generator& gen, bool draw_matrices) {
  NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (auto& [name, p] : named_parameters()) {
    const bool is_proj =
        name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
    if (p.dim() >= 2 && !draw_matrices) {
      gen.advance(static_cast<uint64_t>(p.numel()));  // normal_'s blocks, not drawn
    } else if (p.dim() >= 2) {
      normal_(p, 0.0, is_proj ? proj_std : 0.02, gen);
    } else if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
      kernel::fill_(p, 1.0);  // LayerNorm gain
    } else {
      kernel::fill_(p, 0.0);  // biases
    }
  }
}

Tensor GPT::hidden(const Tensor& idx, std::vector<AttentionTrace>* trace,
                   std::vector<KVCache>* caches, Taps* taps) const {
  ATTEND_CHECK(idx.dim() == 2 && is_integer(idx.dtype()),
               "GPT: expected token ids of shape (B, T) and an integer dtype, got ",
               shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t T = idx.size(1);
  const int64_t past = caches && !caches->empty() ? (*caches)[0].position : 0;
  if (config.window() > 0) {
    // The caches roll (W positions); RoPE has no table: any position is fine.
    ATTEND_CHECK(T <= config.block_size, "GPT: ", T, " new positions exceed block_size ",
                 config.block_size);
  } else {
    ATTEND_CHECK(past + T <= config.block_size, "GPT: sequence length ", past + T,
                 " exceeds block_size ", config.block_size,
                 past > 0 ? " (decoding past the context needs a sliding-window model)" : "");
  }
  {
    Tensor ids = kernel::cast(idx, DType::I64);
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i)
      ATTEND_CHECK(p[i] >= 0 && p[i] < config.vocab_size, "GPT: token id ", p[i], " at (", i / T,
                   ", ", i % T, ") is out of range for vocab_size ", config.vocab_size);
  }
  if (caches && caches->empty()) caches->resize(config.n_layer);

  const auto& t = *transformer;
  if (taps) {
    ATTEND_CHECK(taps->layer >= 0 && taps->layer < config.n_layer, "GPT: taps of layer ",
                 taps->layer, " of a model with ", config.n_layer, " layers");
    taps->at.clear();
  }
  Tensor x = t.wte->forward(idx);  // (B, T, C)
  if (taps) taps->at["wte"] = x;
  if (t.wpe) {  // gpt2: + the positions' rows (T, C); llama: RoPE inside attention
    Tensor pos = arange(static_cast<double>(past), static_cast<double>(past + T), 1, DType::I64);
    Tensor pe = t.wpe->forward(pos);
    if (taps) taps->at["wpe"] = pe;
    x = add(x, pe);
  }
  x = t.drop->forward(x);
  if (trace) trace->assign(config.n_layer, AttentionTrace());
  for (int64_t l = 0; l < config.n_layer; ++l) {
    x = (*t.h)[l].forward(x, trace ? &(*trace)[l] : nullptr, caches ? &(*caches)[l] : nullptr,
                          taps && taps->layer == l ? &taps->at : nullptr);
  }
  x = t.ln_f->forward(x);
  if (taps) taps->at["ln_f"] = x;
  return x;
}

GPT::HeadRows GPT::head_rows() const {
  // Fused when the head's adapters that are on are none, or trainable token rows alone.
  HeadRows h;
  const Adapter* on = nullptr;
  int64_t n = 0;
  for (const auto& a : lm_head->adapters)
    if (a->enabled) on = a.get(), ++n;
  if (n == 0) return h;
  if (const auto* rows = dynamic_cast<const TokenRows*>(on); rows && n == 1) {
    h.rows = rows->D, h.from = rows->lo;
    return h;
  }
  h.fused = false;
  return h;
}

GPTOutput GPT::forward(const Tensor& idx, const Tensor& targets, std::vector<AttentionTrace>* trace,
                       std::vector<KVCache>* caches, Taps* taps) const {
  const Tensor x = hidden(idx, trace, caches, taps);
  const int64_t B = idx.size(0), T = idx.size(1);
  GPTOutput out;
  if (targets.defined()) {
    ATTEND_CHECK(targets.shape() == Shape({B, T}), "GPT: expected targets of shape ",
                 shape_str({B, T}), ", got ", shape_str(targets.shape()));
    // A head held in a decoding format (infer::DecodingWeights) makes its logits itself.
    // (A LoRA adapter on the head needs its logits: Linear::forward adds its update to them;
    // trainable token rows go into the fused op.)
    const HeadRows head = head_rows();
    if (!keep_logits && !lm_head->decoding && head.fused) {
      // no (B, T, V) logits
      out.loss = linear_cross_entropy(x, lm_head->weight, targets, -100, 0, head.rows, head.from);
      return out;
    }
  }
  out.logits = lm_head->forward(x);  // (B, T, V)
  if (taps) taps->at["logits"] = out.logits;
  if (targets.defined()) out.loss = cross_entropy(out.logits, targets);
  return out;
}

Tensor GPT::last_logits(const Tensor& idx, std::vector<KVCache>* caches) const {
  const Tensor x = hidden(idx, nullptr, caches);  // (B, T, C)
  return squeeze(lm_head->forward(narrow(x, 1, x.size(1) - 1, 1)), 1);  // (B, 1, V) -> (B, V)
}

Tensor GPT::sequence_log_probs(const Tensor& idx, const Tensor& targets) const {
  ATTEND_CHECK(targets.defined() && targets.shape() == idx.shape() && idx.dim() == 2,
               "GPT::sequence_log_probs: expected ids and targets of one shape (B, T), got ",
               shape_str(idx.shape()), " and ",
               targets.defined() ? shape_str(targets.shape()) : std::string("none"));
  const Tensor y = kernel::cast(targets, DType::I64);
  const int64_t B = idx.size(0), T = idx.size(1);
  const Tensor x = hidden(idx);
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < B; ++b) {
    int64_t counted = 0;
    for (int64_t t = 0; t < T; ++t) counted += y.data<int64_t>()[b * T + t] != -100;
    ATTEND_CHECK(counted > 0, "GPT::sequence_log_probs: row ", b, " has no scored target");
    // The row's mean -log p times its count: the sum of its targets' log p. (A head with
    // an adapter makes its logits, as forward does.)
    const Tensor xb = narrow(x, 0, b, 1), yb = narrow(y, 0, b, 1);
    const HeadRows head = head_rows();
    const Tensor mean =
        head.fused ? linear_cross_entropy(xb, lm_head->weight, yb, -100, 0, head.rows, head.from)
                   : cross_entropy(lm_head->forward(xb), yb);
    rows.push_back(reshape(mul(mean, -static_cast<double>(counted)), {1}));
  }
  return cat(rows, 0);
}

}  // namespace attend::nn
