#include "nn/summary.h"

namespace attend::nn {

ModelSummary summarize(const GPTConfig& c, int64_t B, int64_t T) {
  c.validate();
  ATTEND_CHECK(B > 0, "summary: --batch must be positive, got ", B);
  ATTEND_CHECK(T >= 0, "summary: --seq must be positive (or 0: block_size), got ", T);
  const bool seq_given = T > 0;
  if (T == 0) T = c.block_size;
  {
    const double per_seq = static_cast<double>(T) * (static_cast<double>(c.n_layer) *
                                                         (8.0 * c.n_embd + 4.0 * c.mlp_hidden() + 2.0 * c.n_head * T) +
                                                     2.0 * c.n_embd + 2.0 * c.vocab_size);
    // Named by what set T: --seq, or the model's own block_size.
    ATTEND_CHECK(4.0 * static_cast<double>(B) * per_seq < 0x1p62, "summary: batch ", B, " at ",
                 seq_given ? "--seq " : "the model's block_size ", T,
                 ": the activations would need about ", 4.0 * static_cast<double>(B) * per_seq,
                 " bytes, past what int64 counts");
  }
  ATTEND_CHECK(T <= c.block_size, "summary: --seq ", T, " exceeds block_size ", c.block_size);
  ModelSummary s;
  s.config = c;
  s.batch = B;
  s.seq = T;
  s.counts = count_parameters(c);
  const ParameterCount& p = s.counts;
  const int64_t C = c.n_embd, V = c.vocab_size, HS = C / c.n_head, kv = c.n_kv_head * HS;
  const int64_t H = c.mlp_hidden(), fc = c.gated_mlp() ? 2 * H : H;
  const int64_t lin_b = c.bias ? 1 : 0, ln = c.bias ? 2 * C : C;
  const std::string norm = c.norm_name();
  auto row = [&](std::string name, std::string type, Shape out, int64_t params, int depth,
                 std::string note = "") {
    s.rows.push_back(
        {std::move(name), std::move(type), std::move(out), params, depth, std::move(note)});
  };
  row("transformer.wte", "Embedding", {B, T, C}, p.token_embedding, 1);
  if (c.learned_positions()) row("transformer.wpe", "Embedding", {T, C}, p.position_embedding, 1);
  row("transformer.drop", "Dropout", {B, T, C}, 0, 1);
  // Block 0 in full; the others, alike, as one row (or two), whatever n_layer is.
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l);
    if (l > 0 && l < c.n_layer - 1) {
      row(h + " .. transformer.h." + std::to_string(c.n_layer - 2), "Block", {B, T, C},
          p.per_layer() * (c.n_layer - 2), 1,
          std::to_string(c.n_layer - 2) + " blocks like block 0");
      l = c.n_layer - 2;
      continue;
    }
    row(h, "Block", {B, T, C}, p.per_layer(), 1,
        l == 0 && c.n_layer > 1 ? "blocks 1.. have the same rows" : "");
    if (l > 0) continue;
    row(h + ".ln_1", norm, {B, T, C}, ln, 2);
    std::string kind = c.n_kv_head == c.n_head ? "MHA" : c.n_kv_head == 1 ? "MQA" : "GQA";
    if (c.rotary()) kind += ", RoPE";
    if (c.window() > 0) kind += ", window " + std::to_string(c.window());
    row(h + ".attn", "Attention", {B, T, C}, (C + 2 * kv) * (C + lin_b) + C * (C + lin_b), 2,
        kind);
    row(h + ".attn.c_attn", "Linear", {B, T, C + 2 * kv}, (C + 2 * kv) * (C + lin_b), 3,
        "q | k | v");
    if (c.rotary())
      row(h + ".attn.rope", "RoPE", {B, T, C + kv}, 0, 3, "q and k turned by position");
    row(h + ".attn.softmax", "weights", {B, c.n_head, T, T}, 0, 3, "rows: queries, columns: keys");
    row(h + ".attn.c_proj", "Linear", {B, T, C}, C * (C + lin_b), 3);
    row(h + ".ln_2", norm, {B, T, C}, ln, 2);
    row(h + ".mlp", "MLP", {B, T, C}, p.mlp_gate + p.mlp_fc + p.mlp_proj + lin_b * (H + C), 2);
    row(h + ".mlp.c_fc", "Linear", {B, T, fc}, fc * C + lin_b * H, 3,
        c.gated_mlp() ? "gate | up" : "");
    if (c.gated_mlp()) {
      row(h + ".mlp.swiglu", "SwiGLU", {B, T, H}, 0, 3, "silu(gate) * up");
    } else {
      row(h + ".mlp.gelu", "GELU", {B, T, H}, 0, 3);
    }
    row(h + ".mlp.c_proj", "Linear", {B, T, C}, H * C + lin_b * C, 3);
  }
  row("transformer.ln_f", norm, {B, T, C}, p.final_layernorm, 1);
  if (c.tie_embeddings) {
    row("lm_head", "Linear", {B, T, V}, 0, 1, "tied: its weight is transformer.wte.weight");
  } else {
    row("lm_head", "Linear", {B, T, V}, p.lm_head, 1);
  }

  const int64_t N = p.total();
  s.weight_bytes = 4 * N;
  s.grad_bytes = 4 * N;
  s.adamw_bytes = 8 * N;
  // What attend's autograd keeps for backward per layer (f32): the block input, ln_1's
  // output, q|k|v (and with RoPE the rotated q|k|v), the attention output, ln_2's output,
  // c_fc's and the activation's outputs (3C + C + 2 kv + fc + H per position; GPT-2's
  // 12C + 2 kv), and the softmax weights (NH T^2 per sequence); dropout adds its masks. Then ln_f's
  // input and output and the logits.
  const int64_t per_pos = 3 * C + (C + 2 * kv) * (c.rotary() ? 2 : 1) + fc + H +
                          (c.dropout > 0 ? 3 * C : 0);
  const int64_t per_seq_attn = c.n_head * T * T * (c.dropout > 0 ? 2 : 1);
  s.activation_bytes =
      4 * (c.n_layer * (B * T * per_pos + B * per_seq_attn) + B * T * (2 * C + 2 * V));
  // Matmul parameters: not the position table, and an untied wte is a lookup only.
  s.flops_n = N - p.position_embedding - (c.tie_embeddings ? 0 : p.token_embedding);
  s.flops_per_token = 6.0 * static_cast<double>(s.flops_n) + 12.0 * c.n_layer * C * T;
  s.kv_cache_bytes_per_token = 4 * 2 * c.n_layer * kv;
  s.kv_cache_bytes_per_token_mha = 4 * 2 * c.n_layer * C;
  return s;
}

}  // namespace attend::nn
