// The fused single-node ops against their compositions from primitives: same values,
// same gradients.
#include <cmath>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "tensor/kernels/gemm.h"
#include "test_util.h"

using namespace attend;

namespace {

using Fn = Tensor (*)(const std::vector<Tensor>&);

// Runs f on fresh leaf copies of xs with upstream gradient v; returns output and grads.
std::vector<Tensor> run(Fn f, const std::vector<Tensor>& xs, const Tensor& v) {
  std::vector<Tensor> in;
  for (const Tensor& x : xs) in.push_back(kernel::clone(x).requires_grad_());
  Tensor out = f(in);
  out.backward(v);
  std::vector<Tensor> res{out.detach()};
  for (const Tensor& x : in) res.push_back(x.grad());
  return res;
}

void check_same(Fn fused, Fn composed, const std::vector<Tensor>& xs, uint64_t seed) {
  Generator g(seed);
  Tensor probe = fused(xs);
  Tensor v = randn(probe.shape(), g, DType::F64);
  auto a = run(fused, xs, v), b = run(composed, xs, v);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("output/grad ", i);
    test::check_close(a[i], b[i], 1e-12, 1e-10);
  }
}

Tensor softmax_composed(const Tensor& x) {
  Tensor e = exp(sub(x, max(x, {-1}, true)));
  return div(e, sum(e, {-1}, true));
}

}  // namespace

TEST_CASE("softmax equals exp(x - max) / sum") {
  Generator g(1);
  check_same([](const std::vector<Tensor>& x) { return softmax(x[0]); },
             [](const std::vector<Tensor>& x) { return softmax_composed(x[0]); },
             {randn({4, 7}, g, DType::F64)}, 2);
}

TEST_CASE("log_softmax equals x - max - log(sum(exp(x - max)))") {
  Generator g(3);
  check_same([](const std::vector<Tensor>& x) { return log_softmax(x[0]); },
             [](const std::vector<Tensor>& x) {
               Tensor s = sub(x[0], max(x[0], {-1}, true));
               return sub(s, log(sum(exp(s), {-1}, true)));
             },
             {randn({2, 3, 6}, g, DType::F64)}, 4);
}

TEST_CASE("layer_norm equals its formula from primitives") {
  Generator g(5);
  check_same(
      [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2], 1e-5); },
      [](const std::vector<Tensor>& x) {
        Tensor mu = mean(x[0], {-1}, true);
        Tensor c = sub(x[0], mu);
        Tensor var = mean(mul(c, c), {-1}, true);
        return add(mul(div(c, sqrt(add(var, 1e-5))), x[1]), x[2]);
      },
      {randn({3, 5, 8}, g, DType::F64), randn({8}, g, DType::F64), randn({8}, g, DType::F64)}, 6);
}

TEST_CASE("cross_entropy equals the mean of -log_softmax at the targets") {
  Generator g(7);
  static Tensor targets = tensor({2, 0, -100, 4, 4, 1}, {2, 3}, DType::I64);
  check_same([](const std::vector<Tensor>& x) { return cross_entropy(x[0], targets); },
             [](const std::vector<Tensor>& x) {
               // one-hot selection with the ignored row dropped, from primitives
               Tensor lp = log_softmax(x[0]);  // (2,3,5)
               std::vector<double> onehot(30, 0.0);
               std::vector<int64_t> t = targets.to_vector<int64_t>();
               int count = 0;
               for (int i = 0; i < 6; ++i)
                 if (t[i] >= 0) {
                   onehot[i * 5 + t[i]] = 1.0;
                   ++count;
                 }
               Tensor oh = tensor(onehot, {2, 3, 5}, DType::F64);
               return div(neg(sum(mul(lp, oh))), static_cast<double>(count));
             },
             {randn({2, 3, 5}, g, DType::F64)}, 8);
}

TEST_CASE("gelu equals 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))") {
  Generator g(9);
  check_same([](const std::vector<Tensor>& x) { return gelu(x[0]); },
             [](const std::vector<Tensor>& x) {
               Tensor inner = mul(add(x[0], mul(pow(x[0], 3.0), 0.044715)), std::sqrt(2.0 / M_PI));
               return mul(mul(x[0], 0.5), add(tanh(inner), 1.0));
             },
             {randn({5, 6}, g, DType::F64)}, 10);
}

TEST_CASE("scaled_softmax equals mul + masked_fill + softmax bit for bit") {
  // The composed path attention used before the fused op, as the oracle: same values and
  // same gradients, to the bit in f32 (f64 gradients: see below), causal (square and with a key
  // cache, Tk > Tq) and unmasked.
  struct Case {
    Shape shape;
    int64_t offset;
  };
  for (const DType dt : {DType::F32, DType::F64})
    for (const Case& c : {Case{{2, 3, 6, 6}, 0}, Case{{2, 2, 3, 7}, 4}, Case{{3, 5, 4}, -1}}) {
      const std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(c.offset);
      Generator g(11);
      const Tensor x = mul(randn(c.shape, g, dt), 3.0);
      const Tensor v = randn(c.shape, g, dt);
      const double scale = 1.0 / std::sqrt(24.0);
      const int64_t tq = c.shape[c.shape.size() - 2], tk = c.shape.back();
      auto composed = [&](const Tensor& in) {
        Tensor s = mul(in, scale);
        if (c.offset >= 0) s = masked_fill(s, kernel::triu_mask(tq, tk, 1 + c.offset), -INFINITY);
        return softmax(s);
      };
      Tensor a = kernel::clone(x).requires_grad_(), b = kernel::clone(x).requires_grad_();
      Tensor ya = scaled_softmax(a, scale, c.offset), yb = composed(b);
      ya.backward(v);
      yb.backward(v);
      // Equal as numbers (== treats -0 and +0 alike: masked gradients may differ in sign).
      CHECK(ya.detach().to_vector<double>() == yb.detach().to_vector<double>());
      {
        const std::vector<double> ga = a.grad().to_vector<double>(),
                                  gb = b.grad().to_vector<double>();
        double worst = 0;
        for (size_t k = 0; k < ga.size(); ++k) worst = std::max(worst, std::abs(ga[k] - gb[k]));
        CAPTURE(worst);
        // f32 (what training runs): the same bits. f64: the compiler may contract the
        // dot product's multiply-add into an FMA in one loop and not the other (GCC's
        // default -ffp-contract=fast for C++); measured worst 8.7e-18 on gradients of
        // order 1, so 1e-15 (a few ulps) is the bound.
        if (dt == DType::F32)
          CHECK(ga == gb);
        else
          CHECK(worst < 1e-15);
      }
      // Masked weights are exactly 0 and every row sums to 1 within rounding.
      if (c.offset >= 0) {
        const std::vector<double> w = ya.detach().to_vector<double>();
        for (size_t k = 0; k < w.size(); ++k) {
          const int64_t j = static_cast<int64_t>(k) % tk, i = (static_cast<int64_t>(k) / tk) % tq;
          if (j > i + c.offset) CHECK(w[k] == 0.0);
        }
      }
    }
}

TEST_CASE("linear equals matmul then add bit for bit - values and all three gradients") {
  // The oracle is the composed path nn::Linear used before: add(matmul(x, w^T), b). Both
  // form each output and each gradient element as the same products summed in the same
  // order, so f32 results must be identical, not merely close.
  for (const Shape& xs : {Shape{3, 5, 7}, Shape{2, 67, 300}, Shape{130, 40}}) {
    Generator gen(static_cast<uint64_t>(xs.size() + xs[0]));
    const int64_t in = xs.back(), out = in == 7 ? 4 : in == 300 ? 70 : 33;
    Tensor xv = randn(xs, gen), wv = randn({out, in}, gen), bv = randn({out}, gen);
    Tensor gy = randn(
        [&] {
          Shape s = xs;
          s.back() = out;
          return s;
        }(),
        gen);
    Tensor x1 = xv.detach().requires_grad_(), w1 = wv.detach().requires_grad_(),
           b1 = bv.detach().requires_grad_();
    Tensor x2 = xv.detach().requires_grad_(), w2 = wv.detach().requires_grad_(),
           b2 = bv.detach().requires_grad_();
    Tensor fused = linear(x1, w1, b1);
    Tensor composed = add(matmul(x2, transpose(w2, 0, 1)), b2);
    CHECK(test::bit_identical(fused, composed));
    sum(mul(fused, gy)).backward();
    sum(mul(composed, gy)).backward();
    CHECK(test::bit_identical(x1.grad(), x2.grad()));
    CHECK(test::bit_identical(w1.grad(), w2.grad()));
    CHECK(test::bit_identical(b1.grad(), b2.grad()));
    CHECK(w1.grad().is_contiguous());
  }
}

namespace {

// The composed attention the fused op replaces (nn::Attention with fused = false): scores
// by matmul, scaled_softmax, the dropout mask as a tensor, matmul.
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                          int64_t offset, const DropoutStream& drop, int64_t window = 0) {
  const int64_t B = q.size(0), NH = q.size(1), Tq = q.size(2), HS = q.size(3);
  const int64_t KVH = k.size(1), Tk = k.size(2), G = NH / KVH;
  Tensor s = matmul(reshape(q, {B, KVH, G, Tq, HS}), transpose(unsqueeze(k, 2), -1, -2));
  Tensor w = scaled_softmax(reshape(s, {B, NH, Tq, Tk}), scale, offset, window);
  if (drop.p > 0) {
    Tensor mask = empty(w.shape(), w.dtype());
    dispatch_float(w.dtype(), "mask",
                   [&]<typename T>() { dropout_fill(drop, 0, mask.numel(), mask.data<T>()); });
    w = mul(w, mask);
  }
  return reshape(matmul(reshape(w, {B, KVH, G, Tq, Tk}), unsqueeze(v, 2)), {B, NH, Tq, HS});
}

}  // namespace

TEST_CASE(
    "fused attention equals the composed ops: values and dq bit for bit and dk dv within "
    "rounding") {
  // Causal square (rows past one 32-row block, Tk not a multiple of 8), causal with a key
  // cache (Tk > Tq), cross (no mask), GQA and MQA, with and without dropout, f32 and f64,
  // Tk past the GEMM's 256-wide shared-dim block and past the keys packed once per head. The
  // forward computes the same scores (same GEMM, same K), the same softmax rows (kernels/rowmath.h)
  // and the same masks, and skips only keys whose weight is exactly 0, so it gives the composed
  // bits; dq the same. dk and dv sum the query rows in blocks (the composed path in one product),
  // so they agree to rounding: relative to the largest gradient, 1e-5 in f32 and 1e-13 in f64.
  struct Case {
    const char* what;
    int64_t B, NH, KVH, Tq, Tk, HS, offset;
    double p;
    int64_t window = 0;
  };
  const Case cases[] = {
      // Mistral's sliding window: blocks start at their first visible key (the composed bits
      // while the keys fit one 256-key GEMM block; past it, see below)
      {"window 5, 70 rows, dropout", 2, 2, 1, 70, 70, 8, 0, 0.2, 5},
      {"window 40 of 300 keys", 1, 2, 2, 300, 300, 8, 0, 0.0, 40},
      {"window 4, cache: 3 new of 9", 1, 2, 2, 3, 9, 8, 6, 0.1, 4},
      {"causal, 70 rows", 2, 3, 3, 70, 70, 16, 0, 0.0},
      {"causal, dropout", 2, 2, 2, 45, 45, 8, 0, 0.25},
      {"cache: 5 new of 12", 1, 2, 2, 5, 12, 8, 7, 0.0},
      {"cross, no mask, dropout", 2, 2, 2, 9, 40, 8, -1, 0.1},
      {"GQA 4 on 2, dropout", 1, 4, 2, 33, 33, 8, 0, 0.2},
      {"MQA 3 on 1", 2, 3, 1, 17, 17, 4, 0, 0.0},
      {"causal, 300 keys", 1, 1, 1, 300, 300, 8, 0, 0.1},
      // Past the 3072 keys K and V are packed once for (kernels/attention.cpp): the
      // per-product GEMM path.
      {"cache: 3 new of 3100 keys", 1, 2, 1, 3, 3100, 4, 3097, 0.0},
  };
  // Third mode: f32 tensors with bf16 products (--precision bf16), where K and V are packed
  // and rounded once per head. A window that starts at an odd key pairs the keys from there
  // in the fused kernel and from key 0 in the composed product: the same to rounding only.
  for (const int mode : {0, 1, 2})
    for (const Case& c : cases) {
      const DType dt = mode == 1 ? DType::F64 : DType::F32;
      const bool bf16 = mode == 2;
      const kernel::GemmPrecision before = kernel::set_gemm_precision(
          bf16 ? kernel::GemmPrecision::bf16 : kernel::GemmPrecision::f32);
      const std::string dtype = bf16 ? "f32, bf16 products" : dtype_name(dt);
      CAPTURE(dtype);
      const std::string what = c.what;
      CAPTURE(what);
      Generator g(21);
      const Tensor q = randn({c.B, c.NH, c.Tq, c.HS}, g, dt),
                   k = randn({c.B, c.KVH, c.Tk, c.HS}, g, dt),
                   v = randn({c.B, c.KVH, c.Tk, c.HS}, g, dt),
                   up = randn({c.B, c.NH, c.Tq, c.HS}, g, dt);
      const DropoutStream drop{c.p, philox_key(5), 3, 1, 0};
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.HS));
      std::vector<Tensor> res[2];
      for (int path = 0; path < 2; ++path) {
        Tensor a = kernel::clone(q).requires_grad_(), b = kernel::clone(k).requires_grad_(),
               d = kernel::clone(v).requires_grad_();
        Tensor out = path == 0 ? attention(a, b, d, scale, c.offset, drop, c.window)
                               : attention_composed(a, b, d, scale, c.offset, drop, c.window);
        out.backward(up);
        res[path] = {out.detach(), a.grad(), b.grad(), d.grad()};
      }
      // A window whose keys straddle the composed GEMM's 256-key block boundary sums
      // (keys < 256) + (keys >= 256) there and in one run here: the same to rounding only.
      const bool same_bits = c.window == 0 || (c.Tk <= 256 && !bf16);
      for (int i = 0; i < 2; ++i) {
        if (same_bits) {
          CHECK(res[0][i].to_vector<double>() == res[1][i].to_vector<double>());
        } else {
          test::check_close(res[0][i], res[1][i], dt == DType::F32 ? 1e-5 : 1e-13);
        }
      }
      for (int i = 2; i < 4; ++i) {
        const std::vector<double> fa = res[0][i].to_vector<double>(),
                                  co = res[1][i].to_vector<double>();
        double worst = 0, largest = 0;
        for (size_t e = 0; e < fa.size(); ++e) {
          worst = std::max(worst, std::abs(fa[e] - co[e]));
          largest = std::max(largest, std::abs(co[e]));
        }
        CAPTURE(i);
        CAPTURE(worst);
        // Not a vacuous comparison: the gradients are of a real size (over 3100 keys each
        // weight is ~1/3100, so dk and dv are ~0.015 there).
        CHECK(largest > (c.Tk > 1000 ? 0.01 : 0.1));
        CHECK(worst <= (dt == DType::F32 ? 1e-5 : 1e-13) * largest);
      }
      kernel::set_gemm_precision(before);
    }
}

TEST_CASE("fused attention: rows of weights sum to 1 and the future is hidden") {
  // Properties that hold exactly, on the fused path alone: with v = one-hot rows
  // (v[j] = e_j), out[i] is row i of the weights itself.
  const int64_t T = 40;
  Generator g(4);
  Tensor q = randn({1, 1, T, T}, g, DType::F64), k = randn({1, 1, T, T}, g, DType::F64);
  Tensor v = zeros({1, 1, T, T}, DType::F64);
  for (int64_t j = 0; j < T; ++j) v.set({0, 0, j, j}, 1.0);
  Tensor w = attention(q, k, v, 0.3, 0, DropoutStream{});
  for (int64_t i = 0; i < T; ++i) {
    double s = 0;
    for (int64_t j = 0; j < T; ++j) {
      const double x = w.at({0, 0, i, j});
      if (j > i) {
        CHECK(x == 0.0);  // exactly: masked keys are never exponentiated
      } else {
        CHECK(x > 0.0);
      }
      s += x;
    }
    CHECK(std::abs(s - 1.0) < 1e-14);
  }
  // An attention with a cache that sees everything: offset Tk - Tq.
  Tensor w2 = attention(narrow(q, 2, T - 3, 3), k, v, 0.3, T - 3, DropoutStream{});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < T; ++j) CHECK(w2.at({0, 0, i, j}) == w.at({0, 0, T - 3 + i, j}));
}

TEST_CASE("attention_qkv equals attention on views of the packed projections") {
  Generator g(8);
  const int64_t B = 2, T = 37, NH = 4, KVH = 2, HS = 8, C = NH * HS, kv = KVH * HS;
  const Tensor x = randn({B, T, C + 2 * kv}, g, DType::F32), up = randn({B, T, C}, g, DType::F32);
  const DropoutStream drop{0.2, philox_key(3), 1, 4, 0};
  Tensor a = kernel::clone(x).requires_grad_(), b = kernel::clone(x).requires_grad_();
  Tensor ya = attention_qkv(a, NH, KVH, 0.35, 0, drop);
  auto heads = [&](int64_t start, int64_t H) {
    return transpose(reshape(narrow(b, 2, start, H * HS), {B, T, H, HS}), 1, 2);
  };
  Tensor yb = reshape(
      transpose(attention(heads(0, NH), heads(C, KVH), heads(C + kv, KVH), 0.35, 0, drop), 1, 2),
      {B, T, C});
  ya.backward(up);
  yb.backward(up);
  CHECK(ya.detach().to_vector<float>() == yb.detach().to_vector<float>());
  CHECK(a.grad().to_vector<float>() == b.grad().to_vector<float>());
}

TEST_CASE("fused attention refuses shapes that do not fit and names them") {
  Tensor q = zeros({1, 3, 4, 8}), k = zeros({1, 2, 4, 8});
  CHECK_THROWS_WITH(attention(q, k, k, 1.0, 0, DropoutStream{}), doctest::Contains("do not fit"));
  Tensor k2 = zeros({1, 1, 3, 8});
  CHECK_THROWS_WITH(attention(q, k2, k2, 1.0, 0, DropoutStream{}),
                    doctest::Contains("at least as many keys as queries"));
  CHECK_THROWS_WITH(attention_qkv(zeros({1, 4, 10}), 2, 1, 1.0, 0, DropoutStream{}),
                    doctest::Contains("attention_qkv"));
}

TEST_CASE(
    "linear_cross_entropy equals linear then cross_entropy bit for bit in chunks of 256 rows") {
  // The same GEMMs (the weight gradient accumulates chunk by chunk exactly where the
  // composed GEMM's 256-deep K blocks end), the same rows and the same loss sum: identical
  // loss, dx and dw for an upstream gradient of 1, f32 and f64, with ignored rows and a
  // partial last chunk. Other chunk sizes and upstream gradients agree to rounding.
  for (const DType dt : {DType::F32, DType::F64}) {
    const std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    Generator g(31);
    const int64_t N = 600, C = 24, V = 53;
    const Tensor x = randn({N, C}, g, dt), w = randn({V, C}, g, dt);
    Tensor t = randint({N}, 0, V, g, DType::I64);
    for (int64_t r = 0; r < N; r += 37) t.set({r}, -100);
    auto run = [&](int64_t chunk, double upstream, bool fused) {
      Tensor a = kernel::clone(x).requires_grad_(), b = kernel::clone(w).requires_grad_();
      Tensor loss = fused ? linear_cross_entropy(a, b, t, -100, chunk)
                          : cross_entropy(linear(a, b, Tensor()), t);
      mul(loss, upstream).backward();
      return std::vector<Tensor>{loss.detach(), a.grad(), b.grad()};
    };
    const auto want = run(0, 1.0, false);
    for (const int64_t chunk : {int64_t{256}, int64_t{512}, int64_t{0}}) {
      CAPTURE(chunk);
      const auto got = run(chunk, 1.0, true);
      for (int i = 0; i < 3; ++i) CHECK(test::bit_identical(got[i], want[i]));
    }
    for (const int64_t chunk : {int64_t{1}, int64_t{100}}) {
      CAPTURE(chunk);
      const auto got = run(chunk, 1.0, true);
      CHECK(test::bit_identical(got[0], want[0]));  // the loss sums the same rows in order
      test::check_close(got[1], want[1], dt == DType::F32 ? 1e-6 : 1e-14);
      test::check_close(got[2], want[2], dt == DType::F32 ? 1e-5 : 1e-13);
    }
    // Gradient accumulation's upstream 1/M: scaled in backward, equal to rounding.
    const auto half = run(0, 0.25, false), got = run(256, 0.25, true);
    for (int i = 1; i < 3; ++i) test::check_close(got[i], half[i], dt == DType::F32 ? 1e-6 : 1e-15);
  }
}

TEST_CASE("linear_cross_entropy without gradients records nothing and refuses a second backward") {
  Generator g(32);
  Tensor x = randn({5, 4}, g), w = randn({7, 4}, g), t = randint({5}, 0, 7, g, DType::I64);
  {
    NoGradGuard no_grad;
    Tensor x2 = kernel::clone(x).requires_grad_();
    CHECK(linear_cross_entropy(x2, w, t).grad_fn() == nullptr);
  }
  Tensor a = kernel::clone(x).requires_grad_();
  Tensor loss = linear_cross_entropy(a, w, t);
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK_THROWS_WITH(loss.backward(), doctest::Contains("retain_graph is not supported"));
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, randint({4}, 0, 7, g, DType::I64)),
                    doctest::Contains("expected targets of shape"));
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, tensor({0, 1, 7, 2, 3}, {5}, DType::I64)),
                    doctest::Contains("out of range for 7 classes"));
}

TEST_CASE(
    "f32 rows with exp_f32 and lane sums agree with the f64 rows (std::exp) to f32 rounding") {
  // softmax and cross_entropy run exp_f32 and 8-lane sums in f32, std::exp in
  // f64: the f64 result of the same inputs is their plain twin. Bounds: a few f32 ulps.
  Generator g(41);
  const Tensor x64 = mul(randn({37, 301}, g, DType::F64), 4.0);
  const Tensor x32 = kernel::cast(x64, DType::F32);
  test::check_close(kernel::cast(kernel::scaled_softmax(x32, 0.7, 5), DType::F64),
                    kernel::scaled_softmax(x64, 0.7, 5), 1e-7, 1e-6);
  const Tensor t = randint({37}, 0, 301, g, DType::I64);
  const auto c32 = kernel::cross_entropy(x32, t, -100), c64 = kernel::cross_entropy(x64, t, -100);
  CHECK(std::abs(c32.loss.item() - c64.loss.item()) < 1e-6 * std::abs(c64.loss.item()));
  test::check_close(kernel::cast(kernel::cross_entropy_backward(scalar_tensor(1.0, DType::F32), x32,
                                                                t, c32.lse, c32.count, -100),
                                 DType::F64),
                    kernel::cross_entropy_backward(scalar_tensor(1.0, DType::F64), x64, t, c64.lse,
                                                   c64.count, -100),
                    1e-8, 1e-5);
}

// ---- Llama's layers and Mistral's window ---------------------------------------------------

TEST_CASE("rms_norm equals x / sqrt(mean(x^2) + eps) * w from primitives") {
  Generator g(31);
  check_same([](const std::vector<Tensor>& x) { return rms_norm(x[0], x[1], 1e-5); },
             [](const std::vector<Tensor>& x) {
               Tensor ms = mean(mul(x[0], x[0]), {-1}, true);
               return mul(div(x[0], sqrt(add(ms, 1e-5))), x[1]);
             },
             {randn({3, 5, 8}, g, DType::F64), randn({8}, g, DType::F64)}, 32);
}

TEST_CASE("swiglu equals silu(gate) * up from primitives") {
  Generator g(33);
  check_same([](const std::vector<Tensor>& x) { return swiglu(x[0]); },
             [](const std::vector<Tensor>& x) {
               const int64_t H = x[0].size(-1) / 2;
               Tensor a = narrow(x[0], -1, 0, H), b = narrow(x[0], -1, H, H);
               Tensor silu = div(a, add(exp(neg(a)), 1.0));  // a sigmoid(a)
               return mul(silu, b);
             },
             {mul(randn({2, 4, 12}, g, DType::F64), 4.0)}, 34);
}

namespace {

// rotary from primitives: pairs (2i, 2i+1) as the last dim of a (B, T, D/2, 2) view,
// ye = xe cos - xo sin, yo = xe sin + xo cos, with cos 1 and sin 0 past `rotated`.
Tensor rotary_composed(const Tensor& x, int64_t HS, int64_t rotated, int64_t pos0, double theta) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), P = D / 2;
  Tensor cs = ones({T, P}, DType::F64), sn = zeros({T, P}, DType::F64);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t p = 0; p < P; ++p) {
      if (2 * p >= rotated) continue;
      const int64_t i = (2 * p % HS) / 2;
      const double a = static_cast<double>(pos0 + t) * std::pow(theta, -2.0 * i / HS);
      cs.set({t, p}, std::cos(a));
      sn.set({t, p}, std::sin(a));
    }
  Tensor pairs = reshape(x, {B, T, P, 2});
  Tensor xe = select(pairs, 3, 0), xo = select(pairs, 3, 1);
  Tensor ye = sub(mul(xe, cs), mul(xo, sn)), yo = add(mul(xe, sn), mul(xo, cs));
  return reshape(stack({ye, yo}, 3), {B, T, D});
}

}  // namespace

TEST_CASE("rotary equals its pairs turned by cos and sin from primitives") {
  Generator g(35);
  check_same([](const std::vector<Tensor>& x) { return rotary(x[0], 4, 8, 5, 10000.0); },
             [](const std::vector<Tensor>& x) { return rotary_composed(x[0], 4, 8, 5, 10000.0); },
             {randn({2, 6, 12}, g, DType::F64)}, 36);
}

TEST_CASE("RoPE: scores depend on relative position only, position 0 is the identity, norms kept") {
  // q . k after rotating both from position p0 is the same for every p0 (only i - j enters),
  // to rounding; at position 0 nothing turns (exactly); each pair keeps its length.
  Generator g(37);
  const int64_t T = 24, HS = 16;
  const Tensor q = randn({1, T, HS}, g, DType::F64), k = randn({1, T, HS}, g, DType::F64);
  auto scores = [&](int64_t p0) {
    Tensor qr = kernel::rotary(q, HS, HS, p0, 10000.0), kr = kernel::rotary(k, HS, HS, p0, 10000.0);
    return kernel::matmul(qr, kernel::transpose(kr, 1, 2));
  };
  const Tensor s0 = scores(0);
  for (int64_t p0 : {1, 17, 1000, 100000}) {
    CAPTURE(p0);
    test::check_close(scores(p0), s0, 1e-9, 1e-9);
  }
  // Not the same as unrotated scores: positions do matter.
  const Tensor plain = kernel::matmul(q, kernel::transpose(k, 1, 2));
  double moved = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      moved = std::max(moved, std::abs(s0.at({0, i, j}) - plain.at({0, i, j})));
  CHECK(moved > 0.1);
  const Tensor r0 = kernel::rotary(narrow(q, 1, 0, 1), HS, HS, 0, 10000.0);
  CHECK(r0.to_vector<double>() == kernel::contiguous(narrow(q, 1, 0, 1)).to_vector<double>());
  const Tensor r = kernel::rotary(q, HS, HS, 3, 10000.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t p = 0; p < HS / 2; ++p) {
      const double a = q.at({0, t, 2 * p}), b = q.at({0, t, 2 * p + 1});
      const double c = r.at({0, t, 2 * p}), d = r.at({0, t, 2 * p + 1});
      CHECK(std::abs((a * a + b * b) - (c * c + d * d)) < 1e-12);
    }
}

TEST_CASE("sliding window: full causal attention when W >= T, only the W newest keys otherwise") {
  const int64_t T = 40;
  Generator g(39);
  Tensor q = randn({1, 2, T, 8}, g, DType::F32), k = randn({1, 1, T, 8}, g, DType::F32);
  Tensor v = randn({1, 1, T, 8}, g, DType::F32);
  const Tensor full = attention(q, k, v, 0.3, 0, DropoutStream{});
  for (int64_t W : {T, T + 5, int64_t{1000}})
    CHECK(attention(q, k, v, 0.3, 0, DropoutStream{}, W).to_vector<float>() ==
          full.to_vector<float>());
  CHECK(attention(q, k, v, 0.3, 0, DropoutStream{}, T - 1).to_vector<float>() !=
        full.to_vector<float>());
  // The weights themselves (v = one-hot rows, f64): key j is seen by query i iff
  // i - W < j <= i, and each row sums to 1.
  const int64_t W = 7;
  Tensor q64 = randn({1, 1, T, T}, g, DType::F64), k64 = randn({1, 1, T, T}, g, DType::F64);
  Tensor eye = zeros({1, 1, T, T}, DType::F64);
  for (int64_t j = 0; j < T; ++j) eye.set({0, 0, j, j}, 1.0);
  const Tensor w = attention(q64, k64, eye, 0.3, 0, DropoutStream{}, W);
  for (int64_t i = 0; i < T; ++i) {
    double s = 0;
    for (int64_t j = 0; j < T; ++j) {
      const double x = w.at({0, 0, i, j});
      if (j > i || j <= i - W) {
        CHECK(x == 0.0);
      } else {
        CHECK(x > 0.0);
      }
      s += x;
    }
    CHECK(std::abs(s - 1.0) < 1e-14);
  }
  // scaled_softmax's window is the same mask.
  const Tensor sw = scaled_softmax(matmul(q64, transpose(k64, 2, 3)), 0.3, 0, W);
  test::check_close(sw, w, 1e-14, 1e-14);
}
