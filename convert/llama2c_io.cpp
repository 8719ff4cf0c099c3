#include "convert/llama2c_io.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "tensor/kernels.h"
#include "tensor/util.h"

namespace attend::convert {

namespace fs = std::filesystem;

namespace {

bool llama2c_owns(const std::string& name) {
  return name == "model.bin" || name == "tokenizer.bin";
}

void put_i32(std::string& out, int32_t v) {
  out.append(reinterpret_cast<const char*>(&v), 4);
}
void put_f32(std::string& out, float v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_tensor(std::string& out, const Tensor& t) {
  const Tensor c = kernel::contiguous(t);
  out.append(reinterpret_cast<const char*>(c.data<float>()),
             static_cast<size_t>(c.numel()) * sizeof(float));
}

int32_t as_i32(int64_t v, const char* what) {
  ATTEND_CHECK(v <= std::numeric_limits<int32_t>::max(), "export --format llama2c: ", what,
               " is ", v, "; llama2.c's header holds 32-bit integers");
  return static_cast<int32_t>(v);
}

}  // namespace

ExportResult export_llama2c(const ExportSource& m, const fs::path& out_dir) {
  const nn::GPTConfig& c = m.model.config;
  const std::string file = m.name;
  ATTEND_CHECK(c.is_llama(), "export --format llama2c: ", file,
               " is a GPT-2 model (arch gpt2); llama2.c runs Llamas only");
  ATTEND_CHECK(c.rope_theta == 10000.0, "export --format llama2c: ", file, " has rope_theta ",
               c.rope_theta, "; llama2.c's run.c fixes RoPE's theta at 10000");
  ATTEND_CHECK(c.norm_eps == 1e-5, "export --format llama2c: ", file, " has norm_eps ",
               c.norm_eps, "; llama2.c's run.c fixes RMSNorm's eps at 1e-5");
  ATTEND_CHECK(c.sliding_window == 0 || c.sliding_window >= c.block_size,
               "export --format llama2c: ", file, " has sliding_window ", c.sliding_window,
               " (block_size ", c.block_size, "); llama2.c's run.c attends to every earlier "
               "position");
  const int64_t C = c.n_embd, HS = C / c.n_head, kv = c.n_kv_head * HS, H = c.mlp_hidden();
  const int64_t L = c.n_layer, T = c.block_size, V = c.vocab_size;

  std::string bin;
  for (const int64_t v : {C, H, L, c.n_head, c.n_kv_head}) put_i32(bin, as_i32(v, "a dimension"));
  put_i32(bin, (c.tie_embeddings ? 1 : -1) * as_i32(V, "vocab_size"));
  put_i32(bin, as_i32(T, "block_size"));
  const auto& t = *m.model.transformer;
  auto block = [&](int64_t l) -> const nn::Block& { return (*t.h)[static_cast<size_t>(l)]; };
  auto each_layer = [&](auto&& part) {
    for (int64_t l = 0; l < L; ++l) put_tensor(bin, part(block(l)));
  };
  put_tensor(bin, t.wte->weight);
  each_layer([](const nn::Block& b) { return b.ln_1->weight; });
  each_layer([&](const nn::Block& b) { return kernel::narrow(b.attn->c_attn->weight, 0, 0, C); });
  each_layer([&](const nn::Block& b) { return kernel::narrow(b.attn->c_attn->weight, 0, C, kv); });
  each_layer(
      [&](const nn::Block& b) { return kernel::narrow(b.attn->c_attn->weight, 0, C + kv, kv); });
  each_layer([](const nn::Block& b) { return b.attn->c_proj->weight; });
  each_layer([](const nn::Block& b) { return b.ln_2->weight; });
  each_layer([&](const nn::Block& b) { return kernel::narrow(b.mlp->c_fc->weight, 0, 0, H); });
  each_layer([](const nn::Block& b) { return b.mlp->c_proj->weight; });
  each_layer([&](const nn::Block& b) { return kernel::narrow(b.mlp->c_fc->weight, 0, H, H); });
  put_tensor(bin, t.ln_f->weight);
  // The RoPE tables run.c's format still carries (and skips): cos, then sin, of
  // pos * theta^(-2i/HS) for pos < seq_len, i < HS/2.
  for (int table = 0; table < 2; ++table)
    for (int64_t pos = 0; pos < T; ++pos)
      for (int64_t i = 0; i < HS / 2; ++i) {
        const double a = static_cast<double>(pos) *
                         std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(HS));
        put_f32(bin, static_cast<float>(table == 0 ? std::cos(a) : std::sin(a)));
      }
  if (!c.tie_embeddings) put_tensor(bin, m.model.lm_head->weight);

  // tokenizer.bin: a merged token scores -rank; single bytes and characters 0.
  const data::TokenizerSpec& spec = m.tokenizer.spec();
  std::vector<float> score(spec.tokens.size(), 0.0f);
  if (spec.kind == "bpe") {
    std::unordered_map<std::string, size_t> id;
    for (size_t i = 0; i < spec.tokens.size(); ++i) id.emplace(spec.tokens[i], i);
    for (size_t r = 0; r < spec.merges.size(); ++r) {
      const auto [a, b] = spec.merges[r];
      auto it = id.find(spec.tokens[static_cast<size_t>(a)] + spec.tokens[static_cast<size_t>(b)]);
      if (it != id.end()) score[it->second] = -static_cast<float>(r);
    }
  }
  size_t longest = 1;
  for (const std::string& s : spec.tokens) longest = std::max(longest, s.size());
  std::string tok;
  put_i32(tok, as_i32(static_cast<int64_t>(longest), "the longest token"));
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    put_f32(tok, score[i]);
    put_i32(tok, static_cast<int32_t>(spec.tokens[i].size()));
    tok += spec.tokens[i];
  }

  StagedFolder stage(out_dir, "export", llama2c_owns);
  write_file_atomic(stage.path() / "model.bin", bin);
  write_file_atomic(stage.path() / "tokenizer.bin", tok);
  stage.commit();
  return {out_dir, L * 9 + 2 + (c.tie_embeddings ? 0 : 1)};
}

}  // namespace attend::convert
