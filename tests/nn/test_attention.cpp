// Attention: exact causality, row sums, masked zeros, the MHA/GQA/MQA equivalences, the
// per-head sum view of c_proj, and the key/value cache.
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;
namespace k = attend::kernel;

namespace {

void randomize(Module& m, Generator& g, DType dt) {
  m.to(dt);
  NoGradGuard no_grad;
  for (Tensor& p : m.parameters()) p.set_data(normal(p.shape(), 0.0, 0.5, g, dt));
}

// An independent MHA, one head at a time with plain loops over heads: the oracle.
Tensor reference_attention(const Tensor& x, const Tensor& ctx, const Tensor& Wq, const Tensor& Wk,
                           const Tensor& Wv, const Tensor& Wo, int64_t NH, bool causal) {
  const int64_t C = x.size(2), HS = C / NH;
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < NH; ++h) {
    Tensor q = matmul(x, transpose(narrow(Wq, 0, h * HS, HS), 0, 1));     // (B, Tq, HS)
    Tensor kk = matmul(ctx, transpose(narrow(Wk, 0, h * HS, HS), 0, 1));  // (B, Tk, HS)
    Tensor v = matmul(ctx, transpose(narrow(Wv, 0, h * HS, HS), 0, 1));
    Tensor s = div(matmul(q, transpose(kk, 1, 2)), std::sqrt(static_cast<double>(HS)));
    if (causal) s = masked_fill(s, k::triu_mask(s.size(1), s.size(2), 1), -INFINITY);
    heads.push_back(matmul(softmax(s), v));
  }
  return matmul(cat(heads, 2), transpose(Wo, 0, 1));
}

}  // namespace

TEST_CASE("causal attention weights: future exactly 0, rows sum to 1") {
  for (DType dt : {DType::F32, DType::F64}) {
    Generator g(1);
    Attention a({16, 4, 2, true, true, 0.0});
    randomize(a, g, dt);
    Tensor x = randn({3, 7, 16}, g, dt);
    AttentionTrace tr;
    a.forward(x, Tensor(), &tr);
    Tensor w = tr.weights;
    REQUIRE(w.shape() == Shape{3, 4, 7, 7});
    const double tol = dt == DType::F32 ? 1e-6 : 1e-12;
    double worst = 0;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < 7; ++i) {
          double row = 0;
          for (int64_t j = 0; j < 7; ++j) {
            const double v = w.at({b, h, i, j});
            if (j > i) CHECK(v == 0.0);  // exactly
            row += v;
          }
          worst = std::max(worst, std::abs(row - 1.0));
        }
    CAPTURE(dtype_name(dt));
    CHECK(worst <= tol);
  }
}

TEST_CASE("changing a future token leaves every earlier logit bit-identical") {
  Generator g(2);
  GPT m(GPTConfig{.vocab_size = 23, .block_size = 12, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .dropout = 0.0, .bias = true}, 5);
  Tensor idx = randint({2, 12}, 0, 23, g);
  Tensor before = m.forward(idx).logits;
  for (int64_t j : {0, 5, 11}) {
    Tensor changed = k::clone(idx);
    changed.set({0, j}, (static_cast<int64_t>(idx.at({0, j})) + 7) % 23);
    changed.set({1, j}, (static_cast<int64_t>(idx.at({1, j})) + 1) % 23);
    Tensor after = m.forward(changed).logits;
    CAPTURE(j);
    CHECK(test::bit_identical(k::narrow(before, 1, 0, j), k::narrow(after, 1, 0, j)));
    if (j < 11) CHECK(!test::bit_identical(k::narrow(before, 1, j, 1), k::narrow(after, 1, j, 1)));
  }
}

TEST_CASE("the loss at position i has exactly zero gradient wrt inputs at positions j > i") {
  Generator g(3);
  GPT m(GPTConfig{.vocab_size = 17, .block_size = 10, .n_layer = 2, .n_head = 2, .n_kv_head = 1, .n_embd = 8, .dropout = 0.0, .bias = true}, 6);
  const int64_t T = 10;
  Tensor x = randn({2, T, 8}, g).requires_grad_();  // the embedded input (B, T, C)
  Tensor h = x;
  for (size_t l = 0; l < m.transformer->h->size(); ++l) h = (*m.transformer->h)[l].forward(h);
  Tensor logits = m.lm_head->forward(m.transformer->ln_f->forward(h));
  const int64_t i = 4;
  Tensor loss = cross_entropy(select(logits, 1, i), tensor({3, 9}, {2}, DType::I64));
  loss.backward();
  Tensor gx = x.grad();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double norm = 0;
      for (int64_t c = 0; c < 8; ++c) norm += std::abs(gx.at({b, t, c}));
      CAPTURE(t);
      if (t > i)
        CHECK(norm == 0.0);
      else
        CHECK(norm > 0.0);
    }
}

TEST_CASE("MHA equals an independent per-head implementation (n_kv_head = n_head)") {
  Generator g(4);
  for (bool causal : {true, false}) {
    Attention a({12, 3, 3, causal, false, 0.0});
    randomize(a, g, DType::F64);
    Tensor x = randn({2, 5, 12}, g, DType::F64);
    const Tensor& W = a.c_attn->weight;
    Tensor want = reference_attention(x, x, narrow(W, 0, 0, 12), narrow(W, 0, 12, 12),
                                      narrow(W, 0, 24, 12), a.c_proj->weight, 3, causal);
    test::check_close(a.forward(x).y, want, 1e-12, 1e-12);
  }
}

TEST_CASE("GQA and MQA equal MHA whose K/V weights repeat each kv head for its group") {
  Generator g(5);
  const int64_t C = 16, NH = 4, HS = 4;
  for (int64_t KVH : {2, 1}) {
    CAPTURE(KVH);
    Attention gqa({C, NH, KVH, true, true, 0.0});
    randomize(gqa, g, DType::F64);
    Attention mha({C, NH, NH, true, true, 0.0});
    mha.to(DType::F64);
    // Build MHA's c_attn: q rows as they are; k and v rows of kv head h / (NH / KVH).
    const Tensor& W = gqa.c_attn->weight;
    const Tensor& b = gqa.c_attn->bias;
    std::vector<Tensor> rows{narrow(W, 0, 0, C)}, brows{narrow(b, 0, 0, C)};
    for (int64_t part = 0; part < 2; ++part)
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t kv = h / (NH / KVH), at = C + part * KVH * HS + kv * HS;
        rows.push_back(narrow(W, 0, at, HS));
        brows.push_back(narrow(b, 0, at, HS));
      }
    {
      NoGradGuard no_grad;
      k::copy_(mha.c_attn->weight, cat(rows, 0));
      k::copy_(mha.c_attn->bias, cat(brows, 0));
      k::copy_(mha.c_proj->weight, gqa.c_proj->weight);
      k::copy_(mha.c_proj->bias, gqa.c_proj->bias);
    }
    Tensor x = randn({2, 6, C}, g, DType::F64);
    test::check_close(gqa.forward(x).y, mha.forward(x).y, 1e-12, 1e-12);
    // Fewer parameters: c_attn has C + 2 * KVH * HS outputs.
    CHECK(gqa.c_attn->weight.size(0) == C + 2 * KVH * HS);
  }
}

TEST_CASE("concat-then-c_proj equals the sum over heads of each head's slice of c_proj") {
  Generator g(6);
  const int64_t C = 12, NH = 3, HS = 4;
  Attention a({C, NH, NH, true, true, 0.0});
  randomize(a, g, DType::F64);
  Tensor x = randn({2, 5, C}, g, DType::F64);
  const Tensor& W = a.c_attn->weight;
  const Tensor& Wo = a.c_proj->weight;
  // Per-head outputs out_h, then sum_h out_h Wo[:, h*HS:(h+1)*HS]^T + bo.
  Tensor q = add(matmul(x, transpose(narrow(W, 0, 0, C), 0, 1)), narrow(a.c_attn->bias, 0, 0, C));
  Tensor kk = add(matmul(x, transpose(narrow(W, 0, C, C), 0, 1)), narrow(a.c_attn->bias, 0, C, C));
  Tensor v =
      add(matmul(x, transpose(narrow(W, 0, 2 * C, C), 0, 1)), narrow(a.c_attn->bias, 0, 2 * C, C));
  Tensor total = a.c_proj->bias;
  for (int64_t h = 0; h < NH; ++h) {
    Tensor qh = narrow(q, 2, h * HS, HS), kh = narrow(kk, 2, h * HS, HS),
           vh = narrow(v, 2, h * HS, HS);
    Tensor s = div(matmul(qh, transpose(kh, 1, 2)), 2.0);  // sqrt(HS) = 2
    s = masked_fill(s, k::triu_mask(5, 5, 1), -INFINITY);
    Tensor out_h = matmul(softmax(s), vh);                                          // (B, T, HS)
    total = add(total, matmul(out_h, transpose(narrow(Wo, 1, h * HS, HS), 0, 1)));  // (B, T, C)
  }
  test::check_close(a.forward(x).y, total, 1e-12, 1e-12);
}

TEST_CASE("cross-attention reads keys and values from the context on both paths") {
  Generator g(7);
  Attention a(AttentionConfig{.n_embd = 8, .n_head = 2, .n_kv_head = 2, .causal = false, .bias = false, .dropout = 0.0});
  randomize(a, g, DType::F64);
  Tensor x = randn({2, 3, 8}, g, DType::F64), ctx = randn({2, 5, 8}, g, DType::F64);
  const Tensor& W = a.c_attn->weight;
  Tensor want = reference_attention(x, ctx, narrow(W, 0, 0, 8), narrow(W, 0, 8, 8),
                                    narrow(W, 0, 16, 8), a.c_proj->weight, 2, false);
  AttentionTrace tr;
  AttentionOutput out = a.forward(x, ctx, &tr);  // with a trace: the composed ops
  test::check_close(out.y, want, 1e-12, 1e-12);
  REQUIRE(a.fused);
  test::check_close(a.forward(x, ctx).y, want, 1e-12, 1e-12);  // the fused kernel
  CHECK(tr.weights.shape() == Shape{2, 2, 3, 5});
  CHECK(tr.scores.shape() == Shape{2, 2, 3, 5});
}

TEST_CASE("decoding with the key/value cache equals the full forward") {
  Generator g(8);
  GPT m(GPTConfig{.vocab_size = 19, .block_size = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .dropout = 0.0, .bias = true}, 9);
  m.eval();
  Tensor idx = randint({1, 9}, 0, 19, g);
  Tensor full = m.forward(idx).logits;  // (1, 9, V)
  NoGradGuard no_grad;
  std::vector<KVCache> caches;
  Tensor first = m.forward(k::narrow(idx, 1, 0, 4), Tensor(), nullptr, &caches).logits;
  test::check_close(first, k::narrow(full, 1, 0, 4), 1e-5);
  for (int64_t t = 4; t < 9; ++t) {
    Tensor step = m.forward(k::narrow(idx, 1, t, 1), Tensor(), nullptr, &caches).logits;
    CAPTURE(t);
    test::check_close(step, k::narrow(full, 1, t, 1), 1e-5);
  }
  CHECK(caches[0].length() == 9);
}

namespace {

void set_fused(Module& m, bool on) {
  for (auto& [_, mod] : m.named_modules())
    if (auto* a = dynamic_cast<Attention*>(mod)) a->fused = on;
}

}  // namespace

TEST_CASE(
    "a GPT training step with dropout: the fused path gives the composed logits bit for bit") {
  // Same masks (drawn by the kernel from the dropout's stream), same scores and softmax
  // rows: the forward is identical; the gradients sum dk and dv in another order, so they
  // agree to f32 rounding (relative to each parameter's largest gradient: measured at most
  // 1.7e-7, bound 1e-5 as for the kernel alone).
  Generator g(5);
  GPT m(GPTConfig{.vocab_size = 23, .block_size = 40, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .dropout = 0.2, .bias = true}, 3);
  m.keep_logits = true;
  m.dropout_context->seed = 11;
  m.dropout_context->step = 4;
  Tensor idx = randint({3, 40}, 0, 23, g), tgt = randint({3, 40}, 0, 23, g);
  std::vector<Tensor> logits;
  std::vector<std::vector<std::vector<double>>> grads(2);
  for (int path = 0; path < 2; ++path) {
    set_fused(m, path == 0);
    m.zero_grad();
    GPTOutput out = m.forward(idx, tgt);
    out.loss.backward();
    logits.push_back(out.logits.detach());
    for (const Tensor& p : m.parameters()) grads[path].push_back(p.grad().to_vector<double>());
  }
  set_fused(m, true);
  CHECK(test::bit_identical(logits[0], logits[1]));
  for (size_t i = 0; i < grads[0].size(); ++i) {
    double worst = 0, largest = 0;
    for (size_t e = 0; e < grads[0][i].size(); ++e) {
      worst = std::max(worst, std::abs(grads[0][i][e] - grads[1][i][e]));
      largest = std::max(largest, std::abs(grads[1][i][e]));
    }
    CAPTURE(i);
    CHECK(worst <= 1e-5 * largest);  // measured worst 1.7e-7
  }
}

TEST_CASE("the key/value cache on the fused path equals the composed path") {
  Generator g(8);
  GPT m(GPTConfig{.vocab_size = 19, .block_size = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .dropout = 0.0, .bias = true}, 9);
  m.eval();
  Tensor idx = randint({1, 9}, 0, 19, g);
  NoGradGuard no_grad;
  std::vector<Tensor> last(2);
  for (int path = 0; path < 2; ++path) {
    set_fused(m, path == 0);
    std::vector<KVCache> caches;
    m.forward(k::narrow(idx, 1, 0, 4), Tensor(), nullptr, &caches);
    for (int64_t t = 4; t < 9; ++t)
      last[path] = m.forward(k::narrow(idx, 1, t, 1), Tensor(), nullptr, &caches).logits;
  }
  set_fused(m, true);
  CHECK(test::bit_identical(last[0], last[1]));
}
