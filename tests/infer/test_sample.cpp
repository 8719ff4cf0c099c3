// choose_token: temperature, top-k and top-p on hand-made logits, at the boundaries.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "infer/sample.h"

using namespace attend;
using namespace attend::infer;

namespace {
// Logits whose softmax is exactly the given probabilities (up to f32 rounding of logs).
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}
SampleOptions opts(double temperature, int64_t top_k, double top_p) {
  SampleOptions o;
  o.temperature = temperature, o.top_k = top_k, o.top_p = top_p;
  return o;
}
}  // namespace

TEST_CASE("choose_token: temperature 0 is greedy, ties to the lower id") {
  const std::vector<float> l{0.5f, 2.0f, 2.0f, -1.0f};
  for (double u : {0.0, 0.5, 0.999}) CHECK(choose_token(l.data(), 4, opts(0, 0, 1), u) == 1);
}

TEST_CASE("choose_token: greedy over a vocabulary equals max_element, and a non-finite logit is named") {
  // The greedy pass is one vectorised loop (maximum, then its first index): its twin is
  // std::max_element, ties included, over a GPT-2-sized vocabulary with repeated values.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(-40, 40);
  std::vector<float> l(50257);
  for (int round = 0; round < 20; ++round) {
    for (float& x : l) x = 0.25f * static_cast<float>(level(rng));
    CHECK(choose_token(l.data(), static_cast<int64_t>(l.size()), opts(0, 0, 1), 0.5) ==
          std::max_element(l.begin(), l.end()) - l.begin());
  }
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY})
    for (const double t : {0.0, 1.0}) {
      std::vector<float> b = l;
      b[31000] = bad;
      b[40000] = bad;
      try {
        (void)choose_token(b.data(), static_cast<int64_t>(b.size()), opts(t, 0, 1), 0.5);
        FAIL("a non-finite logit was accepted");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find("logit for token 31000 is") != std::string::npos);
      }
      // One bad logit alone, in the vectors (5) or past them (50256: V is 16 k + 1).
      for (const int64_t at : {5, 50256}) {
        std::vector<float> c = l;
        c[static_cast<size_t>(at)] = bad;
        CAPTURE(at);
        try {
          (void)choose_token(c.data(), static_cast<int64_t>(c.size()), opts(t, 0, 1), 0.5);
          FAIL("a non-finite logit was accepted");
        } catch (const Error& e) {
          CHECK(std::string(e.what()).find("logit for token " + std::to_string(at) + " is") !=
                std::string::npos);
        }
      }
    }
  // Zeros of both signs as the maximum: the first of them, whatever sign each lane kept.
  std::vector<float> z(100, -1.0f);
  z[37] = -0.0f, z[38] = 0.0f, z[53] = 0.0f, z[99] = -0.0f;
  CHECK(choose_token(z.data(), 100, opts(0, 0, 1), 0.5) == 37);
  z[37] = 0.0f, z[17] = -0.0f;
  CHECK(choose_token(z.data(), 100, opts(0, 0, 1), 0.5) == 17);
}

TEST_CASE("choose_token: u walks the cumulative distribution, most likely first") {
  const auto l = logits_of({0.1, 0.2, 0.3, 0.4});
  const SampleOptions o = opts(1, 0, 1);
  CHECK(choose_token(l.data(), 4, o, 0.05) == 3);  // [0, 0.4)
  CHECK(choose_token(l.data(), 4, o, 0.45) == 2);  // [0.4, 0.7)
  CHECK(choose_token(l.data(), 4, o, 0.75) == 1);  // [0.7, 0.9)
  CHECK(choose_token(l.data(), 4, o, 0.95) == 0);  // [0.9, 1)
}

TEST_CASE("choose_token: top_k keeps the k most likely, top_p the smallest set reaching p") {
  const auto l = logits_of({0.1, 0.2, 0.3, 0.4});
  // top_k 1: always the most likely.
  for (double u : {0.0, 0.3, 0.99}) CHECK(choose_token(l.data(), 4, opts(1, 1, 1), u) == 3);
  // top_k 2: ids 2 and 3, renormalised to 3/7 and 4/7; never 0 or 1.
  for (double u = 0.0; u < 1.0; u += 0.01) {
    const int32_t t = choose_token(l.data(), 4, opts(1, 2, 1), u);
    CHECK((t == 2 || t == 3));
  }
  // top_p 0.5: 0.4 alone is short of 0.5, so {3, 2}; top_p 0.4 or less: {3} alone.
  for (double u = 0.0; u < 1.0; u += 0.01) {
    const int32_t t = choose_token(l.data(), 4, opts(1, 0, 0.5), u);
    CHECK((t == 2 || t == 3));
    CHECK(choose_token(l.data(), 4, opts(1, 0, 0.3), u) == 3);
  }
}

TEST_CASE("choose_token: a low temperature sharpens, a high one flattens") {
  const auto l = logits_of({0.3, 0.7});
  // P(1) at temperature t is 0.7^(1/t) / (0.3^(1/t) + 0.7^(1/t)); id 1 comes first.
  auto p1 = [](double t) {
    return std::pow(0.7, 1 / t) / (std::pow(0.3, 1 / t) + std::pow(0.7, 1 / t));
  };
  for (double t : {0.25, 1.0, 4.0}) {
    CAPTURE(t);
    CHECK(choose_token(l.data(), 2, opts(t, 0, 1), p1(t) - 1e-4) == 1);
    CHECK(choose_token(l.data(), 2, opts(t, 0, 1), p1(t) + 1e-4) == 0);
  }
}

TEST_CASE("choose_token: a subnormal temperature is greedy, NaN logits are an error") {
  // Regression (adversarial L1): l / t overflowed to inf, inf - inf gave NaN, and the
  // least likely token came out.
  const auto l = logits_of({0.1, 0.2, 0.3, 0.4});
  for (double t : {1e-300, 1e-310})
    for (double u : {0.0, 0.5, 0.999}) CHECK(choose_token(l.data(), 4, opts(t, 0, 1), u) == 3);
  std::vector<float> bad = l;
  bad[2] = NAN;
  test::check_error([&] { choose_token(bad.data(), 4, opts(1, 0, 1), 0.5); },
                    "sample: the model's logit for token 2 is nan");
}

TEST_CASE("choose_token: ordering only the kept tokens picks what a full stable sort picks") {
  // Its twin: the whole vocabulary stable-sorted by logit (ties by id), the first top_k
  // kept, as choose_token did before it ordered only those. Logits with many ties.
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(0, 40);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t V = 1 + trial * 7 % 500;
    std::vector<float> l(static_cast<size_t>(V));
    for (float& x : l) x = static_cast<float>(level(rng)) * 0.25f;
    const SampleOptions o = opts(0.5 + uni(rng), 1 + trial % 60, trial % 3 == 0 ? 0.9 : 1.0);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const int64_t keep = std::min(o.top_k, V);
    std::vector<double> p(static_cast<size_t>(keep));
    double z = 0;
    for (int64_t i = 0; i < keep; ++i)
      z += p[i] = std::exp((static_cast<double>(l[order[i]]) - l[order[0]]) / o.temperature);
    for (double& x : p) x /= z;
    int64_t n = keep;
    if (o.top_p < 1.0) {
      double c = 0;
      n = 0;
      while (n < keep && c < o.top_p) c += p[n++];
      n = std::max<int64_t>(1, n);
      p.resize(n);
      z = std::accumulate(p.begin(), p.end(), 0.0);
      for (double& x : p) x /= z;
    }
    for (int k = 0; k < 5; ++k) {
      const double u = uni(rng);
      double c = 0;
      int32_t want = order[n - 1];
      for (int64_t i = 0; i < n; ++i)
        if (u < (c += p[i])) {
          want = order[i];
          break;
        }
      CHECK(choose_token(l.data(), V, o, u) == want);
    }
  }
}

TEST_CASE("sample: stop_token ends a reply unemitted, and cancel stops it where it is") {
  nn::GPTConfig c;
  c.vocab_size = 13, c.block_size = 32, c.n_layer = 1, c.n_head = 2, c.n_kv_head = 2, c.n_embd = 16;
  const nn::GPT model(c, 5);
  std::string chars;
  for (int i = 0; i < 13; ++i) chars += static_cast<char>('a' + i);
  const auto tok = data::build_char_tokenizer(chars);
  SampleOptions o;
  o.prompt = "abc", o.max_new_tokens = 20, o.temperature = 0;
  const data::TokenIds all = sample(model, *tok, o, [](const std::string&) {});
  REQUIRE(all.size() == 20);
  // The greedy draw's 6th token as the stop token: the reply is the 5 before it, at most.
  o.stop_token = all[5];
  const size_t first = static_cast<size_t>(std::find(all.begin(), all.end(), all[5]) - all.begin());
  std::string emitted;
  const data::TokenIds cut = sample(model, *tok, o, [&](const std::string& p) { emitted += p; });
  CHECK(cut == data::TokenIds(all.begin(), all.begin() + static_cast<int64_t>(first)));
  CHECK(emitted == tok->decode(cut));
  // cancel, set by the third piece: three tokens, then nothing more.
  o.stop_token = -1;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  int pieces = 0;
  const data::TokenIds three = sample(model, *tok, o, [&](const std::string&) {
    if (++pieces == 3) cancel.store(true);
  });
  CHECK(three == data::TokenIds(all.begin(), all.begin() + 3));
}

TEST_CASE("Conversation: a second turn from the kept caches draws what one pass over it all does") {
  nn::GPTConfig c;
  c.vocab_size = 13, c.block_size = 64, c.n_layer = 2, c.n_head = 2, c.n_kv_head = 1, c.n_embd = 16;
  c.arch = "llama", c.bias = false;
  const nn::GPT model(c, 11);
  std::string chars;
  for (int i = 0; i < 13; ++i) chars += static_cast<char>('a' + i);
  const auto tok = data::build_char_tokenizer(chars);
  SampleOptions o;
  o.max_new_tokens = 6, o.temperature = 0.9, o.top_k = 0, o.seed = 5;
  o.stop_token = 12;  // ends a turn, as <|im_end|> would
  const data::TokenIds turn1 = {1, 2, 3, 4}, turn2 = {12, 5, 6, 7};
  auto none = [](const std::string&) {};
  Conversation two(model);
  const data::TokenIds r1 = two.reply(*tok, turn1, o, none, 0);
  REQUIRE(!r1.empty());
  const data::TokenIds r2 = two.reply(*tok, turn2, o, none, 1);
  CHECK(two.tokens().size() == turn1.size() + r1.size() + turn2.size() + r2.size());
  // The same history in one turn, nothing cached: the same second reply.
  data::TokenIds history = turn1;
  history.insert(history.end(), r1.begin(), r1.end());
  history.insert(history.end(), turn2.begin(), turn2.end());
  Conversation one(model);
  CHECK(one.reply(*tok, history, o, none, 1) == r2);
  // And a first turn draws what sample() draws from the same tokens.
  o.prompt = "bcde";
  CHECK(sample(model, *tok, o, none, 0) == r1);
  CHECK(two.fits(64 - static_cast<int64_t>(two.tokens().size()) - 6, 6));
  CHECK(!two.fits(64 - static_cast<int64_t>(two.tokens().size()) - 5, 6));
  two.reset();
  CHECK(two.tokens().empty());
}
