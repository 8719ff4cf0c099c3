// The views' test models: small untrained models over a fixed character alphabet, a GPT
// (GQA, 2 layers) and a Llama with Mistral's window (GQA, RoPE, SwiGLU), in eval mode.
#pragma once

#include <memory>

#include "data/tokenizer.h"
#include "nn/gpt.h"

namespace attend::test {

inline std::unique_ptr<data::Tokenizer> view_tokenizer() {
  return data::build_char_tokenizer("abcdefgh ijklmnop\nqrstuvwxyz.,<&\"");
}

struct Fixture {
  std::unique_ptr<data::Tokenizer> tok = view_tokenizer();
  nn::GPT model{nn::GPTConfig{.vocab_size = tok->vocab_size(), .block_size = 32, .n_layer = 2,
                              .n_head = 4, .n_kv_head = 2, .n_embd = 16, .dropout = 0.0,
                              .bias = true},
                3};
  Fixture() { model.eval(); }
};

// A Llama over V tokens: 2 layers, 4 heads on 2 key/value heads, C 16, H 24, window
// `window`, lm_head tied or not.
inline nn::GPTConfig llama_config(int64_t V, int64_t window = 3, bool tied = false) {
  nn::GPTConfig c = nn::gpt_preset("llama-char");
  c.vocab_size = V, c.block_size = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2;
  c.n_embd = 16, c.hidden_dim = 24, c.sliding_window = window, c.tie_embeddings = tied;
  return c;
}

struct LlamaFixture {
  std::unique_ptr<data::Tokenizer> tok = view_tokenizer();
  nn::GPT model{llama_config(tok->vocab_size(), 4, true), 3};
  LlamaFixture() { model.eval(); }
};

}  // namespace attend::test
