#include "train/toy.h"

#include <cstring>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "train/optim.h"

namespace attend::train {

namespace {

constexpr int64_t kAlphabet = 12;  // strlen(kToyAlphabet)
constexpr int32_t kStartId = 12;

Tensor ids_tensor(const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  return tensor(std::vector<double>(ids.begin(), ids.end()), {B, T}, DType::I64);
}

}  // namespace

std::string toy_answer(const std::string& task, const std::string& source) {
  ATTEND_CHECK(task == "copy" || task == "reverse", "--toy: expected copy or reverse, got '", task,
               "'");
  return task == "copy" ? source : std::string(source.rbegin(), source.rend());
}

std::vector<int32_t> toy_encode(const std::string& s, const std::string& flag) {
  const auto n = static_cast<int64_t>(s.size());
  ATTEND_CHECK(n >= kToyMinLength && n <= kToyMaxLength, flag, " '", s, "': ", n,
               " letters; the toy model reads ", kToyMinLength, " to ", kToyMaxLength);
  std::vector<int32_t> ids;
  for (char ch : s) {
    const char* at = std::strchr(kToyAlphabet, ch);
    ATTEND_CHECK(ch != '\0' && at != nullptr, flag, " '", s, "': '", std::string(1, ch),
                 "' is not one of the toy model's letters ", kToyAlphabet);
    ids.push_back(static_cast<int32_t>(at - kToyAlphabet));
  }
  return ids;
}

std::vector<int32_t> toy_decoder_input(const std::string& answer) {
  std::vector<int32_t> ids{kStartId};
  for (size_t t = 0; t + 1 < answer.size(); ++t) {
    const char* at = std::strchr(kToyAlphabet, answer[t]);
    ATTEND_CHECK(answer[t] != '\0' && at != nullptr, "toy: '", std::string(1, answer[t]),
                 "' is not one of the toy model's letters");
    ids.push_back(static_cast<int32_t>(at - kToyAlphabet));
  }
  return ids;
}

ToyModel train_toy(const ToyOptions& o) {
  toy_answer(o.task, "abc");  // checks the task name
  ATTEND_CHECK(o.steps >= 0 && o.steps <= 100000, "--toy_steps: expected 0 to 100000, got ",
               o.steps);
  ATTEND_CHECK(o.batch_size >= 1 && o.batch_size <= 4096, "toy: batch_size ", o.batch_size,
               " is outside [1, 4096]");
  ToyModel toy;
  toy.options = o;
  toy.model = std::make_unique<nn::Seq2Seq>(
      nn::Seq2SeqConfig{kAlphabet + 1, kToyMaxLength, 2, 4, 64}, o.seed);
  toy.model->train();
  AdamW opt(toy.model->named_parameters(), AdamWOptions{.beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.0});
  const std::vector<Tensor> params = toy.model->parameters();
  const LrSchedule schedule{o.learning_rate, o.learning_rate / 10, 50,
                            std::max<int64_t>(o.steps, 51), true};
  double recent = 0;
  int64_t counted = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    Generator gen(o.seed * 1000003 + static_cast<uint64_t>(step));
    const int64_t T =
        static_cast<int64_t>(randint({1}, kToyMinLength, kToyMaxLength + 1, gen).item());
    const Tensor letters = kernel::cast(randint({o.batch_size, T}, 0, kAlphabet, gen), DType::I64);
    const int64_t* p = letters.data<int64_t>();
    std::vector<int32_t> src, tgt, out;
    for (int64_t b = 0; b < o.batch_size; ++b) {
      std::string s;
      for (int64_t t = 0; t < T; ++t) s += kToyAlphabet[p[b * T + t]];
      const std::string answer = toy_answer(o.task, s);
      const std::vector<int32_t> a = toy_encode(answer, "toy"), x = toy_encode(s, "toy"),
                                 d = toy_decoder_input(answer);
      src.insert(src.end(), x.begin(), x.end());
      tgt.insert(tgt.end(), d.begin(), d.end());
      out.insert(out.end(), a.begin(), a.end());
    }
    toy.model->zero_grad();
    const Tensor loss =
        toy.model
            ->forward(ids_tensor(src, o.batch_size, T), ids_tensor(tgt, o.batch_size, T),
                      ids_tensor(out, o.batch_size, T))
            .loss;
    loss.backward();
    // Gradients clipped at norm 1 and the learning rate warmed up over 50 steps, then
    // cosine-decayed to a tenth: without them a late loss spike could end the run, and
    // whether it came depended on the last bits of the arithmetic.
    opt.step(schedule.at(step), clip_scale(grad_norm(params), 1.0));
    if (step >= o.steps - 20) {
      recent += loss.item();
      ++counted;
    }
  }
  toy.final_loss = counted ? recent / static_cast<double>(counted) : 0.0;
  toy.model->eval();
  return toy;
}

std::string toy_decode(const ToyModel& toy, const std::string& source) {
  NoGradGuard no_grad;
  const std::vector<int32_t> src = toy_encode(source, "--prompt");
  const auto T = static_cast<int64_t>(src.size());
  std::vector<int32_t> tgt{kStartId};
  std::string out;
  for (int64_t t = 0; t < T; ++t) {
    const Tensor logits =
        toy.model
            ->forward(ids_tensor(src, 1, T), ids_tensor(tgt, 1, static_cast<int64_t>(tgt.size())))
            .logits;  // (1, t+1, V)
    const std::vector<double> last =
        kernel::cast(kernel::select(kernel::select(logits, 0, 0), 0, t), DType::F64)
            .to_vector<double>();
    int32_t best = 0;
    for (int32_t v = 1; v < kAlphabet; ++v)  // letters only, never the start symbol
      if (last[static_cast<size_t>(v)] > last[static_cast<size_t>(best)]) best = v;
    out += kToyAlphabet[best];
    tgt.push_back(best);
  }
  return out;
}

}  // namespace attend::train
