// The model family: GPT-2 and Llama (Mistral = Llama with a sliding window), one model
// whose architecture is its config (`arch`), nanoGPT's module names for both.
//
// arch gpt2:
//   idx (B, T) token ids
//   x = wte[idx] + wpe[0..T)                 (B, T, C), then dropout
//   x = x + attn(ln_1(x))                    pre-LayerNorm blocks, n_layer of them
//   x = x + mlp(ln_2(x)),  mlp = c_proj(gelu(c_fc(.))) then dropout, C -> 4C -> C
//   logits = ln_f(x) wte^T                   (B, T, V): lm_head is tied to wte
//   loss = cross_entropy(logits, targets)    mean over the B*T positions
//
// Parameter names are GPT-2's state_dict keys: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
// transformer.ln_f.{weight, bias}, lm_head.weight (the same tensor as transformer.wte.weight).
//
// arch llama (Llama 2/3; Mistral with sliding_window > 0):
//   x = wte[idx]                             no position table: positions enter by RoPE
//   x = x + attn(rmsnorm_1(x))               q, k turned by RoPE (rope_theta), GQA/MQA as
//                                            GPT's, sliding window when set
//   x = x + mlp(rmsnorm_2(x)),  mlp = down(silu(gate(x)) * up(x)), C -> H -> C
//   logits = rmsnorm_f(x) lm_head^T          lm_head tied to wte or not (tie_embeddings)
// No biases anywhere; every norm is RMSNorm with eps norm_eps. The module tree keeps
// GPT's names: ln_1, ln_2 and ln_f are the RMSNorms, attn.c_attn packs [q | k | v]
// (q_proj, k_proj, v_proj), attn.c_proj is o_proj, mlp.c_fc packs [gate | up] (gate_proj
// then up_proj, (2H, C)), mlp.c_proj is down_proj. H is hidden_dim, or Llama's rule
// when 0: 2/3 of 4C, rounded up to a multiple of multiple_of (4096 -> 11008 at 256).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nn/attention.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;  // V
  int64_t block_size = 1024;   // longest sequence T
  int64_t n_layer = 12;
  int64_t n_head = 12;     // NH
  int64_t n_kv_head = 12;  // KVH: n_head for MHA, 1 for MQA, between for GQA
  int64_t n_embd = 768;    // C
  double dropout = 0.0;
  bool bias = true;  // biases in Linear layers and LayerNorms (gpt2 only)
  // The architecture and what only some architectures have:
  std::string arch = "gpt2";    // gpt2 | llama
  double norm_eps = 1e-5;       // LayerNorm's or RMSNorm's eps
  int64_t hidden_dim = 0;       // MLP hidden size H; 0: 4C (gpt2) or Llama's rule (llama)
  int64_t multiple_of = 256;    // llama: Llama's rule rounds H up to a multiple of this
  double rope_theta = 10000.0;  // llama: RoPE's base
  bool tie_embeddings = true;   // lm_head shares wte's weight (gpt2: always)
  int64_t sliding_window = 0;   // llama: > 0 is Mistral's sliding-window attention
  // LoRA adapters (nn/lora.h): rank R > 0 adds them to the targets and freezes the rest.
  int64_t lora_rank = 0;              // R; 0: none
  double lora_alpha = 16.0;           // the update is scaled by alpha / R
  double lora_dropout = 0.0;          // dropout on the adapters' input
  std::string lora_targets = "q,v";   // comma-separated: q,k,v,o and gate,up,down or fc,proj
  // LoRA: the last N token rows (tokens a chat template added) train as a delta on the frozen
  // embedding and head (nn/lora.h TokenRows); set by train when the data adds tokens
  int64_t lora_new_tokens = 0;

  bool is_llama() const { return arch == "llama"; }

  // What the architecture has. Code that builds, counts, draws or describes a model asks
  // these, never `arch`: a new family is a preset (and a value of arch) plus the features
  // it adds here.
  enum class NormKind { layer_norm, rms_norm };
  NormKind norm() const { return is_llama() ? NormKind::rms_norm : NormKind::layer_norm; }
  const char* norm_name() const { return is_llama() ? "RMSNorm" : "LayerNorm"; }
  bool learned_positions() const { return !is_llama(); }  // a position table wpe
  bool rotary() const { return is_llama(); }              // RoPE turns q and k
  bool gated_mlp() const { return is_llama(); }           // SwiGLU (gate | up), else GELU
  int64_t window() const { return is_llama() ? sliding_window : 0; }  // 0: none
  bool tied_head() const { return tie_embeddings; }
  bool biases() const { return bias; }
  int64_t mlp_hidden() const;  // H
  // Throws naming the first invalid field and its value; flag ("--") prefixes field names
  // as the command line spells them.
  void validate(const std::string& flag = "") const;
  bool operator==(const GPTConfig&) const = default;
};

// The model's family as one title: "GPT", "Llama", "Llama (Mistral, sliding window 4096)".
std::string describe(const GPTConfig& c);

// Named presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b (for counting only),
// shakespeare-char (nanoGPT's baby GPT: 6 layers, 6 heads, C 384, block 256, dropout 0.2),
// cpu-char (nanoGPT's CPU recipe: 4 layers, 4 heads, C 128, block 64); llama-char (a Llama
// of cpu-char's size and budget), stories15m (llama2.c's smallest: C 288, 6 layers, 6
// heads, H 768, context 256, V 32000), and for counting only llama2-7b, llama3-8b and
// mistral-7b (Meta's and Mistral AI's published configs). The char presets have V = 65,
// tinyshakespeare's character count; a tokenizer sets the real V.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

// Parameter counts from a config alone, without allocating anything.
struct ParameterCount {
  int64_t n_layer = 0;
  int64_t token_embedding = 0;     // V * C (a tied lm_head shares it)
  int64_t position_embedding = 0;  // block_size * C (gpt2; llama has none)
  int64_t lm_head = 0;             // V * C when not tied, else 0
  // Per layer, weight matrices only:
  int64_t attn_q = 0, attn_k = 0, attn_v = 0, attn_o = 0;  // C*C, KVH*HS*C, KVH*HS*C, C*C
  int64_t mlp_gate = 0;             // llama: H*C (gate_proj); gpt2: 0
  int64_t mlp_fc = 0, mlp_proj = 0;  // H*C each (c_fc / up_proj, c_proj / down_proj)
  // Per layer: the two norms (weights and, gpt2, biases) and the Linear biases.
  int64_t layernorms = 0, biases = 0;
  int64_t lora = 0;  // per layer: the LoRA adapters, R (in + rows) per target (nn/lora.h)
  int64_t lora_head = 0;  // the LM head's adapter, R (C + V), when it is a target
  int64_t lora_tokens = 0;  // the trainable token rows, N C (twice for an untied head)
  int64_t final_layernorm = 0;

  int64_t attention_matrices() const { return n_layer * (attn_q + attn_k + attn_v + attn_o); }
  int64_t per_layer() const {
    return attn_q + attn_k + attn_v + attn_o + mlp_gate + mlp_fc + mlp_proj + layernorms + biases +
           lora;
  }
  int64_t total() const {
    return token_embedding + position_embedding + lm_head + lora_head + lora_tokens +
           n_layer * per_layer() +
           final_layernorm;
  }
};
ParameterCount count_parameters(const GPTConfig& config);

// GPT-2's MLP c_proj(gelu(c_fc(x))), or with gated = true Llama's SwiGLU MLP
// c_proj(swiglu(c_fc(x))), c_fc packing [gate | up] as (2H, C).
// Named stages of one forward, for the views: the diagram draws its boxes from these.
// GPT::forward fills "wte", "wpe" (gpt2), "ln_f" and "logits" and, for block `layer`,
// Block::forward's "ln_1", "attn.c_attn" (q | k | v), "attn.rope" (llama: q | k after
// rotation), "attn.q" (B, NH, T, HS), "attn.scores" (q k^T / sqrt(HS), before the mask),
// "attn.weights", "attn.heads", "attn.concat", "attn.c_proj", "residual_1", "ln_2",
// "mlp.c_fc", "mlp.act" (GELU's or SwiGLU's output), "mlp.c_proj", "residual_2". Asking
// for taps runs attention's composed path, as a trace does.
using TapMap = std::map<std::string, Tensor>;
struct Taps {
  int64_t layer = 0;  // the block whose stages are tapped
  TapMap at;
};

class MLP : public Module {
 public:
  MLP(int64_t n_embd, int64_t hidden, bool bias, double dropout, bool gated = false);
  Tensor forward(const Tensor& x, TapMap* taps = nullptr) const;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<GELU> gelu;      // gpt2
  std::shared_ptr<SwiGLU> swiglu;  // llama
  std::shared_ptr<Dropout> dropout;
  const bool gated;
};

class Block : public Module {
 public:
  explicit Block(const GPTConfig& config);
  // trace: when not null, receives this block's attention scores and weights; taps: its
  // named stages (see Taps).
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr, KVCache* cache = nullptr,
                 TapMap* taps = nullptr) const;
  std::shared_ptr<Norm> ln_1, ln_2;  // LayerNorm (gpt2) or RMSNorm (llama)
  std::shared_ptr<Attention> attn;
  std::shared_ptr<MLP> mlp;
};

struct GPTOutput {
  Tensor logits;  // (B, T, V); with targets, only when GPT::keep_logits
  Tensor loss;    // 0-dim; defined when targets were given
};

class GPT : public Module {
 public:
  // Builds the model and initialises it as GPT-2 does, from Generator(seed). With init
  // false the parameters keep their construction values (zeros, norm gains 1) for a caller
  // that sets every one next (a checkpoint's load_state_dict): drawing 124M normal values
  // took a third of `attend sample`'s start-up on GPT-2 124M.
  explicit GPT(const GPTConfig& config, uint64_t seed = 0, bool init = true);
  // What the constructor initialises: everything (GPT(config, seed), init true), nothing
  // (init false), or for_load: a model whose base weights a checkpoint replaces next
  // (finetuning with --init_from). Its matrices are not drawn: the generator is advanced
  // past their draws (one Philox block an element), so LoRA's adapters, drawn after them,
  // are a full initialisation's bit for bit; the matrices stay the zeros of a fresh
  // mapping, whose pages are not resident until written (GPT-2 124M: 497 MB the load then
  // never holds beside the checkpoint's copy). Norm gains and biases are set as usual.
  enum class Init { all, none, for_load };
  GPT(const GPTConfig& config, uint64_t seed, Init init);

  // idx (B, T) integer ids. With caches (one per layer, for decoding), idx holds the new
  // positions only and positions continue from the caches' position. Past block_size
  // only a sliding-window model decodes (its caches roll); others refuse. With a trace,
  // it receives one AttentionTrace per layer.
  GPTOutput forward(const Tensor& idx, const Tensor& targets = Tensor(),
                    std::vector<AttentionTrace>* trace = nullptr,
                    std::vector<KVCache>* caches = nullptr, Taps* taps = nullptr) const;

  // forward's logits at the last position only, (B, V): the LM head on the last row of
  // hidden(), not on all T (sampling after a prompt needs no other). The same bits as
  // forward(idx, {}, trace, caches).logits[:, T - 1] in every weight format (the products
  // give a row the same bits whatever rows come with it).
  Tensor last_logits(const Tensor& idx, std::vector<KVCache>* caches = nullptr) const;

  // forward up to the final norm: (B, T, C), what the LM head reads.
  Tensor hidden(const Tensor& idx, std::vector<AttentionTrace>* trace = nullptr,
                std::vector<KVCache>* caches = nullptr, Taps* taps = nullptr) const;

  // Per row b of idx (B, T): the sum over its scored positions (targets != -100) of
  // log p(targets[b, t] | idx[b, ..t]), (B,) f32, differentiable: a response's
  // log-probability given its prompt (DPO). Every row must score at least one target.
  Tensor sequence_log_probs(const Tensor& idx, const Tensor& targets) const;

  // GPT-2 initialisation (llama2.c's for a Llama too): N(0, 0.02) for Linear and
  // Embedding weights, N(0, 0.02 / sqrt(2 n_layer)) for every c_proj weight, zero biases,
  // norm gains 1.
  // With draw_matrices false, the matrices' draws are skipped (the generator advanced
  // past them) and the matrices left as they are.
  void init_weights(Generator& gen, bool draw_matrices = true);

  // With targets, forward computes the LM head and the loss in one chunked op
  // (linear_cross_entropy): the (B, T, V) logits are never made, and out.logits stays
  // undefined. true: the logits (lm_head) and cross_entropy as two ops, logits returned.
  bool keep_logits = false;

  const GPTConfig config;
  std::shared_ptr<DropoutContext> dropout_context = std::make_shared<DropoutContext>();

  struct Transformer : Module {
    explicit Transformer(const GPTConfig& c);
    std::shared_ptr<Embedding> wte, wpe;  // wpe: gpt2 only
    std::shared_ptr<Dropout> drop;
    std::shared_ptr<ModuleList<Block>> h;
    std::shared_ptr<Norm> ln_f;
  };
  std::shared_ptr<Transformer> transformer;
  std::shared_ptr<Linear> lm_head;  // weight tied to transformer->wte->weight unless untied

 private:
  // How the loss reads the head: fused (linear_cross_entropy) unless a LoRA adapter on it
  // is on; rows: the trainable token rows (nn/lora.h) the fused op adds, if any.
  struct HeadRows {
    bool fused = true;
    Tensor rows;
    int64_t from = 0;
  };
  HeadRows head_rows() const;
};

}  // namespace attend::nn
#pragma GCC visibility pop
