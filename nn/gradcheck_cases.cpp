#include "nn/gradcheck_cases.h"

#include "nn/gpt.h"
#include "nn/lora.h"
#include "nn/seq2seq.h"

namespace attend::nn {

namespace {

constexpr DType F64 = DType::F64;

// Random f64 values for every parameter (so zero biases and unit gains are not special),
// then gradcheck of f(inputs) with respect to every floating input and every parameter.
using Inputs = std::vector<Tensor>;
GradcheckResult check_module(Module& m, Inputs inputs, Generator& gen,
                             const std::function<Tensor(const Inputs&)>& f) {
  m.to(F64);
  {
    NoGradGuard no_grad;
    for (Tensor& p : m.parameters()) p.set_data(normal(p.shape(), 0.0, 0.5, gen, F64));
  }
  std::vector<Tensor> leaves = m.parameters();
  for (Tensor& x : inputs) {
    if (!is_floating(x.dtype())) continue;
    x = x.detach().requires_grad_();
    leaves.push_back(x);
  }
  return gradcheck_leaves([&](const Inputs&) { return f(inputs); }, leaves);
}

GradcheckCase attention_case(const std::string& name, AttentionConfig c, bool cross) {
  std::string shapes = "C " + std::to_string(c.n_embd) + ", NH " + std::to_string(c.n_head) +
                       ", KVH " + std::to_string(c.n_kv_head) + (cross ? ", Tq 3, Tk 5" : ", T 4");
  return {name, shapes, [c, cross](uint64_t seed) {
            Generator g(seed);
            Attention a(c);
            Inputs in{randn({2, cross ? 3 : 4, c.n_embd}, g, F64)};
            if (cross) in.push_back(randn({2, 5, c.n_embd}, g, F64));
            return check_module(a, in, g, [&](const Inputs& x) {
              return a.forward(x[0], cross ? x[1] : Tensor()).y;
            });
          }};
}

std::vector<GradcheckCase> make_cases() {
  std::vector<GradcheckCase> cases;
  cases.push_back({"nn.Linear", "(2,3,5) -> 4", [](uint64_t seed) {
                     Generator g(seed);
                     Linear m(5, 4);
                     return check_module(m, {randn({2, 3, 5}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.Linear.no_bias", "(3,5) -> 4", [](uint64_t seed) {
                     Generator g(seed);
                     Linear m(5, 4, false);
                     return check_module(m, {randn({3, 5}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  // LoRA (nn/lora.h): every parameter random, B included, so dA and dB are not zero.
  cases.push_back({"nn.LoRA.whole", "(2,3,5) -> 4, R 2", [](uint64_t seed) {
                     Generator g(seed);
                     Linear m(5, 4);
                     m.add_adapter("lora", std::make_shared<LoraAdapter>(5, 0, 4, 2, 3.0, 0.0));
                     return check_module(m, {randn({2, 3, 5}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.LoRA.slices", "(2,3,5) -> [q 0:3 | k 3:5 | v 5:7], R 2 on q and v",
                   [](uint64_t seed) {
                     Generator g(seed);
                     Linear m(5, 7, false);
                     m.add_adapter("lora_v", std::make_shared<LoraAdapter>(5, 5, 7, 2, 4.0, 0.0));
                     m.add_adapter("lora_q", std::make_shared<LoraAdapter>(5, 0, 3, 2, 4.0, 0.0));
                     return check_module(m, {randn({2, 3, 5}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.Embedding", "V 7, C 3, ids (2,4)", [](uint64_t seed) {
                     Generator g(seed);
                     Embedding m(7, 3);
                     Tensor ids = randint({2, 4}, 0, 7, g);
                     return check_module(m, {ids}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.Embedding.token_rows", "V 7, C 3, rows 5:7 train, ids (2,4)",
                   [](uint64_t seed) {
                     Generator g(seed);
                     Embedding m(7, 3);
                     m.add_token_rows(std::make_shared<TokenRows>(3, 5, 7));
                     const Tensor ids = tensor({6, 1, 5, 6, 0, 4, 6, 2}, {2, 4}, DType::I64);
                     return check_module(m, {}, g,
                                         [&](const Inputs&) { return m.forward(ids); });
                   }});
  cases.push_back({"nn.LayerNorm", "(2,3,6)", [](uint64_t seed) {
                     Generator g(seed);
                     LayerNorm m(6);
                     return check_module(m, {randn({2, 3, 6}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.GELU", "(3,4)", [](uint64_t seed) {
                     Generator g(seed);
                     GELU m;
                     return check_module(m, {randn({3, 4}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back(attention_case("nn.Attention.mha.causal", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 4, .causal = true, .bias = true, .dropout = 0.0}, false));
  cases.push_back(
      attention_case("nn.Attention.mha.bidirectional", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 4, .causal = false, .bias = true, .dropout = 0.0}, false));
  cases.push_back(attention_case("nn.Attention.gqa.causal", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 2, .causal = true, .bias = true, .dropout = 0.0}, false));
  cases.push_back(
      attention_case("nn.Attention.mqa.causal.no_bias", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 1, .causal = true, .bias = false, .dropout = 0.0}, false));
  cases.push_back(
      attention_case("nn.Attention.mqa.bidirectional", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 1, .causal = false, .bias = true, .dropout = 0.0}, false));
  cases.push_back(attention_case("nn.Attention.cross.mha", AttentionConfig{.n_embd = 8, .n_head = 2, .n_kv_head = 2, .causal = false, .bias = true, .dropout = 0.0}, true));
  cases.push_back(
      attention_case("nn.Attention.cross.gqa.causal", AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 2, .causal = true, .bias = false, .dropout = 0.0}, true));
  cases.push_back({"nn.MLP", "(2,3,4)", [](uint64_t seed) {
                     Generator g(seed);
                     MLP m(4, 16, true, 0.0);
                     return check_module(m, {randn({2, 3, 4}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.Block", "(2,4,8), NH 2", [](uint64_t seed) {
                     Generator g(seed);
                     GPTConfig c{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true};
                     Block m(c);
                     return check_module(m, {randn({2, 4, 8}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  // Llama and Mistral
  cases.push_back({"nn.RMSNorm", "(2,3,6)", [](uint64_t seed) {
                     Generator g(seed);
                     RMSNorm m(6);
                     return check_module(m, {randn({2, 3, 6}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.MLP.swiglu", "(2,3,4), H 6", [](uint64_t seed) {
                     Generator g(seed);
                     MLP m(4, 6, false, 0.0, true);
                     return check_module(m, {randn({2, 3, 4}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back(attention_case("nn.Attention.rope.gqa",
                                 AttentionConfig{.n_embd = 8, .n_head = 4, .n_kv_head = 2,
                                                 .causal = true, .bias = false, .dropout = 0.0,
                                                 .rope_theta = 10000.0},
                                 false));
  cases.push_back(attention_case("nn.Attention.rope.window",
                                 AttentionConfig{.n_embd = 8, .n_head = 2, .n_kv_head = 1,
                                                 .causal = true, .bias = false, .dropout = 0.0,
                                                 .rope_theta = 100.0, .window = 2},
                                 false));
  cases.push_back({"nn.Block.llama", "(2,4,8), NH 2, KVH 1, H 12", [](uint64_t seed) {
                     Generator g(seed);
                     GPTConfig c = gpt_preset("llama-char");
                     c.vocab_size = 11, c.block_size = 8, c.n_layer = 1, c.n_head = 2;
                     c.n_kv_head = 1, c.n_embd = 8, c.hidden_dim = 12;
                     Block m(c);
                     return check_module(m, {randn({2, 4, 8}, g, F64)}, g,
                                         [&](const Inputs& x) { return m.forward(x[0]); });
                   }});
  cases.push_back({"nn.GPT.llama.loss", "2 layers, GQA, untied, V 11, C 8, (2,5) tokens",
                   [](uint64_t seed) {
                     Generator g(seed);
                     GPTConfig c = gpt_preset("llama-char");
                     c.vocab_size = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 2;
                     c.n_kv_head = 1, c.n_embd = 8, c.hidden_dim = 0, c.multiple_of = 4;
                     c.tie_embeddings = false;
                     GPT m(c, seed);
                     Tensor idx = randint({2, 5}, 0, 11, g), targets = randint({2, 5}, 0, 11, g);
                     return check_module(m, {idx}, g, [&](const Inputs& x) {
                       return m.forward(x[0], targets).loss;
                     });
                   }});
  cases.push_back({"nn.GPT.mistral.loss", "2 layers, window 2, V 11, C 8, (2,5) tokens",
                   [](uint64_t seed) {
                     Generator g(seed);
                     GPTConfig c = gpt_preset("llama-char");
                     c.vocab_size = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 2;
                     c.n_kv_head = 2, c.n_embd = 8, c.hidden_dim = 6, c.sliding_window = 2;
                     GPT m(c, seed);
                     Tensor idx = randint({2, 5}, 0, 11, g), targets = randint({2, 5}, 0, 11, g);
                     return check_module(m, {idx}, g, [&](const Inputs& x) {
                       return m.forward(x[0], targets).loss;
                     });
                   }});
  cases.push_back({"nn.Seq2Seq.loss", "1+1 layers, V 7, C 8, NH 2, Ts 4, Tt 3", [](uint64_t seed) {
                     Generator g(seed);
                     Seq2Seq m({7, 6, 1, 2, 8}, seed);
                     const Tensor src = tensor({1, 4, 0, 6, 2, 2, 5, 3}, {2, 4}, DType::I64);
                     const Tensor tgt = tensor({0, 3, 1, 6, 6, 2}, {2, 3}, DType::I64);
                     const Tensor y = tensor({3, 1, 5, 6, 2, 0}, {2, 3}, DType::I64);
                     return check_module(
                         m, {}, g, [&](const Inputs&) { return m.forward(src, tgt, y).loss; });
                   }});
  cases.push_back({"nn.GPT.loss", "2 layers, V 11, C 8, (2,5) tokens", [](uint64_t seed) {
                     Generator g(seed);
                     GPTConfig c{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_kv_head = 1, .n_embd = 8, .dropout = 0.0, .bias = true};
                     GPT m(c, seed);
                     Tensor idx = randint({2, 5}, 0, 11, g), targets = randint({2, 5}, 0, 11, g);
                     return check_module(m, {idx}, g, [&](const Inputs& x) {
                       return m.forward(x[0], targets).loss;
                     });
                   }});
  // LoRA with trainable token rows: the adapters and the rows' deltas differentiated, the
  // frozen base not; the new tokens (9, 10) both read and predicted
  for (const bool tied : {true, false}) {
    cases.push_back(
        {tied ? "nn.GPT.lora_tokens.loss" : "nn.GPT.llama.lora_tokens.loss",
         tied ? "gpt2, R 2 on q,v, rows 9:11 of wte (the tied head's too), V 11, C 8"
              : "llama untied, R 2 on q,v, rows 9:11 of wte and lm_head, V 11, C 8",
         [tied](uint64_t seed) {
           Generator g(seed);
           GPTConfig c{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2,
                       .n_kv_head = 2, .n_embd = 8, .dropout = 0.0, .bias = true};
           if (!tied) {
             c = gpt_preset("llama-char");
             c.vocab_size = 11, c.block_size = 8, c.n_layer = 1, c.n_head = 2;
             c.n_kv_head = 2, c.n_embd = 8, c.hidden_dim = 6, c.tie_embeddings = false;
           }
           c.lora_rank = 2, c.lora_new_tokens = 2;
           GPT m(c, seed);
           const Tensor idx = tensor({9, 1, 10, 3, 9, 4, 2, 10, 5, 0}, {2, 5}, DType::I64);
           const Tensor targets = tensor({1, 10, 3, 9, 4, 10, 9, 5, 0, 2}, {2, 5}, DType::I64);
           return check_module(m, {}, g, [&](const Inputs&) {
             return m.forward(idx, targets).loss;
           });
         }});
  }
  return cases;
}

}  // namespace

const std::vector<GradcheckCase>& module_gradcheck_cases() {
  static const std::vector<GradcheckCase> cases = make_cases();
  return cases;
}

}  // namespace attend::nn
