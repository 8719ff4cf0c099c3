// DecodingWeights (infer/decoding.h): the weights in the form decoding reads them, and the
// same logits bit for bit through them.
#include <optional>

#include "infer/decoding.h"
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
using attend::infer::DecodingWeights;

TEST_CASE("DecodingWeights holds W^T's panels in f32, or made under bf16 products as bf16 in half the bytes") {
  const GPTConfig c{.vocab_size = 300, .block_size = 24, .n_layer = 2, .n_head = 4,
                    .n_kv_head = 4, .n_embd = 48, .dropout = 0.0, .bias = true};
  GPT m(c, 5);
  int64_t weights = 0, linears = 0;
  for (auto& [_, mod] : m.named_modules())
    if (auto* l = dynamic_cast<Linear*>(mod)) weights += l->weight.numel(), ++linears;
  REQUIRE(linears == 2 * 4 + 1);  // c_attn, attn c_proj, c_fc, mlp c_proj per layer; lm_head
  for (const auto precision : {kernel::GemmPrecision::f32, kernel::GemmPrecision::bf16}) {
    const bool bf16 = precision == kernel::GemmPrecision::bf16;
    CAPTURE(bf16);
    const test::PrecisionGuard use(precision);
    const size_t before = storage_stats().live;
    {
      const DecodingWeights decoding(m);
      REQUIRE(decoding.active());
      CHECK(decoding.bytes() == weights * (bf16 ? 2 : 4));  // what a token reads
      CHECK(storage_stats().live - before == static_cast<size_t>(weights) * (bf16 ? 2 : 4));
      for (auto& [_, mod] : m.named_modules())
        if (auto* l = dynamic_cast<Linear*>(mod)) {
          REQUIRE(l->decoding != nullptr);
          CHECK(l->decoding->format() == (bf16 ? WeightFormat::bf16 : WeightFormat::f32));
        }
    }
    CHECK(storage_stats().live == before);  // and gone with it
  }
}

TEST_CASE("decoding with DecodingWeights gives the same logits bit for bit") {
  // Sampling holds a DecodingWeights: every Linear multiplies by its W^T panels (f32 values,
  // or bf16 bits under bf16 products) for 1-4 rows, by W itself past that. Its twin is the model without it: the same bits at
  // every step, for GPT-2 (biases) and a GQA Llama, in f32 and under bf16 products (the
  // few-rows kernels then round as the blocked one).
  GPTConfig llama = gpt_preset("llama-char");
  llama.vocab_size = 300, llama.block_size = 24, llama.n_layer = 2, llama.n_head = 4;
  llama.n_kv_head = 2, llama.n_embd = 48, llama.hidden_dim = 136;
  const GPTConfig gpt2{.vocab_size = 300, .block_size = 24, .n_layer = 2, .n_head = 4,
                       .n_kv_head = 4, .n_embd = 48, .dropout = 0.0, .bias = true};
  for (const auto precision : {kernel::GemmPrecision::f32, kernel::GemmPrecision::bf16})
    for (const GPTConfig& c : {gpt2, llama}) {
      CAPTURE(c.arch);
      CAPTURE(precision == kernel::GemmPrecision::bf16);
      const test::PrecisionGuard use(precision);
      GPT m(c, 5);
      m.eval();
      Generator g(6);
      {
        NoGradGuard no_grad;
        for (Tensor& p : m.parameters()) p.set_data(normal(p.shape(), 0.0, 0.3, g));
      }
      const Tensor idx = randint({1, 20}, 0, 300, g);
      NoGradGuard no_grad;
      std::vector<KVCache> plain, kept;
      std::optional<DecodingWeights> decoding;
      int64_t t = 0;
      for (const int64_t n : {5, 1, 2, 3, 4, 1, 4}) {  // prompt, then 1-4 tokens a step
        CAPTURE(t);
        const Tensor x = kernel::narrow(idx, 1, t, n);
        decoding.reset();
        const Tensor a = m.forward(x, Tensor(), nullptr, &plain).logits;
        decoding.emplace(m);
        REQUIRE(decoding->active());
        const Tensor b = m.forward(x, Tensor(), nullptr, &kept).logits;
        CHECK(test::bit_identical(a, b));
        t += n;
      }
    }
}

TEST_CASE("DecodingWeights: q8_0 holds Q8_0 blocks where rows are 32-wide, f32 panels elsewhere") {
  GPTConfig c = gpt_preset("llama-char");
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 1, c.n_head = 2, c.n_kv_head = 1;
  c.n_embd = 64, c.hidden_dim = 72;  // mlp.c_proj's rows are 72 long: not a multiple of 32
  GPT m(c, 5);
  int64_t q8_bytes = 0;
  {
    const DecodingWeights decoding(m, WeightFormat::q8_0);
    REQUIRE(decoding.active());
    for (auto& [name, mod] : m.named_modules())
      if (auto* l = dynamic_cast<Linear*>(mod)) {
        CAPTURE(name);
        const bool fits = l->weight.size(1) % 32 == 0;
        REQUIRE(l->decoding != nullptr);
        CHECK(l->decoding->format() == (fits ? WeightFormat::q8_0 : WeightFormat::f32));
        q8_bytes += fits ? l->weight.numel() / 32 * 34 : l->weight.numel() * 4;
      }
    CHECK(decoding.bytes() == q8_bytes);
  }
  for (auto& [_, mod] : m.named_modules())
    if (auto* l = dynamic_cast<Linear*>(mod)) CHECK(l->decoding == nullptr);
}
