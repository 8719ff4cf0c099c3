#include "nn/summary.h"

#include <cstdio>

namespace attend::nn {

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
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

ModelSummary summarize(const GPTConfig& c, int64_t B, int64_t T) {
  c.validate();
  ATTEND_CHECK(B > 0, "summary: --batch must be positive, got ", B);
  if (T <= 0) T = c.block_size;
  ATTEND_CHECK(T <= c.block_size, "summary: --seq ", T, " exceeds block_size ", c.block_size);
  ModelSummary s;
  s.config = c;
  s.batch = B;
  s.seq = T;
  s.counts = count_parameters(c);
  const ParameterCount& p = s.counts;
  const int64_t C = c.n_embd, V = c.vocab_size, HS = C / c.n_head, kv = c.n_kv_head * HS;
  const int64_t lin_b = c.bias ? 1 : 0, ln = c.bias ? 2 * C : C;
  auto row = [&](std::string name, std::string type, Shape out, int64_t params, int depth,
                 std::string note = "") {
    s.rows.push_back(
        {std::move(name), std::move(type), std::move(out), params, depth, std::move(note)});
  };
  row("transformer.wte", "Embedding", {B, T, C}, p.token_embedding, 1);
  row("transformer.wpe", "Embedding", {T, C}, p.position_embedding, 1);
  row("transformer.drop", "Dropout", {B, T, C}, 0, 1);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l);
    row(h, "Block", {B, T, C}, p.per_layer(), 1,
        l == 0 && c.n_layer > 1 ? "blocks 1.. have the same rows" : "");
    if (l > 0) continue;
    row(h + ".ln_1", "LayerNorm", {B, T, C}, ln, 2);
    row(h + ".attn", "Attention", {B, T, C}, (C + 2 * kv) * (C + lin_b) + C * (C + lin_b), 2,
        c.n_kv_head == c.n_head ? "MHA"
        : c.n_kv_head == 1      ? "MQA"
                                : "GQA");
    row(h + ".attn.c_attn", "Linear", {B, T, C + 2 * kv}, (C + 2 * kv) * (C + lin_b), 3,
        "q | k | v");
    row(h + ".attn.softmax", "weights", {B, c.n_head, T, T}, 0, 3, "rows: queries, columns: keys");
    row(h + ".attn.c_proj", "Linear", {B, T, C}, C * (C + lin_b), 3);
    row(h + ".ln_2", "LayerNorm", {B, T, C}, ln, 2);
    row(h + ".mlp", "MLP", {B, T, C}, p.mlp_fc + p.mlp_proj + lin_b * 5 * C, 2);
    row(h + ".mlp.c_fc", "Linear", {B, T, 4 * C}, 4 * C * (C + lin_b), 3);
    row(h + ".mlp.gelu", "GELU", {B, T, 4 * C}, 0, 3);
    row(h + ".mlp.c_proj", "Linear", {B, T, C}, 4 * C * C + lin_b * C, 3);
  }
  row("transformer.ln_f", "LayerNorm", {B, T, C}, p.final_layernorm, 1);
  row("lm_head", "Linear", {B, T, V}, 0, 1, "tied: its weight is transformer.wte.weight");

  const int64_t N = p.total();
  s.weight_bytes = 4 * N;
  s.grad_bytes = 4 * N;
  s.adamw_bytes = 8 * N;
  // What attend's autograd keeps for backward per layer (f32): the block input, ln_1's
  // output, q|k|v, the attention output, ln_2's input and output, c_fc's and GELU's
  // outputs (12C + 2 kv per position), and the softmax weights (NH T^2 per sequence);
  // dropout adds its masks. Then ln_f's input and output and the logits.
  const int64_t per_pos = 12 * C + 2 * kv + (c.dropout > 0 ? 3 * C : 0);
  const int64_t per_seq_attn = c.n_head * T * T * (c.dropout > 0 ? 2 : 1);
  s.activation_bytes =
      4 * (c.n_layer * (B * T * per_pos + B * per_seq_attn) + B * T * (2 * C + 2 * V));
  s.flops_n = N - p.position_embedding;
  s.flops_per_token = 6.0 * static_cast<double>(s.flops_n) + 12.0 * c.n_layer * C * T;
  s.kv_cache_bytes_per_token = 4 * 2 * c.n_layer * kv;
  s.kv_cache_bytes_per_token_mha = 4 * 2 * c.n_layer * C;
  return s;
}

std::string format_summary(const ModelSummary& s) {
  const GPTConfig& c = s.config;
  const ParameterCount& p = s.counts;
  std::string o;
  char b[512];
  std::snprintf(b, sizeof b,
                "GPT: V %lld, block_size %lld, n_layer %lld, n_head %lld, n_kv_head %lld, n_embd "
                "%lld, dropout %g, bias %s\n"
                "input: B %lld x T %lld token ids\n\n",
                (long long)c.vocab_size, (long long)c.block_size, (long long)c.n_layer,
                (long long)c.n_head, (long long)c.n_kv_head, (long long)c.n_embd, c.dropout,
                c.bias ? "true" : "false", (long long)s.batch, (long long)s.seq);
  o += b;
  std::snprintf(b, sizeof b, "%-40s %-11s %-22s %18s  %s\n", "module", "type", "output shape",
                "parameters", "");
  o += b;
  o += std::string(110, '-') + "\n";
  for (const SummaryRow& r : s.rows) {
    std::snprintf(b, sizeof b, "%-40s %-11s %-22s %18s  %s\n",
                  (std::string(2 * (r.depth - 1), ' ') + r.name).c_str(), r.type.c_str(),
                  shape_str(r.output).c_str(), with_commas(r.params).c_str(), r.note.c_str());
    o += b;
  }
  o += std::string(110, '-') + "\n\nparameters by component\n";
  auto line = [&](const std::string& what, int64_t per, int64_t times) {
    std::snprintf(
        b, sizeof b, "  %-56s %18s%s\n", what.c_str(), with_commas(per * times).c_str(),
        times > 1 ? ("  (" + with_commas(per) + " x " + std::to_string(times) + " layers)").c_str()
                  : "");
    o += b;
  };
  line("token embedding wte (V x C; lm_head tied, counted once)", p.token_embedding, 1);
  line("position embedding wpe (block_size x C)", p.position_embedding, 1);
  line("attention Q (C x C)", p.attn_q, c.n_layer);
  line("attention K (KVH*HS x C)", p.attn_k, c.n_layer);
  line("attention V (KVH*HS x C)", p.attn_v, c.n_layer);
  line("attention O, c_proj (C x C)", p.attn_o, c.n_layer);
  line("MLP c_fc (4C x C)", p.mlp_fc, c.n_layer);
  line("MLP c_proj (C x 4C)", p.mlp_proj, c.n_layer);
  line("LayerNorms ln_1, ln_2 (weights and biases)", p.layernorms, c.n_layer);
  line("Linear biases", p.biases, c.n_layer);
  line("final LayerNorm ln_f", p.final_layernorm, 1);
  std::snprintf(b, sizeof b, "  %-56s %18s\n  %-56s %18s\n  %-56s %18s\n",
                "attention matrices Q, K, V, O (all layers)",
                with_commas(p.attention_matrices()).c_str(), "total",
                with_commas(p.total()).c_str(), "total without position embeddings (N below)",
                with_commas(s.flops_n).c_str());
  o += b;
  std::snprintf(
      b, sizeof b,
      "\nmemory for training (f32)\n  weights %s, gradients %s, AdamW state (m, v) %s\n"
      "  activations kept for backward at B %lld, T %lld: %s (estimate: per layer 12C + 2 KVH HS "
      "per position,"
      " NH T^2 per sequence, masks with dropout; then 2C + 2V per position)\n"
      "  total %s\n",
      human_bytes(s.weight_bytes).c_str(), human_bytes(s.grad_bytes).c_str(),
      human_bytes(s.adamw_bytes).c_str(), (long long)s.batch, (long long)s.seq,
      human_bytes(s.activation_bytes).c_str(),
      human_bytes(s.weight_bytes + s.grad_bytes + s.adamw_bytes + s.activation_bytes).c_str());
  o += b;
  std::snprintf(
      b, sizeof b,
      "\ntraining FLOPs per token: 6 N + 12 n_layer C T = 6 x %s + 12 x %lld x %lld x %lld = %.4g\n"
      "  (forward and backward of every weight, plus attention's q k^T and weights v at T = "
      "%lld)\n",
      with_commas(s.flops_n).c_str(), (long long)c.n_layer, (long long)c.n_embd, (long long)s.seq,
      s.flops_per_token, (long long)s.seq);
  o += b;
  std::snprintf(b, sizeof b,
                "\nkey/value cache per token (f32): %s (2 x n_layer x KVH x HS x 4 bytes)",
                human_bytes(static_cast<double>(s.kv_cache_bytes_per_token)).c_str());
  o += b;
  if (c.n_kv_head != c.n_head) {
    std::snprintf(b, sizeof b, "; MHA with the same heads: %s, %.0fx more",
                  human_bytes(static_cast<double>(s.kv_cache_bytes_per_token_mha)).c_str(),
                  static_cast<double>(s.kv_cache_bytes_per_token_mha) /
                      static_cast<double>(s.kv_cache_bytes_per_token));
    o += b;
  }
  o += "\n";
  return o;
}

}  // namespace attend::nn
