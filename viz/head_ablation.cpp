#include "viz/head_ablation.h"

#include "autograd/node.h"
#include "tensor/kernels.h"
#include "tensor/threads.h"

namespace attend::viz {

namespace {

// Mean loss over the batches; with means, also each head's mean output over (B, T).
double mean_loss(nn::GPT& model, const data::TokenDataset& data, int64_t batches,
                 int64_t batch_size, std::vector<std::vector<double>>* means,
                 std::optional<ThreadTuner>& tuner) {
  double total = 0;
  for (int64_t k = 0; k < batches; ++k) {
    TunedUnit unit(tuner);
    const data::Batch b =
        data.random_batch(0, 0, static_cast<uint32_t>(k), batch_size, Stream::EvalVal);
    std::vector<nn::AttentionTrace> traces;
    total += model.forward(b.x, b.y, means ? &traces : nullptr).loss.item();
    if (!means) continue;
    for (size_t l = 0; l < traces.size(); ++l) {
      const Tensor h = kernel::contiguous(traces[l].heads);  // (B, NH, T, HS)
      const int64_t B = h.size(0), NH = h.size(1), T = h.size(2), HS = h.size(3);
      const std::vector<double> v = h.to_vector<double>();
      for (int64_t bb = 0; bb < B; ++bb)
        for (int64_t n = 0; n < NH; ++n)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t s = 0; s < HS; ++s)
              (*means)[l * static_cast<size_t>(NH) + static_cast<size_t>(n)]
                      [static_cast<size_t>(s)] +=
                  v[static_cast<size_t>(((bb * NH + n) * T + t) * HS + s)];
    }
  }
  return total / static_cast<double>(batches);
}

}  // namespace

HeadAblation ablate_heads(nn::GPT& model, const data::TokenDataset& data, int64_t batches,
                          int64_t batch_size) {
  ATTEND_CHECK(batches >= 1, "--batches: must be >= 1, got ", batches);
  ATTEND_CHECK(batch_size >= 1, "--batch_size: must be >= 1, got ", batch_size);
  NoGradGuard no_grad;
  model.eval();
  const nn::GPTConfig& c = model.config;
  const int64_t HS = c.n_embd / c.n_head, T = c.block_size;
  HeadAblation r;
  r.n_layer = c.n_layer, r.n_head = c.n_head, r.batches = batches;
  r.tokens = batches * batch_size * T;
  std::vector<std::vector<double>> sums(static_cast<size_t>(c.n_layer * c.n_head),
                                        std::vector<double>(static_cast<size_t>(HS), 0.0));
  std::optional<ThreadTuner> tuner = command_tuner();  // Note [Threads on a busy machine]
  r.base_loss = mean_loss(model, data, batches, batch_size, &sums, tuner);
  const double count = static_cast<double>(batches * batch_size * T);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    nn::Attention& attn = *(*model.transformer->h)[static_cast<size_t>(l)].attn;
    for (int64_t h = 0; h < c.n_head; ++h) {
      std::vector<double> mean = sums[static_cast<size_t>(l * c.n_head + h)];
      for (double& x : mean) x /= count;
      attn.replace_head = {{h, zeros({HS})}};
      r.zero.push_back(mean_loss(model, data, batches, batch_size, nullptr, tuner));
      attn.replace_head = {{h, tensor(mean, {HS})}};
      r.mean.push_back(mean_loss(model, data, batches, batch_size, nullptr, tuner));
      attn.replace_head.clear();
    }
  }
  return r;
}

}  // namespace attend::viz
