#include "nn/gpt.h"

#include <cmath>
#include <map>

#include "tensor/kernels.h"

namespace attend::nn {

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
  // Sizes a machine could hold, so that every count below fits int64 without overflow.
  const double C = static_cast<double>(n_embd);
  const double params = static_cast<double>(vocab_size) * C + static_cast<double>(block_size) * C +
                        static_cast<double>(n_layer) * (12 * C * C + 13 * C) + 2 * C;
  ATTEND_CHECK(params < 1e15, who, "the model would have about ", params, " parameters (", flag,
               "n_layer ", n_layer, ", ", flag, "n_embd ", n_embd, ", ", flag, "vocab_size ",
               vocab_size, ", ", flag, "block_size ", block_size,
               "); attend refuses more than 10^15");
}

namespace {

const std::map<std::string, GPTConfig>& presets() {
  //                      V      block  layer head  kvh   C      dropout bias
  static const std::map<std::string, GPTConfig> p = {
      {"gpt2", {50257, 1024, 12, 12, 12, 768, 0.0, true}},
      {"gpt2-medium", {50257, 1024, 24, 16, 16, 1024, 0.0, true}},
      {"gpt2-large", {50257, 1024, 36, 20, 20, 1280, 0.0, true}},
      {"gpt2-xl", {50257, 1024, 48, 25, 25, 1600, 0.0, true}},
      {"gpt3-175b", {50257, 2048, 96, 96, 96, 12288, 0.0, true}},
      {"shakespeare-char", {65, 256, 6, 6, 6, 384, 0.2, true}},
      {"cpu-char", {65, 64, 4, 4, 4, 128, 0.0, true}},
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
  return {"gpt2",      "gpt2-medium",      "gpt2-large", "gpt2-xl",
          "gpt3-175b", "shakespeare-char", "cpu-char"};
}

ParameterCount count_parameters(const GPTConfig& c) {
  c.validate();
  const int64_t C = c.n_embd, HS = C / c.n_head, kv = c.n_kv_head * HS;
  ParameterCount p;
  p.n_layer = c.n_layer;
  p.token_embedding = c.vocab_size * C;
  p.position_embedding = c.block_size * C;
  p.attn_q = C * C;
  p.attn_k = kv * C;
  p.attn_v = kv * C;
  p.attn_o = C * C;
  p.mlp_fc = 4 * C * C;
  p.mlp_proj = 4 * C * C;
  p.layernorms = c.bias ? 4 * C : 2 * C;
  p.biases = c.bias ? (C + 2 * kv) + C + 4 * C + C : 0;
  p.final_layernorm = c.bias ? 2 * C : C;
  return p;
}

MLP::MLP(int64_t C, bool bias, double p) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(C, 4 * C, bias));
  gelu = register_module("gelu", std::make_shared<GELU>());
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * C, C, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor MLP::forward(const Tensor& x) const {
  return dropout->forward(c_proj->forward(gelu->forward(c_fc->forward(x))));
}

Block::Block(const GPTConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.bias));
  attn = register_module("attn", std::make_shared<Attention>(AttentionConfig{
                                     c.n_embd, c.n_head, c.n_kv_head, true, c.bias, c.dropout}));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(c.n_embd, c.bias, c.dropout));
}

Tensor Block::forward(const Tensor& x, AttentionTrace* trace, KVCache* cache) const {
  AttentionOutput a = attn->forward(ln_1->forward(x), Tensor(), trace, cache);
  Tensor h = add(x, a.y);
  return add(h, mlp->forward(ln_2->forward(h)));
}

GPT::Transformer::Transformer(const GPTConfig& c) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = register_module("h", std::make_shared<ModuleList<Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.bias));
}

GPT::GPT(const GPTConfig& c, uint64_t seed) : config((c.validate(), c)) {
  transformer = register_module("transformer", std::make_shared<Transformer>(c));
  lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));
  lm_head->tie_weight(transformer->wte->weight);
  attach_dropout_context(*this, dropout_context);
  dropout_context->seed = seed;
  Generator gen(seed);
  init_weights(gen);
}

void GPT::init_weights(Generator& gen) {
  NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (auto& [name, p] : named_parameters()) {
    const bool is_proj =
        name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
    if (p.dim() >= 2) {
      normal_(p, 0.0, is_proj ? proj_std : 0.02, gen);
    } else if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
      kernel::fill_(p, 1.0);  // LayerNorm gain
    } else {
      kernel::fill_(p, 0.0);  // biases
    }
  }
}

GPTOutput GPT::forward(const Tensor& idx, const Tensor& targets, std::vector<AttentionTrace>* trace,
                       std::vector<KVCache>* caches) const {
  ATTEND_CHECK(idx.dim() == 2 && is_integer(idx.dtype()),
               "GPT: expected token ids of shape (B, T) and an integer dtype, got ",
               shape_str(idx.shape()), " ", dtype_name(idx.dtype()));
  const int64_t B = idx.size(0), T = idx.size(1);
  const int64_t past = caches && !caches->empty() ? (*caches)[0].length() : 0;
  ATTEND_CHECK(past + T <= config.block_size, "GPT: sequence length ", past + T,
               " exceeds block_size ", config.block_size);
  {
    Tensor ids = kernel::cast(idx, DType::I64);
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i)
      ATTEND_CHECK(p[i] >= 0 && p[i] < config.vocab_size, "GPT: token id ", p[i], " at (", i / T,
                   ", ", i % T, ") is out of range for vocab_size ", config.vocab_size);
  }
  if (caches && caches->empty()) caches->resize(config.n_layer);

  const auto& t = *transformer;
  Tensor pos = arange(static_cast<double>(past), static_cast<double>(past + T), 1, DType::I64);
  Tensor x = add(t.wte->forward(idx), t.wpe->forward(pos));  // (B, T, C) + (T, C)
  x = t.drop->forward(x);
  if (trace) trace->assign(config.n_layer, AttentionTrace());
  for (int64_t l = 0; l < config.n_layer; ++l) {
    x = (*t.h)[l].forward(x, trace ? &(*trace)[l] : nullptr, caches ? &(*caches)[l] : nullptr);
  }
  x = t.ln_f->forward(x);
  GPTOutput out;
  if (targets.defined()) {
    ATTEND_CHECK(targets.shape() == Shape({B, T}), "GPT: expected targets of shape ",
                 shape_str({B, T}), ", got ", shape_str(targets.shape()));
    if (!keep_logits) {
      out.loss = linear_cross_entropy(x, lm_head->weight, targets);  // no (B, T, V) logits
      return out;
    }
  }
  out.logits = lm_head->forward(x);  // (B, T, V)
  if (targets.defined()) out.loss = cross_entropy(out.logits, targets);
  return out;
}

}  // namespace attend::nn
