// Decoder (infer/decoder.h): a token at a time on its own buffers gives GPT::forward's logits
// bit for bit, and says what it does not take.
#include <omp.h>

#include <limits>
#include <optional>

#include "infer/decoder.h"
#include "infer/decoding.h"
#include "nn/gpt.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
using attend::infer::Decoder;
using attend::infer::DecodingWeights;

namespace {

GPTConfig llama_config(int64_t window, bool tied) {
  GPTConfig c = gpt_preset("llama-char");
  c.vocab_size = 300, c.block_size = 40, c.n_layer = 2, c.n_head = 4;
  c.n_kv_head = 2, c.n_embd = 64, c.hidden_dim = 96;
  c.sliding_window = window, c.tie_embeddings = tied;
  return c;
}

// A model with every parameter drawn (gains and biases too, so none is a no-op).
void draw(GPT& m, uint64_t seed) {
  Generator g(seed);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.set_data(normal(p.shape(), 0.0, 0.3, g));
}

}  // namespace

TEST_CASE("Decoder gives GPT::forward's logits bit for bit, every format, 1 and 2 threads") {
  // GPT-2 with biases (GELU, LayerNorm, positions), without biases, a GQA Llama (RoPE, SwiGLU,
  // RMSNorm) tied and untied, and a Mistral whose window of 6 the decoding passes many times
  // (the arrays compacted); in f32, q8_0 and under bf16 products. The twin is the model's
  // own forward with caches, token after token, from the same prompt.
  const GPTConfig gpt2{.vocab_size = 300, .block_size = 40, .n_layer = 2, .n_head = 4,
                       .n_kv_head = 4, .n_embd = 64, .dropout = 0.0, .bias = true};
  GPTConfig gpt2_nobias = gpt2;
  gpt2_nobias.bias = false;
  const int before = omp_get_max_threads();
  for (const GPTConfig& c : {gpt2, gpt2_nobias, llama_config(0, true), llama_config(0, false),
                             llama_config(6, false)})
    for (const std::string format : {"f32", "q8_0", "bf16"})
      for (const int threads : {1, 2}) {
        CAPTURE(c.arch);
        CAPTURE(c.bias);
        CAPTURE(c.tie_embeddings);
        CAPTURE(c.sliding_window);
        CAPTURE(format);
        CAPTURE(threads);
        omp_set_num_threads(threads);
        const test::PrecisionGuard use(format == "bf16" ? kernel::GemmPrecision::bf16
                                                        : kernel::GemmPrecision::f32);
        GPT m(c, 5);
        draw(m, 6);
        m.eval();
        NoGradGuard no_grad;
        const DecodingWeights decoding(
            m, format == "q8_0" ? std::optional(WeightFormat::q8_0) : std::nullopt);
        REQUIRE(decoding.active());
        REQUIRE(Decoder::unsupported(m).empty());
        Generator g(7);
        // A window model decodes past block_size too.
        const int64_t steps = c.sliding_window > 0 ? 2 * c.block_size : c.block_size - 6;
        const Tensor ids = randint({1, 5 + steps}, 0, c.vocab_size, g);
        std::vector<KVCache> caches;
        Tensor want = m.forward(kernel::narrow(ids, 1, 0, 5), Tensor(), nullptr, &caches).logits;
        // Sized for every step (Note [The cache sized once]), for too few (it regrows), or
        // grown by doubling from the prompt's rows: the same bits.
        const int64_t more = format == "f32" ? steps : format == "q8_0" ? 3 : 0;
        CAPTURE(more);
        Decoder d(m);
        d.start(caches, more);
        CHECK(d.position() == 5);
        const int64_t sized = d.capacity();
        if (more == steps && c.sliding_window == 0) CHECK(sized >= 5 + steps);
        if (c.sliding_window > 0) CHECK(sized >= 2 * (c.sliding_window + 1));
        bool same = true;
        for (int64_t t = 5; t < 5 + steps && same; ++t) {
          const int64_t token = ids.data<int64_t>()[t];
          want = m.forward(kernel::narrow(ids, 1, t, 1), Tensor(), nullptr, &caches).logits;
          const float* got = d.step(token);
          same = std::memcmp(got, want.data<float>(), c.vocab_size * sizeof(float)) == 0;
          CAPTURE(t);
          CHECK(same);
        }
        CHECK(d.position() == 5 + steps);
        if (more == steps) CHECK(d.capacity() == sized);  // never regrown
        // finish() hands the positions back: GPT::forward continues from them as from its
        // own caches (a window model: a token past block_size).
        std::vector<KVCache> handed;
        d.finish(handed);
        REQUIRE(handed.size() == caches.size());
        CHECK(handed[0].position == caches[0].position);
        CHECK(handed[0].length() == caches[0].length());
        const Tensor next = full({1, 1}, 3.0, DType::I64);
        {
          const Tensor a = m.forward(next, Tensor(), nullptr, &caches).logits;
          const Tensor b = m.forward(next, Tensor(), nullptr, &handed).logits;
          CHECK(test::bit_identical(a, b));
        }
      }
  omp_set_num_threads(before);
}

TEST_CASE("Decoder: a cache regrown, a window compacted again and again, keep forward's bits") {
  // The decoder's buffer holds at least a huge page of rows (2 MB: here 8 KB rows, 256 of
  // them). A window of 6 is compacted to the buffer's front every ~250 tokens, and without a
  // window (a context of 700) the buffer regrows at 257 rows: 600 tokens pass two
  // compactions or a regrow, each logit row compared with GPT::forward's, under f32 and bf16
  // products (whose f32 keys are rows, their bits columns), and finish() hands back what
  // forward kept.
  GPTConfig c = llama_config(6, false);
  c.n_layer = 4, c.n_head = 4, c.n_kv_head = 4, c.n_embd = 256, c.hidden_dim = 384;
  for (const int64_t window : {6, 0})
    for (const bool bf16 : {false, true})
      for (const int threads : {1, 2}) {
        CAPTURE(window);
        CAPTURE(bf16);
        CAPTURE(threads);
        c.sliding_window = window;
        c.block_size = window > 0 ? 40 : 700;
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        const test::PrecisionGuard use(bf16 ? kernel::GemmPrecision::bf16
                                            : kernel::GemmPrecision::f32);
        GPT m(c, 5);
        draw(m, 6);
        m.eval();
        NoGradGuard no_grad;
        const DecodingWeights decoding(m);
        Generator g(8);
        const int64_t steps = 600;
        const Tensor ids = randint({1, 3 + steps}, 0, c.vocab_size, g);
        std::vector<KVCache> caches;
        (void)m.forward(kernel::narrow(ids, 1, 0, 3), Tensor(), nullptr, &caches);
        Decoder d(m);
        d.start(caches);
        const int64_t first = d.capacity();
        int64_t same = 0;
        for (int64_t t = 3; t < 3 + steps; ++t) {
          const Tensor want =
              m.forward(kernel::narrow(ids, 1, t, 1), Tensor(), nullptr, &caches).logits;
          const float* got = d.step(ids.data<int64_t>()[t]);
          same += std::memcmp(got, want.data<float>(), c.vocab_size * sizeof(float)) == 0;
        }
        CHECK(same == steps);
        CHECK(first == 256);
        if (window == 0) CHECK(d.capacity() > first);  // regrown with 256 rows kept
        if (window > 0) CHECK(d.capacity() == first);  // compacted in place
        std::vector<KVCache> handed;
        d.finish(handed);
        const Tensor next = full({1, 1}, 3.0, DType::I64);
        const Tensor a = m.forward(next, Tensor(), nullptr, &caches).logits;
        const Tensor b = m.forward(next, Tensor(), nullptr, &handed).logits;
        CHECK(test::bit_identical(a, b));
        omp_set_num_threads(before);
      }
}

TEST_CASE("GPT::last_logits gives forward's last row bit for bit, every format, 1 and 2 threads") {
  // Prompts of 1, 5 and 24 positions (24: past the few-rows products, through the blocked
  // ones), from an empty cache and after 3 cached positions; GPT-2 with biases and a GQA
  // Llama; f32, q8_0 and bf16 decoding weights, and the model's own Linear (no decoding
  // weights).
  const GPTConfig gpt2{.vocab_size = 300, .block_size = 40, .n_layer = 2, .n_head = 4,
                       .n_kv_head = 4, .n_embd = 64, .dropout = 0.0, .bias = true};
  const int before = omp_get_max_threads();
  for (const GPTConfig& c : {gpt2, llama_config(0, false)})
    for (const std::string format : {"f32", "q8_0", "bf16", "plain"})
      for (const int threads : {1, 2}) {
        CAPTURE(c.arch);
        CAPTURE(format);
        CAPTURE(threads);
        omp_set_num_threads(threads);
        const test::PrecisionGuard use(format == "bf16" ? kernel::GemmPrecision::bf16
                                                        : kernel::GemmPrecision::f32);
        GPT m(c, 5);
        draw(m, 6);
        m.eval();
        NoGradGuard no_grad;
        std::optional<DecodingWeights> decoding;
        if (format != "plain")
          decoding.emplace(m, format == "q8_0" ? std::optional(WeightFormat::q8_0) : std::nullopt);
        Generator g(7);
        const Tensor ids = randint({1, 27}, 0, c.vocab_size, g);
        for (const int64_t cached : {0, 3})
          for (const int64_t T : {1, 5, 24}) {
            CAPTURE(cached);
            CAPTURE(T);
            std::vector<KVCache> a, b;
            if (cached > 0) {
              (void)m.forward(kernel::narrow(ids, 1, 0, cached), Tensor(), nullptr, &a);
              (void)m.forward(kernel::narrow(ids, 1, 0, cached), Tensor(), nullptr, &b);
            }
            const Tensor prompt = kernel::narrow(ids, 1, cached, T);
            const Tensor want = m.forward(prompt, Tensor(), nullptr, &a).logits;  // (1, T, V)
            const Tensor got = m.last_logits(prompt, &b);                          // (1, V)
            REQUIRE(got.shape() == Shape({1, c.vocab_size}));
            CHECK(test::bit_identical(got, kernel::select(want, 1, T - 1)));
            // the caches are forward's too
            CHECK(test::bit_identical(a[1].k, b[1].k));
            CHECK(a[1].position == b[1].position);
          }
      }
  omp_set_num_threads(before);
}

TEST_CASE("Decoder says what it does not take, and refuses a position past the context") {
  GPT m(llama_config(0, false), 5);
  draw(m, 6);
  CHECK(Decoder::unsupported(m) == "the model is in training mode");
  m.eval();
  NoGradGuard no_grad;
  // Without decoding weights, the products have nothing to read.
  CHECK(Decoder::unsupported(m).find("has no decoding weights") != std::string::npos);
  {
    const DecodingWeights decoding(m);
    CHECK(Decoder::unsupported(m).empty());
    (*m.transformer->h)[1].attn->replace_head[0] = zeros({16});
    CHECK(Decoder::unsupported(m) == "layer 1 has a replaced head");
    (*m.transformer->h)[1].attn->replace_head.clear();
    // Made under f32 products, read under bf16 ones: not the format they would read.
    {
      const test::PrecisionGuard use(kernel::GemmPrecision::bf16);
      CHECK(Decoder::unsupported(m).find("decoding weights are f32, the products now bf16") !=
            std::string::npos);
    }
    // Past block_size (40) without a window.
    Decoder d(m);
    std::vector<KVCache> caches;
    const Tensor ids = zeros({1, 40}, DType::I64);
    (void)m.forward(ids, Tensor(), nullptr, &caches);
    test::check_error([&] { d.start(caches, -1); }, "-1 steps expected");
    // However many steps it is told of: room for the context's rows, and the next step's
    // (which refuses).
    d.start(caches, std::numeric_limits<int64_t>::max());
    CHECK(d.capacity() == 41);
    test::check_error([&] { d.step(1); }, "exceeds block_size 40");
    test::check_error([&] { d.step(300); }, "token id 300");
  }
  // Told of any number of steps to come (sampling's --max_new_tokens), at most 256 MB of cache
  // at once (here 512-byte rows in a context of 2^20 positions), at least a huge page's worth.
  {
    GPTConfig big = llama_config(0, false);
    big.block_size = int64_t{1} << 20;
    GPT mb(big, 5);
    mb.eval();
    const DecodingWeights weights(mb);
    Decoder d(mb);
    const std::vector<KVCache> none(2);
    d.start(none, std::numeric_limits<int64_t>::max());
    CHECK(d.capacity() == (int64_t{256} << 20) / 512);
    d.start(none, 100);
    CHECK(d.capacity() == (int64_t{2} << 20) / 512);
  }
  // A LoRA adapter on a product.
  GPTConfig lc = llama_config(0, false);
  lc.lora_rank = 2;
  GPT lora(lc, 5);
  lora.eval();
  const DecodingWeights decoding(lora);
  CHECK(Decoder::unsupported(lora).find("has an adapter on") != std::string::npos);
}
