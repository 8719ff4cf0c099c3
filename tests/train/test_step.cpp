// The training step (train/step.h) as the trainer runs it, and the random streams it
// draws from: accumulation averages the micro-steps' gradients, a bad loss stops before
// the update, and no two consumers of the run's seed share a Philox block.
#include <omp.h>

#include <filesystem>
#include <set>

#include "data/token_file.h"
#include "nn/layers.h"
#include "tensor/kernels.h"
#include "test_util.h"
#include "train/progress.h"
#include "infer/sample.h"
#include "train/step.h"

using namespace attend;
using namespace attend::train;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path dir = test::temp_dir("step");
  std::unique_ptr<data::TokenDataset> ds;
  TrainConfig c;
  Fixture() {
    Generator g(9);
    const std::vector<int64_t> ids = randint({400}, 0, 13, g).to_vector<int64_t>();
    data::write_token_file(dir / "t.bin", data::TokenIds(ids.begin(), ids.end()), 13);
    ds = std::make_unique<data::TokenDataset>(dir / "t.bin", 8);
    c.model = nn::GPTConfig{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_kv_head = 2, .n_embd = 16, .dropout = 0.1, .bias = true};  // dropout on: masks matter too
    c.batch_size = 3;
    c.seed = 5;
  }
  ~Fixture() { fs::remove_all(dir); }
};

std::vector<Tensor> grads(const nn::GPT& m) {
  std::vector<Tensor> out;
  for (auto& p : m.parameters()) out.push_back(kernel::clone(p.grad()));
  return out;
}

}  // namespace

TEST_CASE("accumulate_gradients: M micro-steps give the mean of the micro-steps' gradients") {
  Fixture f;
  f.c.gradient_accumulation_steps = 3;
  nn::GPT m(f.c.model, 4);
  m.train();
  const double loss = accumulate_gradients(m, *f.ds, f.c, 7);
  const std::vector<Tensor> got = grads(m);
  // The same micro-steps one at a time: batch and dropout keyed by (seed, 7, k).
  std::vector<Tensor> want(got.size());
  double want_loss = 0;
  for (uint32_t k = 0; k < 3; ++k) {
    m.zero_grad();
    m.dropout_context->step = 7;
    m.dropout_context->micro_step = k;
    data::Batch b = f.ds->random_batch(5, 7, k, 3);
    Tensor l = m.forward(b.x, b.y).loss;
    want_loss += l.item() / 3;
    l.backward();
    NoGradGuard no_grad;
    std::vector<Tensor> g = grads(m);
    for (size_t i = 0; i < g.size(); ++i)
      want[i] = k == 0 ? div(g[i], 3.0) : add(want[i], div(g[i], 3.0));
  }
  CHECK(loss == doctest::Approx(want_loss).epsilon(1e-12));
  // f32: (g0 + g1 + g2) / 3 accumulated as g0/3 + g1/3 + g2/3 in another order differs by
  // rounding only: measured worst 1e-8 to 3e-8 (a few ulps; the gradients are below 0.1, where
  // an ulp is 7e-9); 1e-7 leaves 3x. A missing 1/M would be off by 3x of the value.
  for (size_t i = 0; i < got.size(); ++i) test::check_close(got[i], want[i], 1e-7, 0);
}

TEST_CASE("train_step: the update applies the clipped gradients at lr (SGD, no momentum)") {
  Fixture f;
  f.c.optimizer = "sgd", f.c.momentum = 0, f.c.weight_decay = 0, f.c.grad_clip = 0.5;
  f.c.gradient_accumulation_steps = 2;
  nn::GPT a(f.c.model, 4), b(f.c.model, 4);
  a.train(), b.train();
  auto opt = make_optimizer(f.c, a);
  const StepResult r = train_step(a, *opt, *f.ds, f.c, 3, 0.1);
  accumulate_gradients(b, *f.ds, f.c, 3);
  const double norm = clip_grad_norm(b.parameters(), 0.5);
  CHECK(r.grad_norm == norm);
  CHECK(r.lr == 0.1);
  // SGD with momentum 0 and no decay: p - float(lr) * g, element by element.
  const auto pa = a.parameters(), pb = b.parameters();
  int64_t differ = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> got = pa[i].to_vector<float>(), p = pb[i].to_vector<float>(),
                             g = pb[i].grad().to_vector<float>();
    for (size_t j = 0; j < got.size(); ++j) differ += got[j] != p[j] - 0.1f * g[j];
  }
  CHECK(differ == 0);
}

TEST_CASE("train_step: a non-finite loss stops before the update") {
  Fixture f;
  nn::GPT m(f.c.model, 4);
  m.train();
  auto opt = make_optimizer(f.c, m);
  kernel::fill_(m.parameters()[0], NAN);
  std::vector<Tensor> before;
  for (auto& p : m.parameters()) before.push_back(kernel::clone(p));
  test::check_error([&] { train_step(m, *opt, *f.ds, f.c, 0, 1e-3); },
                    "step 0: the loss is");  // nan or -nan, as the build computes it
  CHECK(opt->steps() == 0);
  for (size_t i = 1; i < before.size(); ++i)
    CHECK(test::bit_identical(m.parameters()[i], before[i]));
}

TEST_CASE("random streams: no two consumers draw the same Philox block") {
  // Every (consumer, arguments) on a grid of steps, micro-steps, rows and indices; the
  // counters must all differ (the key is the run's seed for all of them). Before the
  // streams had ids, a batch row and the embedding dropout shared (b, 0, step, 0).
  std::map<PhiloxCounter, std::string> seen;
  int collisions = 0;
  auto add = [&](const PhiloxCounter& c, const std::string& who) {
    auto [it, fresh] = seen.emplace(c, who);
    if (!fresh && it->second != who) ++collisions;
  };
  for (uint64_t step : {0ull, 1ull, 2ull, 5ull, (1ull << 32) + 1}) {
    for (uint32_t m = 0; m < 3; ++m) {
      for (uint32_t b = 0; b < 8; ++b) {
        add(batch_counter(Stream::Batch, b, m, step), "batch");
        add(batch_counter(Stream::EvalTrain, b, m, step), "eval train");
        add(batch_counter(Stream::EvalVal, b, m, step), "eval val");
        for (uint32_t index = 0; index < 3; ++index)
          add(dropout_counter(b, step, index, m), "dropout");
      }
    }
  }
  for (uint64_t i = 0; i < 64; ++i)
    add(generator_counter(i), "generator"), add(infer::sample_counter(i), "sample");
  CHECK(collisions == 0);
  CHECK(seen.size() == 5 * 3 * 8 * 6 + 128);  // and none collides within a consumer
}

namespace {

// The parameters' gradients as one flat f32 buffer (parameters() order).
std::vector<float> flat_grads(const nn::GPT& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters()) {
    const std::vector<float> g = kernel::contiguous(p.grad()).to_vector<float>();
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

std::vector<float> plus(std::vector<float> a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace

TEST_CASE("the micro-steps' gradients sum in one tree: rank blocks give the same bits") {
  // What W ranks compute (Note [Data-parallel training]), emulated in one process: each
  // block's tree sum, then the blocks paired at distance 1, 2, 4. Equal bit for bit to the
  // single-process sum, which is what makes mpirun -np W exact.
  for (const int64_t M : {6, 8}) {
    CAPTURE(M);
    Fixture f;
    f.c.gradient_accumulation_steps = M;
    nn::GPT m(f.c.model, 4);
    m.train();
    accumulate_gradients(m, *f.ds, f.c, 7);
    const std::vector<float> whole = flat_grads(m);
    for (const int64_t W : {2, 4, 8}) {
      if (M % W) continue;
      CAPTURE(W);
      std::vector<std::vector<float>> level(static_cast<size_t>(W));
      for (int64_t r = 0; r < W; ++r)
        accumulate_block(m, *f.ds, f.c, 7, r * M / W, (r + 1) * M / W,
                         level[static_cast<size_t>(r)]);
      while (level.size() > 1) {
        std::vector<std::vector<float>> up;
        for (size_t i = 0; i < level.size(); i += 2) up.push_back(plus(level[i], level[i + 1]));
        level = up;
      }
      CHECK(level[0] == whole);
    }
    // The sequential sum (what accumulating into .grad did) is another association: for
    // this model it differs in some element, so the check above can fail.
    std::vector<float> seq;
    for (int64_t k = 0; k < M; ++k) {
      std::vector<float> g;
      accumulate_block(m, *f.ds, f.c, 7, k, k + 1, g);
      seq = k == 0 ? g : plus(seq, g);
    }
    CHECK(seq != whole);
  }
}
