#include "infer/sample.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "infer/decoder.h"
#include "infer/decoding.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "tensor/threads.h"

namespace attend::infer {

int32_t choose_token(const float* logits, int64_t V, const SampleOptions& o, double u) {
  // One pass in 16-float vectors (GCC's vector types: AVX-512 or two AVX2 halves): every
  // logit finite (its exponent bits not all set), and their maximum lane-wise (one running
  // maximum, as before, was a serial chain of 32000 steps for Llama's vocabulary: 50 us, 2%
  // of a token; this takes 5 us). The first non-finite logit is named. A lane may keep +0
  // where one running max kept -0: the greedy token is found by ==, so it is the same.
  ATTEND_CHECK(V > 0, "sample: no logits to choose from (vocabulary size ", V, ")");
  using Floats = float __attribute__((vector_size(64)));
  using Words = uint32_t __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 16;
  Floats lanes;
  for (int64_t l = 0; l < kLanes; ++l) lanes[l] = logits[0];
  Words bad = {};
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    Floats x;
    Words bits;
    std::memcpy(&x, logits + i, sizeof x);
    std::memcpy(&bits, logits + i, sizeof bits);
    bad |= (bits & 0x7f800000u) == 0x7f800000u;
    lanes = lanes < x ? x : lanes;
  }
  float lane[kLanes];
  uint32_t inf_bits = 0;
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = lanes[l], inf_bits |= bad[l];
  for (; i < V; ++i) {
    inf_bits |= !std::isfinite(logits[i]);
    lane[0] = lane[0] < logits[i] ? logits[i] : lane[0];
  }
  const bool finite = inf_bits == 0;
  float largest = lane[0];
  for (int64_t l = 1; l < kLanes; ++l) largest = largest < lane[l] ? lane[l] : largest;
  if (!finite)
    for (int64_t i = 0; i < V; ++i)
      ATTEND_CHECK(std::isfinite(logits[i]), "sample: the model's logit for token ", i, " is ",
                   logits[i], "; its weights are broken");
  if (o.temperature <= 0)  // greedy: the first token holding the maximum (max_element's)
    return static_cast<int32_t>(std::find(logits, logits + V, largest) - logits);
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by id, so the order is total (the logits are finite) and only
  // the kept tokens need ordering: O(V log k), not a sort of the whole vocabulary.
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  std::vector<double> p(keep);
  // (l - max) / t, never l / t - max / t: a tiny t would overflow both to inf (inf - inf
  // is NaN); this way the limit t -> 0 is greedy, as it should be.
  const double mx = logits[order[0]];
  double z = 0;
  for (int64_t i = 0; i < keep; ++i)
    z += p[i] = std::exp((static_cast<double>(logits[order[i]]) - mx) / o.temperature);
  for (double& x : p) x /= z;
  if (o.top_p < 1.0) {
    double c = 0;
    int64_t n = 0;
    while (n < keep && c < o.top_p) c += p[n++];
    keep = std::max<int64_t>(1, n);
    p.resize(keep);
    z = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& x : p) x /= z;
  }
  double c = 0;
  for (int64_t i = 0; i < keep; ++i) {
    c += p[i];
    if (u < c) return order[i];
  }
  return order[keep - 1];
}

namespace {

void check_options(const SampleOptions& o) {
  ATTEND_CHECK(o.max_new_tokens >= 0, "sample: --max_new_tokens must be >= 0, got ",
               o.max_new_tokens);
  ATTEND_CHECK(o.top_k >= 0, "sample: --top_k must be >= 0, got ", o.top_k);
  ATTEND_CHECK(o.top_p > 0 && o.top_p <= 1, "sample: --top_p must be in (0, 1], got ", o.top_p);
  ATTEND_CHECK(o.temperature >= 0, "sample: --temperature must be >= 0, got ", o.temperature);
}

Tensor ids_tensor(const data::TokenIds& ids, size_t from) {
  std::vector<double> v(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  return tensor(v, {1, static_cast<int64_t>(v.size())}, DType::I64);
}

// The decoding loop: seq holds every token, the caches its first `cached` positions. Runs
// the rest, then draws new tokens (appended to seq) as sample() says. The weights are
// already in the decoding format (the caller holds a DecodingWeights). keep_caches: the
// caches hold every position run when it returns (a conversation goes on from them); else
// they may be left empty.
data::TokenIds generate(const nn::GPT& model, const data::Tokenizer& tok, const SampleOptions& o,
                        data::TokenIds& seq, size_t cached, std::vector<nn::KVCache>& caches,
                        const std::function<void(const std::string&)>& emit, uint32_t index,
                        SampleTiming* timing, int64_t weight_bytes, bool keep_caches) {
  const int64_t T = model.config.block_size, V = model.config.vocab_size;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const PhiloxKey key = philox_key(o.seed);
  const bool rolling = model.config.window() > 0;
  // the head on the prompt's last position only: the others' logits are never read
  Tensor logits = model.last_logits(ids_tensor(seq, cached), &caches);  // (1, V)
  const auto t1 = Clock::now();
  if (timing) {
    timing->prompt_tokens = static_cast<int64_t>(seq.size() - cached);
    timing->prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    timing->weight_bytes = weight_bytes;
  }
  data::TokenIds out;
  std::string text;  // generated so far, for --stop
  std::optional<ThreadTuner> tuner = command_tuner();  // Note [Threads on a busy machine]
  // The tokens after the prompt through a Decoder where the model allows one (Note
  // [Decoding without tensors]); `decoder` holds the positions while `decoding` is set,
  // and gives them back to the caches at the end.
  const std::string why = Decoder::unsupported(model);
  if (!why.empty()) spdlog::debug("sample: decoding through GPT::forward: {}", why);
  std::optional<Decoder> decoder;
  if (why.empty()) decoder.emplace(model);
  bool decoding = false;
  Tensor last = kernel::contiguous(kernel::select(logits, 0, 0));
  const float* last_logits = last.data<float>();
  try {
    for (int64_t i = 0; i < o.max_new_tokens; ++i) {
      if (o.cancel && o.cancel->load()) break;
      TunedUnit unit(tuner);
      const PhiloxCounter r = philox4x32(sample_counter(static_cast<uint64_t>(i), index), key);
      const int32_t next = choose_token(last_logits, V, o, u64_to_unit_double(r[0], r[1]));
      if (next == o.stop_token) break;  // the end of a reply: not emitted
      seq.push_back(next);
      out.push_back(next);
      const std::string piece = tok.decode({next});
      emit(piece);
      if (timing) {
        timing->new_tokens = i + 1;
        timing->new_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
      }
      if (i + 1 == o.max_new_tokens) break;
      if (!o.stop.empty()) {
        text += piece;
        const size_t from = text.size() > o.stop.size() + piece.size()
                                ? text.size() - o.stop.size() - piece.size()
                                : 0;
        if (text.find(o.stop, from) != std::string::npos) break;
      }
      if (static_cast<int64_t>(seq.size()) <= T || rolling) {
        // A sliding-window model's caches roll: it decodes past block_size from them.
        if (decoder) {
          // sized for every step still to come: this one and the max_new_tokens - 2 - i after it
          if (!decoding) decoder->start(caches, o.max_new_tokens - 1 - i);
          decoding = true;
          last_logits = decoder->step(next);
          continue;
        }
        logits = model.last_logits(ids_tensor({next}, 0), &caches);
      } else {
        // Past the context of a model without a sliding window: the last block_size tokens
        // again, from position 0 (nanoGPT's crop): positions shift, so the cached keys no
        // longer apply (nor the decoder's).
        data::TokenIds window(seq.end() - T, seq.end());
        caches.clear();
        decoder.reset(), decoding = false;
        logits = model.last_logits(ids_tensor(window, 0), nullptr);
      }
      last = kernel::contiguous(kernel::select(logits, 0, 0));
      last_logits = last.data<float>();
    }
  } catch (...) {
    if (decoding) caches.clear();  // they miss the decoder's positions: a caller starts over
    throw;
  }
  // The decoder's positions back into the caches for a caller that goes on from them (a
  // conversation); else they are dropped (stale: without the decoded positions).
  if (decoding && keep_caches) decoder->finish(caches);
  if (decoding && !keep_caches) caches.clear();
  return out;
}

}  // namespace

data::TokenIds sample(const nn::GPT& model, const data::Tokenizer& tok, const SampleOptions& o,
                      const std::function<void(const std::string&)>& emit, uint32_t index,
                      SampleTiming* timing) {
  check_options(o);
  const int64_t T = model.config.block_size;
  data::TokenIds seq = tok.encode(o.prompt);
  ATTEND_CHECK(!seq.empty(), "sample: the prompt is empty; give at least one character or token");
  if (static_cast<int64_t>(seq.size()) > T) {
    spdlog::warn("sample: the prompt has {} tokens; keeping its last {} (block_size)", seq.size(),
                 T);
    seq.erase(seq.begin(), seq.end() - T);
  }
  NoGradGuard no_grad;
  // The weights in the format decoding reads (infer/decoding.h; the weights themselves are
  // not changed: the cast only lets the layers hold their copies).
  const DecodingWeights decoding(const_cast<nn::GPT&>(model), o.weights);
  std::vector<nn::KVCache> caches;
  return generate(model, tok, o, seq, 0, caches, emit, index, timing, decoding.bytes(), false);
}

Conversation::Conversation(const nn::GPT& model, std::optional<WeightFormat> weights)
    : model_(model), weights_(std::make_unique<DecodingWeights>(const_cast<nn::GPT&>(model), weights)) {}

Conversation::~Conversation() = default;

bool Conversation::fits(int64_t new_tokens, int64_t max_new_tokens) const {
  return model_.config.window() > 0 ||
         static_cast<int64_t>(seq_.size()) + new_tokens + max_new_tokens <= model_.config.block_size;
}

void Conversation::reset() {
  seq_.clear();
  caches_.clear();
}

data::TokenIds Conversation::reply(const data::Tokenizer& tok, const data::TokenIds& ids,
                                   const SampleOptions& o,
                                   const std::function<void(const std::string&)>& emit,
                                   uint32_t index) {
  check_options(o);
  ATTEND_CHECK(!ids.empty(), "chat: an empty turn");
  NoGradGuard no_grad;
  // The caches hold the positions run so far; a reply's last token is drawn but not yet run.
  const size_t cached = caches_.empty() ? 0 : static_cast<size_t>(caches_[0].position);
  ATTEND_INTERNAL_CHECK(cached <= seq_.size(), "Conversation: ", cached, " cached of ",
                        seq_.size());
  seq_.insert(seq_.end(), ids.begin(), ids.end());
  return generate(model_, tok, o, seq_, cached, caches_, emit, index, nullptr, weights_->bytes(),
                  true);
}

}  // namespace attend::infer
