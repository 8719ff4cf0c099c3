// LoRA adapters (nn/lora.h): a fresh adapter changes nothing bit for bit, only the adapters
// train, the merged weights compute what the adapters do, and the targets are checked.
// Their gradients are gradcheck rows (nn.LoRA.whole, nn.LoRA.slices).
#include <sys/mman.h>

#include <cmath>

#include "nn/gpt.h"
#include "nn/lora.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"

using namespace attend;
using namespace attend::nn;

namespace {

GPTConfig tiny(const std::string& family) {
  GPTConfig c = family == "llama" ? gpt_preset("llama-char") : GPTConfig{};
  c.vocab_size = 13, c.block_size = 16, c.n_layer = 2, c.n_head = 4, c.n_embd = 16;
  c.n_kv_head = family == "llama" ? 2 : 4;
  if (family == "llama") c.hidden_dim = 24;
  return c;
}

// Token ids in [0, 13), a fixed function of seed.
Tensor ids(int64_t B, int64_t T, uint64_t seed) {
  Tensor t = empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i)
    t.data<int64_t>()[i] = static_cast<int64_t>((seed * 7919 + static_cast<uint64_t>(i) * 31) % 13);
  return t;
}

double abs_sum(const Tensor& t) {
  double s = 0;
  for (const float v : t.to_vector<float>()) s += std::abs(v);
  return s;
}

// Every adapter parameter drawn at random, then merged: how far the merged model's logits
// are from the adapters' (worst), and how far the adapters moved them from the base's.
struct Merged {
  std::unique_ptr<GPT> model;
  double worst = 0, moved = 0;
};
Merged randomize_and_merge(GPT& lora, const GPT& base, const Tensor& x) {
  NoGradGuard no_grad;
  Generator g(3);
  for (auto& [n, t] : lora.named_parameters())
    if (n.find(".lora_") != std::string::npos) normal_(t, 0.0, 0.2, g);
  Merged m{merge_lora(lora)};
  const std::vector<float> a = lora.forward(x).logits.to_vector<float>(),
                           b = m.model->forward(x).logits.to_vector<float>(),
                           z = base.forward(x).logits.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    m.worst = std::max(m.worst, std::abs(double(a[i]) - b[i]));
    m.moved = std::max(m.moved, std::abs(double(a[i]) - z[i]));
  }
  return m;
}

}  // namespace

TEST_CASE("LoRA: a fresh adapter (B zero) gives the base model's logits and loss bit for bit") {
  for (const std::string family : {"gpt2", "llama"}) {
    INFO(family);
    GPTConfig c = tiny(family);
    const GPT base(c, 7);
    c.lora_rank = 4;
    c.lora_targets = family == "llama" ? "q,k,v,o,gate,up,down" : "q,k,v,o,fc,proj";
    const GPT lora(c, 7);
    // The base's weights are drawn first, so they are the plain model's.
    const auto pb = base.named_parameters();
    std::map<std::string, Tensor> pl;
    for (const auto& [n, t] : lora.named_parameters()) pl[n] = t;
    for (const auto& [n, t] : pb) CHECK(test::bit_identical(t, pl.at(n)));
    const Tensor x = ids(2, 16, 1), y = ids(2, 16, 2);
    NoGradGuard no_grad;
    CHECK(test::bit_identical(base.forward(x).logits, lora.forward(x).logits));
    CHECK(base.forward(x, y).loss.item() == lora.forward(x, y).loss.item());
  }
}

TEST_CASE("LoRA: only the adapters train, the base is frozen and gets no gradient") {
  GPTConfig c = tiny("llama");
  c.lora_rank = 2;  // q,v by default
  GPT m(c, 3);
  const auto trainable = m.named_trainable_parameters();
  REQUIRE(trainable.size() == 2 * 2 * 2);  // 2 layers x (q, v) x (A, B)
  for (const auto& [n, t] : trainable) {
    INFO(n);
    CHECK(n.find(".attn.c_attn.lora_") != std::string::npos);
  }
  CHECK(trainable[0].first == "transformer.h.0.attn.c_attn.lora_q.A");
  CHECK(trainable[0].second.shape() == Shape{2, 16});
  CHECK(trainable[1].second.shape() == Shape{16, 2});  // B: q's 16 rows
  CHECK(trainable[3].second.shape() == Shape{8, 2});   // v's rows: KVH 2 x HS 4
  m.forward(ids(2, 8, 1), ids(2, 8, 2)).loss.backward();
  for (const auto& [n, t] : m.named_parameters()) {
    INFO(n);
    CHECK(t.grad().defined() == (n.find(".lora_") != std::string::npos));
  }
  // B is zero at the start, so A's gradient is zero and B's is not.
  CHECK(abs_sum(trainable[0].second.grad()) == 0.0);
  CHECK(abs_sum(trainable[1].second.grad()) > 0.0);
}

TEST_CASE("LoRA: the merged weights compute what base plus adapters compute") {
  for (const std::string family : {"gpt2", "llama"}) {
    INFO(family);
    GPTConfig c = tiny(family);
    c.lora_rank = 3, c.lora_alpha = 6;
    c.lora_targets = family == "llama" ? "k,o,up,down" : "v,fc";
    GPT lora(c, 5);
    {
      NoGradGuard no_grad;
      Generator g(11);
      for (auto& [n, t] : lora.named_parameters())
        if (n.find(".lora_") != std::string::npos) normal_(t, 0.0, 0.2, g);
    }
    GPTConfig plain = c;
    plain.lora_rank = 0;
    GPT merged(plain, 1, false);
    const NamedTensors state = merged_state(lora);
    merged.load_state_dict(std::map<std::string, Tensor>(state.begin(), state.end()));
    const Tensor x = ids(2, 16, 4);
    NoGradGuard no_grad;
    const std::vector<float> a = lora.forward(x).logits.to_vector<float>(),
                             b = merged.forward(x).logits.to_vector<float>();
    // The same sums in another order (W x + B (A x) against (W + B A) x) in f32: logits of
    // size ~1 agree to a few ulps of the products' K (16-24) terms.
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    CHECK(worst < 1e-5);
    // and the adapters did change the model
    const GPT base(plain, 5);
    const std::vector<float> z = base.forward(x).logits.to_vector<float>();
    double moved = 0;
    for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::abs(double(a[i]) - z[i]));
    CHECK(moved > 1e-2);
  }
}

TEST_CASE("LoRA: targets and sizes are checked, naming the flag and the value") {
  struct Row {
    std::string family, targets;
    int64_t rank;
    double alpha, dropout;
    std::string error;
  };
  const std::vector<Row> rows = {
      {"gpt2", "q,gate", 2, 16, 0, "'gate' is not a target of this GPT"},
      {"gpt2", "q,q", 2, 16, 0, "'q' is named twice"},
      {"gpt2", "", 2, 16, 0, "expected names from q,k,v,o,fc,proj"},
      {"gpt2", "q,", 2, 16, 0, "separated by commas"},
      {"gpt2", "q", 17, 16, 0, "lora_rank must be in [0, --n_embd 16]"},
      {"gpt2", "q", -1, 16, 0, "lora_rank must be in [0, --n_embd 16]"},
      {"gpt2", "q", 2, -1, 0, "lora_alpha must be in (0, 1e6]"},
      {"gpt2", "q", 2, 16, 1, "lora_dropout must be in [0, 1)"},
      {"llama", "fc", 2, 16, 0, "(q,k,v,o,gate,up,down)"},
  };
  for (const Row& r : rows) {
    INFO(r.family, " --lora_targets '", r.targets, "' --lora_rank ", r.rank);
    GPTConfig c = tiny(r.family);
    c.lora_targets = r.targets, c.lora_rank = r.rank;
    c.lora_alpha = r.alpha, c.lora_dropout = r.dropout;
    CHECK_THROWS_WITH(c.validate("--"), doctest::Contains(r.error.c_str()));
  }
  GPTConfig off = tiny("gpt2");
  off.lora_targets = "nonsense";  // not read without adapters
  CHECK_NOTHROW(off.validate("--"));
}

TEST_CASE("LoRA on the LM head: an untied head only, fresh equals the base, merged equals adapters") {
  GPTConfig c = tiny("llama");
  c.tie_embeddings = false;
  const GPT base(c, 7);
  c.lora_rank = 2, c.lora_targets = "q,head";
  GPT lora(c, 7);
  REQUIRE(lora.lm_head->adapters.size() == 1);
  CHECK(count_parameters(c).lora_head == 2 * (c.n_embd + c.vocab_size));
  CHECK(count_parameters(c).total() == static_cast<int64_t>(lora.num_parameters()));
  const Tensor x = ids(2, 16, 1), y = ids(2, 16, 2);
  {
    NoGradGuard no_grad;
    // B zero: the logits are the base's bits; the loss is made from them (the fused head
    // cannot add an adapter's update), so it agrees with the base's fused loss to rounding.
    CHECK(test::bit_identical(base.forward(x).logits, lora.forward(x).logits));
    CHECK(std::abs(base.forward(x, y).loss.item() - lora.forward(x, y).loss.item()) < 1e-6);
  }
  // The head's adapter trains: its B gets a gradient, the head's weight none.
  lora.forward(x, y).loss.backward();
  const auto named = lora.named_parameters();
  for (const auto& [n, t] : named) {
    INFO(n);
    if (n == "lm_head.lora_head.B") CHECK(abs_sum(t.grad()) > 0.0);
    if (n == "lm_head.weight") CHECK(!t.grad().defined());
  }
  // Merged: the head's weight plus (alpha / R) B A.
  {
    const Merged m = randomize_and_merge(lora, base, x);
    CHECK(m.worst < 1e-5);
    CHECK(m.moved > 1e-2);
  }
  // A tied head (GPT-2's, or a Llama's with tie_embeddings) is refused, saying why.
  GPTConfig tied = tiny("gpt2");
  tied.lora_rank = 2, tied.lora_targets = "q,head";
  CHECK_THROWS_WITH(tied.validate("--"), doctest::Contains("LM head is tied to its token embedding"));
}

// Trainable token rows (lora_new_tokens; TokenRows): the rows of a chat template's added
// tokens train under LoRA as a delta on the frozen embedding (and head). Gradients are
// gradcheck rows (nn.Embedding.token_rows, nn.GPT.lora_tokens.loss, linear_cross_entropy.rows).
TEST_CASE("LoRA token rows: zero deltas give the base's bits, the rows train, merged equals unmerged") {
  for (const std::string family : {"gpt2", "llama"}) {
    INFO(family);
    GPTConfig c = tiny(family);
    if (family == "llama") c.tie_embeddings = false;
    const GPT base(c, 7);
    c.lora_rank = 2, c.lora_new_tokens = 3;  // rows 10, 11, 12
    GPT lora(c, 7);
    REQUIRE(lora.transformer->wte->tokens);
    const bool tied = family == "gpt2";
    CHECK(count_parameters(c).lora_tokens == 3 * c.n_embd * (tied ? 1 : 2));
    CHECK(count_parameters(c).total() == static_cast<int64_t>(lora.num_parameters()));
    // ids() covers 0..12, the new tokens included, as inputs and as targets
    const Tensor x = ids(2, 16, 1), y = ids(2, 16, 2);
    {
      NoGradGuard no_grad;
      CHECK(test::bit_identical(base.forward(x).logits, lora.forward(x).logits));
      CHECK(base.forward(x, y).loss.item() == lora.forward(x, y).loss.item());
    }
    // The deltas get gradients (the embedding's and the head's rows), the base none.
    lora.forward(x, y).loss.backward();
    int deltas = 0;
    for (const auto& [n, t] : lora.named_parameters()) {
      INFO(n);
      if (n.find("lora_tokens.delta") != std::string::npos) {
        ++deltas;
        CHECK(abs_sum(t.grad()) > 0.0);
      }
      if (n == "transformer.wte.weight" || n == "lm_head.weight") CHECK(!t.grad().defined());
    }
    CHECK(deltas == (tied ? 1 : 2));
    // Deltas set: merged into the tables, the model computes the same logits and loss
    // (through the fused head and through the logits), and the rows did move the model.
    {
      NoGradGuard no_grad;
      const Merged m = randomize_and_merge(lora, base, x);
      const std::unique_ptr<GPT>& merged = m.model;
      if (tied)  // one table for both names, the delta added to it once
        CHECK(merged->lm_head->weight.impl() == merged->transformer->wte->weight.impl());
      CHECK(m.worst < 1e-5);
      CHECK(m.moved > 1e-2);
      CHECK(std::abs(lora.forward(x, y).loss.item() - merged->forward(x, y).loss.item()) < 1e-5);
      // the loss through the logits (keep_logits) equals the fused op's
      lora.keep_logits = true;
      const double unfused = lora.forward(x, y).loss.item();
      lora.keep_logits = false;
      CHECK(std::abs(unfused - lora.forward(x, y).loss.item()) < 1e-5);
      // Switched off (DPO's reference): the base's bits again.
      const AdaptersOff off(lora);
      CHECK(test::bit_identical(base.forward(x).logits, lora.forward(x).logits));
    }
  }
  // An untied head with both a LoRA adapter (every row) and token rows (its last rows): the
  // two overlap, so they are added in two passes; fresh, the base's bits; merged, the same.
  {
    GPTConfig c = tiny("llama");
    c.tie_embeddings = false;
    const GPT base(c, 7);
    c.lora_rank = 2, c.lora_targets = "q,head", c.lora_new_tokens = 2;
    GPT lora(c, 7);
    REQUIRE(lora.lm_head->adapters.size() == 2);
    const Tensor x = ids(2, 16, 1), y = ids(2, 16, 2);
    {
      NoGradGuard no_grad;
      CHECK(test::bit_identical(base.forward(x).logits, lora.forward(x).logits));
    }
    lora.forward(x, y).loss.backward();
    for (const auto& [n, t] : lora.named_parameters())
      if (n == "lm_head.lora_tokens.delta" || n == "lm_head.lora_head.B") {
        INFO(n);
        CHECK(abs_sum(t.grad()) > 0.0);
      }
    const Merged m = randomize_and_merge(lora, base, x);
    CHECK(m.worst < 1e-5);
    CHECK(m.moved > 1e-2);
  }
  GPTConfig bad = tiny("gpt2");
  bad.lora_new_tokens = 2;
  CHECK_THROWS_WITH(bad.validate("--"), doctest::Contains("--lora_new_tokens 2 needs --lora_rank > 0"));
  bad.lora_rank = 2, bad.lora_new_tokens = 13;
  CHECK_THROWS_WITH(bad.validate("--"), doctest::Contains("lora_new_tokens must be in [0, --vocab_size 13)"));
}

// --base_weights bf16 (store_frozen_as_bf16): the frozen matrices kept as bf16 bits give the
// bits of an f32 base holding their rounded values: loss, logits and the adapters' gradients,
// for both families (GPT-2's tied head through linear_cross_entropy, Llama's untied one), in
// f32 and bf16 products.
TEST_CASE("LoRA: a bf16 base gives the bits of an f32 base holding its rounded values") {
  for (const auto prec : {kernel::GemmPrecision::f32, kernel::GemmPrecision::bf16}) {
    const test::PrecisionGuard p(prec);
    for (const std::string family : {"gpt2", "llama"}) {
      INFO(family, " ", kernel::gemm_precision_name(prec));
      GPTConfig c = tiny(family);
      c.lora_rank = 2, c.lora_alpha = 4;
      c.lora_targets = family == "llama" ? "q,v,o,down" : "q,v,fc";
      GPT rounded(c, 9), half(c, 9);
      {
        NoGradGuard no_grad;
        // B nonzero (the same draw in both), so A's gradient is too
        for (auto* m : {&rounded, &half})
          for (auto& [n, t] : m->named_parameters())
            if (n.find(".lora_") != std::string::npos) {
              Generator gi(4);
              normal_(t, 0.0, 0.3, gi);
            }
        for (auto& t : rounded.parameters())
          if (!t.requires_grad() && t.dim() == 2)
            t.set_data(kernel::cast(kernel::cast(t, DType::BF16), DType::F32));
      }
      const int64_t freed = store_frozen_as_bf16(half);
      int64_t matrices = 0;
      for (const auto& t : half.parameters()) {
        if (t.requires_grad()) {
          CHECK(t.dtype() == DType::F32);
        } else if (t.dim() == 2) {
          CHECK(t.dtype() == DType::BF16);
          matrices += t.numel();
        } else {
          CHECK(t.dtype() == DType::F32);  // gains and biases stay f32
        }
      }
      CHECK(freed == 2 * matrices);
      const Tensor x = ids(2, 16, 5), y = ids(2, 16, 6);
      const Tensor la = rounded.forward(x, y).loss, lb = half.forward(x, y).loss;
      CHECK(la.item() == lb.item());
      la.backward();
      lb.backward();
      const auto ta = rounded.named_trainable_parameters(), tb = half.named_trainable_parameters();
      REQUIRE(ta.size() == tb.size());
      for (size_t i = 0; i < ta.size(); ++i) {
        INFO(ta[i].first);
        CHECK(test::bit_identical(ta[i].second.grad(), tb[i].second.grad()));
      }
      CHECK(abs_sum(ta[0].second.grad()) > 0.0);
      NoGradGuard no_grad;
      CHECK(test::bit_identical(rounded.forward(x).logits, half.forward(x).logits));
    }
  }
}

TEST_CASE("a model built for a load holds no memory for the matrices a checkpoint replaces") {
  // Its matrices of 1 MB and more are fresh mappings left unwritten (UnwrittenZeros), so
  // none of their pages is resident until a checkpoint's tensor replaces them; a drawn
  // model's are.
  GPTConfig c = tiny("gpt2");
  c.vocab_size = 4096, c.n_embd = 128;  // wte: 2 MB
  auto resident = [](const Tensor& t) {
    const size_t bytes = static_cast<size_t>(t.numel()) * 4;
    std::vector<unsigned char> v((bytes + 4095) / 4096);
    REQUIRE(mincore(const_cast<void*>(t.raw_data()), bytes, v.data()) == 0);
    size_t n = 0;
    for (const unsigned char x : v) n += x & 1;
    return n;
  };
  release_storage_cache();
  const GPT light(c, 3, GPT::Init::for_load);
  CHECK(resident(light.transformer->wte->weight) == 0);
  release_storage_cache();
  const GPT drawn(c, 3);
  CHECK(resident(drawn.transformer->wte->weight) == 4096 * 128 * 4 / 4096);
}

TEST_CASE("a model built for a load draws the adapters a full initialisation draws, and take_state_dict equals load_state_dict") {
  // GPT::Init::for_load skips the base matrices' draws (advancing the generator past
  // them), so the adapters drawn after them are bit for bit a full init's; the matrices are
  // left zero, the gains and biases set. take_state_dict then gives the model load_state_dict
  // gives (and with frozen_bf16 what load_state_dict + store_frozen_as_bf16 gives), takes a
  // contiguous tensor's buffer rather than copying it, and empties the state.
  for (const std::string family : {"gpt2", "llama"}) {
    INFO(family);
    GPTConfig c = tiny(family);
    c.lora_rank = 2, c.lora_alpha = 4;
    c.lora_targets = family == "llama" ? "q,v,o,down" : "q,v,fc";
    GPT full(c, 21), light(c, 21, GPT::Init::for_load);
    const NamedTensors a = full.named_parameters(), b = light.named_parameters();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      const bool adapter = a[i].first.find(".lora_") != std::string::npos;
      if (adapter || a[i].second.dim() < 2)
        CHECK(test::bit_identical(a[i].second, b[i].second));
      else
        CHECK(abs_sum(b[i].second) == 0.0);
    }
    GPT source(c, 5);  // the checkpoint's weights: another seed
    for (const bool bf16 : {false, true}) {
      INFO("frozen_bf16 ", bf16);
      GPT loaded(c, 21), taken(c, 21, GPT::Init::for_load);
      const NamedTensors sd = source.state_dict();
      loaded.load_state_dict({sd.begin(), sd.end()});
      if (bf16) store_frozen_as_bf16(loaded);
      std::map<std::string, Tensor> state;
      for (const auto& [name, t] : sd) state[name] = kernel::clone(t);  // the only references
      const void* wte_buffer = state.at("transformer.wte.weight").raw_data();
      taken.take_state_dict(std::move(state), bf16);
      CHECK(state.empty());
      const NamedTensors x = loaded.state_dict(), y = taken.state_dict();
      REQUIRE(x.size() == y.size());
      for (size_t i = 0; i < x.size(); ++i) {
        INFO(x[i].first);
        CHECK(x[i].second.dtype() == y[i].second.dtype());
        CHECK(x[i].second.requires_grad() == y[i].second.requires_grad());
        auto f32 = [](const Tensor& t) {  // bf16 widens exactly
          return t.dtype() == DType::BF16 ? kernel::cast(t, DType::F32) : t;
        };
        CHECK(test::bit_identical(f32(x[i].second), f32(y[i].second)));
      }
      // frozen, so kept as bf16 in one case; taken as it is (no copy) in the other
      const Tensor wte = taken.transformer->wte->weight;
      CHECK((wte.dtype() == DType::BF16) == bf16);
      if (!bf16) CHECK(wte.raw_data() == wte_buffer);
    }
    // the same checks as load_state_dict, before anything changes
    GPT target(c, 21, GPT::Init::for_load);
    std::map<std::string, Tensor> partial;
    for (const auto& [name, t] : source.state_dict())
      if (name != "lm_head.weight" && name != "transformer.wte.weight") partial[name] = t;
    test::check_error([&] { target.take_state_dict(std::move(partial)); },
                      "load_state_dict: the state does not match the model:\n  missing: ");
  }
}
