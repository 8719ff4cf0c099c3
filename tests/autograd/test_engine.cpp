// The backward engine: accumulation, views, broadcasting, no-grad, retain_graph and the
// errors around them.
#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using attend::test::check_error;

namespace {
Tensor leaf(std::vector<double> v, Shape s) {
  Tensor t = tensor(v, s, DType::F64);
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE("gradients accumulate with += across backward calls") {
  Tensor x = leaf({1, 2, 3}, {3});
  sum(mul(x, x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  x.zero_grad();
  CHECK(!x.grad().defined());
}

TEST_CASE("a tensor used twice gets the sum of both paths") {
  Tensor x = leaf({2}, {1});
  // y = x * x + exp(x): dy/dx = 2x + exp(x)
  sum(add(mul(x, x), exp(x))).backward();
  CHECK(x.grad().item() == doctest::Approx(4 + std::exp(2.0)).epsilon(1e-15));
}

TEST_CASE("broadcast operands get gradients summed back to their shape") {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  Tensor c = leaf({7}, {});
  sum(mul(add(a, b), c)).backward();
  CHECK(b.grad().shape() == Shape{3});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{14, 14, 14});
  CHECK(c.grad().item() == 21 + 120);
  CHECK(a.grad().to_vector<double>() == std::vector<double>(6, 7));
}

TEST_CASE("gradients through views reach their base") {
  Tensor base = leaf({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = narrow(transpose(base, 0, 1), 0, 1, 2);  // rows 1..2 of base^T: (2, 2)
  sum(mul(v, tensor({1, 2, 3, 4}, {2, 2}, DType::F64))).backward();
  // v[i][j] = base[j][i + 1]
  CHECK(base.grad().to_vector<double>() == std::vector<double>{0, 1, 3, 0, 2, 4});
  CHECK(!v.is_leaf());
}

TEST_CASE("backward of a non-scalar takes an explicit gradient") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 3.0);
  check_error([&] { y.backward(); },
              "backward: a gradient can be created implicitly only for a one-element output, "
              "got shape (2,)");
  check_error([&] { y.backward(ones({3}, DType::F64)); }, "backward: expected grad of shape (2,)");
  y.backward(tensor({1, 10}, {2}, DType::F64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 30});
}

TEST_CASE("a second backward through a freed graph is an error - retain_graph keeps it") {
  Tensor x = leaf({1, 2}, {2});
  Tensor loss = sum(exp(x));
  loss.backward();
  check_error([&] { loss.backward(); }, "was already freed by an earlier backward");

  Tensor x2 = leaf({1, 2}, {2});
  Tensor loss2 = sum(exp(x2));
  loss2.backward(Tensor(), /*retain_graph=*/true);
  loss2.backward();
  CHECK(x2.grad().at({0}) == doctest::Approx(2 * std::exp(1.0)).epsilon(1e-15));
}

TEST_CASE("no-grad scope records nothing - detach leaves the graph") {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard guard;
    CHECK(!autograd::is_grad_enabled());
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(autograd::is_grad_enabled());
  Tensor d = mul(x, 2.0).detach();
  CHECK(!d.requires_grad());
  check_error([&] { d.backward(); }, "backward: the tensor does not require grad");
  // Inputs that do not require grad produce outputs that do not either.
  CHECK(!exp(ones({2})).requires_grad());
}

TEST_CASE("only inputs that require grad get one") {
  Tensor x = leaf({1, 2}, {2});
  Tensor k = tensor({3, 4}, {2}, DType::F64);
  sum(mul(x, k)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 4});
  CHECK(!k.grad().defined());
}

TEST_CASE("an op returning its input unchanged still records a fresh node") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = contiguous(x);  // the kernel returns x itself
  CHECK(!c.is_same(x));
  CHECK(x.is_leaf());
  sum(mul(c, c)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("a deep chain does not overflow the stack") {
  Tensor x = leaf({1}, {1});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = add(y, 0.0);
  sum(y).backward();
  CHECK(x.grad().item() == 1);
}

TEST_CASE("a graph 500,000 ops deep is freed without deep recursion") {
  // Regression (adversarial L10): freeing a 300,000-op graph (never backpropagated, so its
  // closures hold tensors too) recursed once per node and overflowed the stack.
  Tensor x = leaf({1}, {1});
  {
    Tensor y = x;
    for (int i = 0; i < 500000; ++i) y = add(y, 1.0);
    CHECK(y.item() == 500001);
  }  // y and its graph go here
  CHECK(x.requires_grad());
}

TEST_CASE("a leaf takes a gradient nobody else sees and copies one that is shared") {
  // The engine takes a fresh gradient as the leaf's .grad instead of copying it; a
  // gradient that reaches two leaves (add's backward passes g to both inputs) or is a view
  // must be copied, or accumulating into one leaf would change the other.
  Tensor a = ones({3}, DType::F64).requires_grad_();
  Tensor b = ones({3}, DType::F64).requires_grad_();
  for (int round = 1; round <= 2; ++round) {
    sum(add(a, b)).backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>(3, round));
    CHECK(b.grad().to_vector<double>() == std::vector<double>(3, round));
  }
  CHECK_FALSE(a.grad().impl()->storage == b.grad().impl()->storage);
  // A matmul's weight gradient is fresh: taken, and still right after accumulation.
  Tensor w = tensor({1, 2, 3, 4}, {2, 2}, DType::F64).requires_grad_();
  const Tensor x = tensor({1, 0, 0, 1}, {2, 2}, DType::F64);
  sum(matmul(x, w)).backward();
  sum(matmul(x, w)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 2, 2, 2});
  // The gradient given to backward() by the caller is never taken.
  Tensor c = ones({2}, DType::F64).requires_grad_();
  const Tensor given = ones({2}, DType::F64);
  c.backward(given);
  c.backward(given);
  CHECK(given.to_vector<double>() == std::vector<double>{1, 1});
  CHECK(c.grad().to_vector<double>() == std::vector<double>{2, 2});
}

TEST_CASE("a tied table's embedding gradient is added in place - same bits, no second table") {
  // GPT-2's wte: the embedding's output feeds a linear through the same table (the LM
  // head), so the linear's backward gives the leaf its gradient first; the embedding then
  // adds its rows into it (Node::accumulate) instead of building a vocab x C table and
  // adding that.
  const int64_t V = 1024, C = 64;
  Generator gen(7);
  for (DType dt : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dt));
    const Tensor w0 = randn({V, C}, gen, dt);
    const Tensor ids = randint({3, 5}, 0, 6, gen);  // few rows, many repeats
    const Tensor r = randn({3, 5, V}, gen, dt);
    // Expected: the linear's weight gradient (the embedding's output detached), plus
    // embedding_backward's dense table of the gradient that reaches the embedding.
    Tensor wa = kernel::clone(w0).requires_grad_();
    Tensor e = embedding(wa, ids).detach().requires_grad_();
    sum(mul(linear(e, wa, Tensor()), r)).backward();
    const Tensor expected = kernel::binary(kernel::Binary::Add, wa.grad(),
                                           kernel::embedding_backward(e.grad(), ids, V));

    Tensor w = kernel::clone(w0).requires_grad_();
    Tensor loss = sum(mul(linear(embedding(w, ids), w, Tensor()), r));
    const size_t before = storage_stats().live;
    reset_storage_peak();
    loss.backward();
    CHECK(w.grad().to_vector<double>() == expected.to_vector<double>());
    // While backward ran, the new storage was w's gradient and the small activations'
    // gradients (15 x V, a quarter of the table): a dense embedding gradient would have
    // been a second table.
    const size_t table = static_cast<size_t>(V * C) * dtype_size(dt);
    CHECK(storage_stats().peak - before < table + table / 2);
    // The table's own first gradient (nothing before it) is still the dense one, taken.
    Tensor u = kernel::clone(w0).requires_grad_();
    sum(mul(embedding(u, ids), e.grad())).backward();
    CHECK(u.grad().to_vector<double>() ==
          kernel::embedding_backward(e.grad(), ids, V).to_vector<double>());
  }
}

TEST_CASE("flatten: (2, 3, 4) to (24,) in order, and the gradient flows back in that shape") {
  Generator g(1);
  Tensor x = randn({2, 3, 4}, g).requires_grad_();
  Tensor f = flatten(x);
  CHECK(f.shape() == Shape{24});
  CHECK(f.to_vector<float>() == kernel::contiguous(x).to_vector<float>());
  Tensor w = randn({24}, g);
  sum(mul(f, w)).backward();
  CHECK(x.grad().shape() == x.shape());
  CHECK(x.grad().to_vector<float>() == w.to_vector<float>());
}
