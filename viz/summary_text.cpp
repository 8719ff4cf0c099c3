#include "viz/summary_text.h"

#include <spdlog/fmt/fmt.h>

namespace attend::viz {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u ? fmt::format("{:.2f} {}", b, units[u]) : fmt::format("{:.0f} {}", b, units[u]);
}

namespace {

std::string module_table(const nn::ModelSummary& s) {
  const std::string rule(110, '-');
  std::string o = fmt::format("{:<40} {:<11} {:<22} {:>18}  \n{}\n", "module", "type",
                              "output shape", "parameters", rule);
  for (const nn::SummaryRow& r : s.rows)
    o += fmt::format("{:<40} {:<11} {:<22} {:>18}  {}\n",
                     std::string(2 * (r.depth - 1), ' ') + r.name, r.type, shape_str(r.output),
                     with_commas(r.params), r.note);
  return o + rule + "\n";
}

// One head's share of the attention weights. A head maps each embedding down to its value
// space (its HS rows of c_attn's v block: "value down") and its weighted values back up
// (its HS columns of c_proj: "value up"); the layer's output is the sum of the heads'
// value-up products, which is the same as c_proj applied to the concatenated heads.
std::string per_head(const nn::ModelSummary& s) {
  const nn::GPTConfig& c = s.config;
  const int64_t HS = c.n_embd / c.n_head, C = c.n_embd, L = c.n_layer;
  const int64_t each = HS * C, G = c.n_head / c.n_kv_head;
  std::string o = fmt::format("\nper head (HS = C / NH = {}; weights only)\n", HS);
  auto line = [&](const std::string& what, int64_t heads, const std::string& note,
                  const char* kind) {
    o += fmt::format("  {:<56} {:>18}  (x {} {} x {} layers = {}){}\n", what, with_commas(each),
                     heads, kind, L, with_commas(each * heads * L), note);
  };
  line(fmt::format("query W_q (HS x C = {} x {})", HS, C), c.n_head, "", "heads");
  line(fmt::format("key W_k (HS x C = {} x {})", HS, C), c.n_kv_head,
       G > 1 ? fmt::format("; each shared by {} query heads", G) : "", "kv heads");
  line(fmt::format("value down: c_attn's v rows (HS x C = {} x {})", HS, C), c.n_kv_head,
       G > 1 ? fmt::format("; each shared by {} query heads", G) : "", "kv heads");
  line(fmt::format("value up: c_proj's columns (C x HS = {} x {})", C, HS), c.n_head, "", "heads");
  return o;
}

std::string components(const nn::ModelSummary& s) {
  const nn::ParameterCount& p = s.counts;
  const nn::GPTConfig& c = s.config;
  const int64_t L = c.n_layer;
  std::string o = "\nparameters by component\n";
  auto line = [&](const std::string& what, int64_t per, int64_t times) {
    o += fmt::format("  {:<56} {:>18}", what, with_commas(per * times));
    if (times > 1) o += fmt::format("  ({} x {} layers)", with_commas(per), times);
    o += "\n";
  };
  line(c.tie_embeddings ? "token embedding wte (V x C; lm_head tied, counted once)"
                        : "token embedding wte (V x C)",
       p.token_embedding, 1);
  if (!c.tie_embeddings) line("lm_head (V x C, not tied)", p.lm_head, 1);
  if (c.learned_positions()) line("position embedding wpe (block_size x C)", p.position_embedding, 1);
  line("attention Q (C x C)", p.attn_q, L);
  line("attention K (KVH*HS x C)", p.attn_k, L);
  line("attention V (KVH*HS x C)", p.attn_v, L);
  line("attention O, c_proj (C x C)", p.attn_o, L);
  const int64_t H = c.mlp_hidden();
  if (c.gated_mlp()) {
    line(fmt::format("MLP gate (H x C, H = {})", H), p.mlp_gate, L);
    line("MLP up (H x C)", p.mlp_fc, L);
    line("MLP down, c_proj (C x H)", p.mlp_proj, L);
  } else {
    line(fmt::format("MLP c_fc (H x C, H = {})", H), p.mlp_fc, L);
    line("MLP c_proj (C x H)", p.mlp_proj, L);
  }
  const std::string norm = c.norm_name();
  line(fmt::format("{}s ln_1, ln_2 ({})", norm, c.biases() ? "weights and biases" : "weights"),
       p.layernorms, L);
  if (c.biases()) line("Linear biases", p.biases, L);
  line("final " + norm + " ln_f", p.final_layernorm, 1);
  if (p.lora > 0)
    line(fmt::format("LoRA adapters, R {} (they train; the rest is frozen)", c.lora_rank), p.lora,
         L);
  if (p.lora_head > 0)
    line(fmt::format("LoRA adapter on the LM head, R {}", c.lora_rank), p.lora_head, 1);
  if (p.lora_tokens > 0)
    line(fmt::format("trainable rows of the {} added tokens ({})", c.lora_new_tokens,
                     c.tied_head() ? "wte, tied head" : "wte and lm_head"),
         p.lora_tokens, 1);
  line("attention matrices Q, K, V, O (all layers)", p.attention_matrices(), 1);
  line("total", p.total(), 1);
  if (c.n_kv_head != c.n_head) {
    nn::GPTConfig mha = c;
    mha.n_kv_head = c.n_head;
    const int64_t saved = nn::count_parameters(mha).total() - p.total();
    line(fmt::format("saved by {} against MHA (K, V at {} of {} heads)",
                     c.n_kv_head == 1 ? "MQA" : "GQA", c.n_kv_head, c.n_head),
         saved, 1);
  }
  line(c.learned_positions() ? "total without position embeddings (N below)"
       : c.tied_head()       ? "matmul parameters (N below)"
                             : "matmul parameters: all but wte (N below)",
       s.flops_n, 1);
  return o + per_head(s);
}

std::string costs(const nn::ModelSummary& s) {
  const nn::GPTConfig& c = s.config;
  std::string o = fmt::format(
      "\nmemory for training (f32)\n  weights {}, gradients {}, AdamW state (m, v) {}\n"
      "  activations kept for backward at B {}, T {}: {} (estimate: per layer 3C + (C + 2 KVH "
      "HS) (twice with RoPE) + c_fc's and the activation's outputs per position, NH T^2 per "
      "sequence, masks with dropout; then 2C + 2V per position)\n"
      "  total {}\n",
      human_bytes(s.weight_bytes), human_bytes(s.grad_bytes), human_bytes(s.adamw_bytes), s.batch,
      s.seq, human_bytes(s.activation_bytes),
      human_bytes(s.weight_bytes + s.grad_bytes + s.adamw_bytes + s.activation_bytes));
  o += fmt::format(
      "\ntraining FLOPs per token: 6 N + 12 n_layer C T = 6 x {} + 12 x {} x {} x {} = {:.4g}\n"
      "  (forward and backward of every weight, plus attention's q k^T and weights v at T = "
      "{})\n",
      with_commas(s.flops_n), c.n_layer, c.n_embd, s.seq, s.flops_per_token, s.seq);
  const auto kv = static_cast<double>(s.kv_cache_bytes_per_token);
  const auto kv_mha = static_cast<double>(s.kv_cache_bytes_per_token_mha);
  o += fmt::format("\nkey/value cache per token (f32): {} (2 x n_layer x KVH x HS x 4 bytes)",
                   human_bytes(kv));
  if (c.n_kv_head != c.n_head)
    o += fmt::format("; MHA with the same heads: {}, {:.0f}x more", human_bytes(kv_mha),
                     kv_mha / kv);
  return o + "\n";
}

}  // namespace

std::string format_summary(const nn::ModelSummary& s) {
  const nn::GPTConfig& c = s.config;
  std::string o = fmt::format("{}: V {}, block_size {}, n_layer {}, n_head {}, n_kv_head {}, n_embd {}",
                              nn::describe(c), c.vocab_size, c.block_size, c.n_layer, c.n_head,
                              c.n_kv_head, c.n_embd);
  if (c.gated_mlp() || c.hidden_dim > 0) o += fmt::format(", hidden_dim {}", c.mlp_hidden());
  if (c.rotary()) o += fmt::format(", rope_theta {}", c.rope_theta);
  o += fmt::format(", norm_eps {}, tie_embeddings {}", c.norm_eps, c.tied_head());
  if (c.window() > 0) o += fmt::format(", sliding_window {}", c.window());
  o += fmt::format(", dropout {}, bias {}", c.dropout, c.biases());
  if (c.lora_rank > 0)
    o += fmt::format(", lora_rank {}, lora_alpha {}, lora_targets {}", c.lora_rank, c.lora_alpha,
                     c.lora_targets);
  if (c.lora_new_tokens > 0) o += fmt::format(", lora_new_tokens {}", c.lora_new_tokens);
  o += fmt::format("\ninput: B {} x T {} token ids\n\n", s.batch, s.seq);
  return o + module_table(s) + components(s) + costs(s);
}

}  // namespace attend::viz
