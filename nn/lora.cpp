#include "nn/lora.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::nn {

LoraAdapter::LoraAdapter(int64_t in, int64_t lo_, int64_t hi_, int64_t rank, double alpha,
                         double dropout)
    : scale(alpha / static_cast<double>(rank)) {
  this->in = in, lo = lo_, hi = hi_;
  ATTEND_CHECK(in > 0 && rank > 0 && 0 <= lo && lo < hi, "LoraAdapter: expected in > 0, rank > 0 ",
               "and rows 0 <= lo < hi, got in ", in, ", rank ", rank, ", rows [", lo, ", ", hi,
               ")");
  A = register_parameter("A", zeros({rank, in}));       // (R, in)
  B = register_parameter("B", zeros({hi - lo, rank}));  // (hi - lo, R)
  drop = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor LoraAdapter::delta(const Tensor& x) const {
  // (..., in) -> (..., R) -> (..., hi - lo), then the scale
  return mul(linear(linear(drop->forward(x), A, Tensor()), B, Tensor()), scale);
}

Tensor LoraAdapter::update() const {
  NoGradGuard no_grad;
  return mul(kernel::matmul(B, A), scale);  // (hi - lo, R) @ (R, in), scaled
}

TokenRows::TokenRows(int64_t dim, int64_t lo_, int64_t hi_) {
  ATTEND_CHECK(dim > 0 && 0 <= lo_ && lo_ < hi_, "TokenRows: expected dim > 0 and rows 0 <= lo < "
               "hi, got dim ", dim, ", rows [", lo_, ", ", hi_, ")");
  in = dim, lo = lo_, hi = hi_;
  D = register_parameter("delta", zeros({hi - lo, dim}));
}

Tensor TokenRows::delta(const Tensor& x) const { return linear(x, D, Tensor()); }

Tensor TokenRows::update() const { return D.detach(); }

Tensor TokenRows::rows_of(const Tensor& ids) const {
  // D with a zero row after it, indexed by id - lo inside [lo, hi) and by that zero row
  // elsewhere: the embedding's backward then sums each new token's gradient into its row
  const int64_t n = hi - lo;
  const Tensor idc = kernel::contiguous(kernel::cast(ids, DType::I64));
  Tensor at = empty(idc.shape(), DType::I64);
  const int64_t* src = idc.data<int64_t>();
  int64_t* dst = at.data<int64_t>();
  for (int64_t i = 0; i < idc.numel(); ++i)
    dst[i] = src[i] >= lo && src[i] < hi ? src[i] - lo : n;
  return embedding(cat({D, zeros({1, in}, D.dtype())}, 0), at);
}

namespace {

// One pass over y's last dim: the untouched runs as they are, each adapter's rows plus its
// delta, for adapters on disjoint rows sorted by lo. Those that overlap an earlier one (an
// untied head's LoRA adapter, every row, and its trainable token rows) are left in `rest`.
Tensor add_disjoint(const Tensor& y, const Tensor& x, const std::vector<const Adapter*>& sorted,
                    std::vector<const Adapter*>& rest) {
  const int64_t out = y.size(-1), last = y.dim() - 1;
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (const Adapter* a : sorted) {
    ATTEND_CHECK(a->hi <= out, "LoRA: an adapter on rows [", a->lo, ", ", a->hi,
                 ") passes the output's ", out);
    if (a->lo < at) {
      rest.push_back(a);
      continue;
    }
    if (a->lo > at) pieces.push_back(narrow(y, last, at, a->lo - at));
    pieces.push_back(add(narrow(y, last, a->lo, a->hi - a->lo), a->delta(x)));
    at = a->hi;
  }
  if (pieces.size() == 1 && at == out) return pieces[0];
  if (at < out) pieces.push_back(narrow(y, last, at, out - at));
  return cat(pieces, last);
}

}  // namespace

Tensor add_adapters(const Tensor& y, const Tensor& x,
                    const std::vector<std::shared_ptr<Adapter>>& all) {
  std::vector<const Adapter*> sorted;
  for (const auto& a : all)
    if (a->enabled) sorted.push_back(a.get());
  // Switched off (AdaptersOff), none: the base's y itself.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Adapter* a, const Adapter* b) { return a->lo < b->lo; });
  Tensor out = y;
  while (!sorted.empty()) {  // one pass per layer of overlap (two at most today)
    std::vector<const Adapter*> rest;
    out = add_disjoint(out, x, sorted, rest);
    sorted = std::move(rest);
  }
  return out;
}

namespace {

// Every target a block of this config offers: its Linear, inputs and rows.
enum class Site { c_attn, attn_proj, c_fc, mlp_proj };
struct TargetRows {
  std::string name;
  Site site;
  int64_t in, lo, hi;
};
std::vector<TargetRows> target_rows(const GPTConfig& c) {
  const int64_t C = c.n_embd, kv = c.n_kv_head * (c.n_embd / c.n_head), H = c.mlp_hidden();
  std::vector<TargetRows> t = {{"q", Site::c_attn, C, 0, C},
                               {"k", Site::c_attn, C, C, C + kv},
                               {"v", Site::c_attn, C, C + kv, C + 2 * kv},
                               {"o", Site::attn_proj, C, 0, C}};
  if (c.gated_mlp()) {
    t.push_back({"gate", Site::c_fc, C, 0, H});
    t.push_back({"up", Site::c_fc, C, H, 2 * H});
    t.push_back({"down", Site::mlp_proj, H, 0, C});
  } else {
    t.push_back({"fc", Site::c_fc, C, 0, H});
    t.push_back({"proj", Site::mlp_proj, H, 0, C});
  }
  return t;
}

Linear& site(Block& b, Site s) {
  switch (s) {
    case Site::c_attn:
      return *b.attn->c_attn;
    case Site::attn_proj:
      return *b.attn->c_proj;
    case Site::c_fc:
      return *b.mlp->c_fc;
    case Site::mlp_proj:
      return *b.mlp->c_proj;
  }
  ATTEND_INTERNAL_CHECK(false, "LoRA: an unknown site");
  return *b.attn->c_attn;
}

bool wanted(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

std::vector<std::string> lora_target_names(const GPTConfig& c) {
  std::vector<std::string> out;
  for (const TargetRows& t : target_rows(c)) out.push_back(t.name);
  if (!c.tied_head()) out.push_back("head");  // the LM head, once (not per block)
  return out;
}

int64_t lora_head_parameters(const GPTConfig& c) {
  if (c.lora_rank <= 0) return 0;
  return wanted(parse_lora_targets(c, c.lora_targets), "head")
             ? c.lora_rank * (c.n_embd + c.vocab_size)
             : 0;
}

int64_t lora_token_parameters(const GPTConfig& c) {
  if (c.lora_rank <= 0) return 0;
  return c.lora_new_tokens * c.n_embd * (c.tied_head() ? 1 : 2);
}

int64_t lora_parameters_per_layer(const GPTConfig& c) {
  if (c.lora_rank <= 0) return 0;
  const std::vector<std::string> names = parse_lora_targets(c, c.lora_targets);
  int64_t n = 0;
  for (const TargetRows& t : target_rows(c))
    if (wanted(names, t.name)) n += c.lora_rank * (t.in + (t.hi - t.lo));
  return n;
}

std::vector<std::string> parse_lora_targets(const GPTConfig& c, const std::string& list) {
  const std::vector<std::string> valid = lora_target_names(c);
  std::string names;
  for (const auto& v : valid) names += (names.empty() ? "" : ",") + v;
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    ATTEND_CHECK(item != "head" || !c.tied_head(),
                 "--lora_targets head: this model's LM head is tied to its token embedding "
                 "(wte); an adapter there could not be merged into one weight (a Llama with "
                 "--tie_embeddings false has a head of its own)");
    ATTEND_CHECK(std::find(valid.begin(), valid.end(), item) != valid.end(), "--lora_targets: '",
                 printable(item, 20), "' is not a target of this ", describe(c), " (", names, ")");
    ATTEND_CHECK(std::find(out.begin(), out.end(), item) == out.end(), "--lora_targets: '", item,
                 "' is named twice");
    out.push_back(item);
  }
  ATTEND_CHECK(!out.empty() && list.back() != ',', "--lora_targets: expected names from ", names,
               " separated by commas, got '", printable(list, 40), "'");
  return out;
}

void add_lora(GPT& model, Generator* gen) {
  const GPTConfig& c = model.config;
  if (c.lora_rank <= 0) return;
  const std::vector<std::string> names = parse_lora_targets(c, c.lora_targets);
  for (auto& p : model.parameters()) p.requires_grad_(false);  // the base is frozen
  uint32_t index = 0;  // the base's dropouts keep their indices; the adapters' follow
  for (auto& [_, m] : model.named_modules())
    if (dynamic_cast<Dropout*>(m)) ++index;
  for (size_t l = 0; l < model.transformer->h->size(); ++l) {
    for (const TargetRows& t : target_rows(c)) {
      if (!wanted(names, t.name)) continue;
      const int64_t in = t.in;
      auto a =
          std::make_shared<LoraAdapter>(in, t.lo, t.hi, c.lora_rank, c.lora_alpha, c.lora_dropout);
      a->drop->context = model.dropout_context;
      a->drop->index = index++;
      if (gen) {  // PEFT: kaiming_uniform_(A, a=sqrt(5)), a bound of 1/sqrt(in)
        NoGradGuard no_grad;
        const double bound = 1.0 / std::sqrt(static_cast<double>(in));
        uniform_(a->A, -bound, bound, *gen);
      }
      site((*model.transformer->h)[l], t.site).add_adapter("lora_" + t.name, a);
    }
  }
  if (wanted(names, "head")) {  // the LM head's every row: logits += (alpha / R) x A^T B^T
    const int64_t in = c.n_embd;
    auto a = std::make_shared<LoraAdapter>(in, 0, c.vocab_size, c.lora_rank, c.lora_alpha,
                                           c.lora_dropout);
    a->drop->context = model.dropout_context;
    a->drop->index = index++;
    if (gen) {
      NoGradGuard no_grad;
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      uniform_(a->A, -bound, bound, *gen);
    }
    model.lm_head->add_adapter("lora_head", a);
  }
  if (c.lora_new_tokens > 0) {  // zero deltas: nothing to draw
    const int64_t V = c.vocab_size, lo = V - c.lora_new_tokens;
    auto rows = std::make_shared<TokenRows>(c.n_embd, lo, V);
    model.transformer->wte->add_token_rows(rows);
    if (c.tied_head())
      model.lm_head->share_adapter(rows);  // the head is wte: its rows are these
    else
      model.lm_head->add_adapter("lora_tokens", std::make_shared<TokenRows>(c.n_embd, lo, V));
  }
}

NamedTensors merged_state(const GPT& model) {
  NoGradGuard no_grad;
  // Each table once, keyed by its storage (a tied head is wte: its adapter is wte's rows,
  // added once), then every name of it mapped to the merged copy.
  std::map<const TensorImpl*, Tensor> merged;
  auto merge = [&](const Tensor& weight, const std::vector<std::shared_ptr<Adapter>>& adapters) {
    if (adapters.empty() || merged.count(weight.impl())) return;
    Tensor w = kernel::contiguous(kernel::clone(weight));
    for (const auto& a : adapters) {
      Tensor rows = kernel::narrow(w, 0, a->lo, a->hi - a->lo);
      kernel::add_(rows, a->update());
    }
    merged[weight.impl()] = w;
  };
  for (auto& [name, m] : const_cast<GPT&>(model).named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) merge(lin->weight, lin->adapters);
    if (auto* emb = dynamic_cast<Embedding*>(m); emb && emb->tokens) merge(emb->weight, {emb->tokens});
  }
  NamedTensors out;
  for (auto& [name, t] : model.state_dict()) {
    if (name.find(".lora_") != std::string::npos) continue;
    auto it = merged.find(t.impl());
    out.emplace_back(name, it == merged.end() ? t : it->second);
  }
  return out;
}

std::unique_ptr<GPT> merge_lora(const GPT& model) {
  GPTConfig plain = model.config;
  plain.lora_rank = 0, plain.lora_new_tokens = 0;
  auto out = std::make_unique<GPT>(plain, model.dropout_context->seed, false);
  const NamedTensors state = merged_state(model);
  out->load_state_dict(std::map<std::string, Tensor>(state.begin(), state.end()));
  return out;
}

AdaptersOff::AdaptersOff(const GPT& model) {
  for (auto& [_, m] : const_cast<GPT&>(model).named_modules())
    if (auto* a = dynamic_cast<Adapter*>(m); a && a->enabled) {
      a->enabled = false;
      off_.push_back(a);
    }
}

AdaptersOff::~AdaptersOff() {
  for (Adapter* a : off_) a->enabled = true;
}

int64_t store_frozen_as_bf16(Module& model) {
  int64_t freed = 0;
  for (Tensor& t : model.parameters())  // each tensor once, ties included
    if (!t.requires_grad() && t.dim() == 2 && t.dtype() == DType::F32) {
      freed += t.numel() * 2;
      t.set_data(kernel::cast(t, DType::BF16));
      // the f32 buffer back to the system now, not cached for a size that will not recur:
      // the conversion then never holds both copies of more than one matrix
      release_storage_cache();
    }
  return freed;
}

}  // namespace attend::nn
