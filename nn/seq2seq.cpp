#include "nn/seq2seq.h"

#include <cmath>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/random.h"

namespace attend::nn {

void Seq2SeqConfig::validate() const {
  ATTEND_CHECK(vocab_size >= 1, "Seq2Seq: vocab_size must be >= 1, got ", vocab_size);
  ATTEND_CHECK(block_size >= 1, "Seq2Seq: block_size must be >= 1, got ", block_size);
  ATTEND_CHECK(n_layer >= 1, "Seq2Seq: n_layer must be >= 1, got ", n_layer);
  ATTEND_CHECK(n_head >= 1 && n_embd >= 1 && n_embd % n_head == 0, "Seq2Seq: n_embd ", n_embd,
               " must be a positive multiple of n_head ", n_head);
}

EncoderBlock::EncoderBlock(const Seq2SeqConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
  attn = register_module("attn", std::make_shared<Attention>(AttentionConfig{.n_embd = c.n_embd, .n_head = c.n_head, .n_kv_head = c.n_head, .causal = false, .bias = true, .dropout = 0.0}));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
  mlp = register_module("mlp", std::make_shared<MLP>(c.n_embd, 4 * c.n_embd, true, 0.0));
}

Tensor EncoderBlock::forward(const Tensor& x, AttentionTrace* trace) const {
  Tensor h = add(x, attn->forward(ln_1->forward(x), Tensor(), trace).y);
  return add(h, mlp->forward(ln_2->forward(h)));
}

DecoderBlock::DecoderBlock(const Seq2SeqConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
  attn = register_module("attn", std::make_shared<Attention>(AttentionConfig{.n_embd = c.n_embd, .n_head = c.n_head, .n_kv_head = c.n_head, .causal = true, .bias = true, .dropout = 0.0}));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
  cross = register_module("cross", std::make_shared<Attention>(AttentionConfig{.n_embd = c.n_embd, .n_head = c.n_head, .n_kv_head = c.n_head, .causal = false, .bias = true, .dropout = 0.0}));
  ln_3 = register_module("ln_3", std::make_shared<LayerNorm>(c.n_embd));
  mlp = register_module("mlp", std::make_shared<MLP>(c.n_embd, 4 * c.n_embd, true, 0.0));
}

Tensor DecoderBlock::forward(const Tensor& x, const Tensor& memory, AttentionTrace* self_trace,
                             AttentionTrace* cross_trace) const {
  Tensor h = add(x, attn->forward(ln_1->forward(x), Tensor(), self_trace).y);
  h = add(h, cross->forward(ln_2->forward(h), memory, cross_trace).y);
  return add(h, mlp->forward(ln_3->forward(h)));
}

Seq2Seq::Seq2Seq(const Seq2SeqConfig& c, uint64_t seed) : config((c.validate(), c)) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe_enc = register_module("wpe_enc", std::make_shared<Embedding>(c.block_size, c.n_embd));
  wpe_dec = register_module("wpe_dec", std::make_shared<Embedding>(c.block_size, c.n_embd));
  encoder = register_module("encoder", std::make_shared<ModuleList<EncoderBlock>>());
  decoder = register_module("decoder", std::make_shared<ModuleList<DecoderBlock>>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    encoder->push_back(std::make_shared<EncoderBlock>(c));
    decoder->push_back(std::make_shared<DecoderBlock>(c));
  }
  ln_enc = register_module("ln_enc", std::make_shared<LayerNorm>(c.n_embd));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd));
  // GPT-2's initialisation (see GPT::init_weights).
  Generator gen(seed);
  NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    const bool is_proj =
        name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
    if (p.dim() >= 2)
      normal_(p, 0.0, is_proj ? proj_std : 0.02, gen);
    else
      kernel::fill_(
          p, name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0 ? 1.0 : 0.0);
  }
}

GPTOutput Seq2Seq::forward(const Tensor& src, const Tensor& tgt, const Tensor& targets,
                           Seq2SeqTrace* trace) const {
  for (const Tensor* t : {&src, &tgt}) {
    ATTEND_CHECK(t->dim() == 2 && is_integer(t->dtype()),
                 "Seq2Seq: expected token ids of shape (B, T), got ", shape_str(t->shape()));
    ATTEND_CHECK(t->size(1) >= 1 && t->size(1) <= config.block_size, "Seq2Seq: length ", t->size(1),
                 " is outside [1, block_size ", config.block_size, "]");
    Tensor ids = kernel::cast(*t, DType::I64);
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i)
      ATTEND_CHECK(p[i] >= 0 && p[i] < config.vocab_size, "Seq2Seq: token id ", p[i],
                   " is out of range for vocab_size ", config.vocab_size);
  }
  ATTEND_CHECK(src.size(0) == tgt.size(0), "Seq2Seq: source batch ", src.size(0),
               " and target batch ", tgt.size(0), " differ");
  const int64_t Ts = src.size(1), Tt = tgt.size(1);
  const size_t L = static_cast<size_t>(config.n_layer);
  if (trace) {
    trace->encoder.assign(L, AttentionTrace());
    trace->decoder.assign(L, AttentionTrace());
    trace->cross.assign(L, AttentionTrace());
  }
  Tensor e =
      add(wte->forward(src), wpe_enc->forward(arange(0, static_cast<double>(Ts), 1, DType::I64)));
  for (size_t l = 0; l < L; ++l) e = (*encoder)[l].forward(e, trace ? &trace->encoder[l] : nullptr);
  e = ln_enc->forward(e);
  Tensor d =
      add(wte->forward(tgt), wpe_dec->forward(arange(0, static_cast<double>(Tt), 1, DType::I64)));
  for (size_t l = 0; l < L; ++l)
    d = (*decoder)[l].forward(d, e, trace ? &trace->decoder[l] : nullptr,
                              trace ? &trace->cross[l] : nullptr);
  GPTOutput out;
  out.logits = matmul(ln_f->forward(d), transpose(wte->weight, 0, 1));  // tied head
  if (targets.defined()) out.loss = cross_entropy(out.logits, targets);
  return out;
}

}  // namespace attend::nn
