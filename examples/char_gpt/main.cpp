// A character-level GPT trained through attend's public training API with a learning-rate
// rule of our own (step decay instead of the trainer's warmup + cosine), then sampled.
// The loop is ours; each step is attend's (train::train_step: batch, loss, backward,
// clipping, AdamW), so the same seed gives the same model at any thread count.
#include <attend/attend.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "data/token_file.h"

using namespace attend;
namespace fs = std::filesystem;

int main() {
  std::string corpus;
  for (int i = 0; i < 40; ++i)
    corpus += "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n";
  const auto tokenizer = data::build_char_tokenizer(corpus);
  const fs::path dir = fs::temp_directory_path() / ("attend_char_gpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  data::write_token_file(dir / "train.bin", tokenizer->encode(corpus), tokenizer->vocab_size(),
                         data::tokenizer_hash(tokenizer->spec()));

  train::TrainConfig c;
  c.model = nn::GPTConfig{.vocab_size = tokenizer->vocab_size(), .block_size = 32, .n_layer = 2,
                          .n_head = 2, .n_kv_head = 2, .n_embd = 32, .dropout = 0.0, .bias = true};
  c.batch_size = 8;
  c.seed = 7;
  const data::TokenDataset ds(dir / "train.bin", c.model.block_size);
  nn::GPT model(c.model, static_cast<uint64_t>(c.seed));
  model.train();
  const auto optimizer = train::make_optimizer(c, model);
  // Our own rule: 3e-3, halved every 100 steps.
  auto lr_at = [](int64_t step) { return 3e-3 / static_cast<double>(1 << (step / 100)); };
  double first = 0, last = 0;
  for (int64_t step = 0; step < 300; ++step) {
    const train::StepResult r = train::train_step(model, *optimizer, ds, c, step, lr_at(step));
    if (step == 0) first = r.loss;
    last = r.loss;
    if (step % 50 == 0) std::printf("step %3lld  loss %.4f  lr %.2e\n", static_cast<long long>(step), r.loss, r.lr);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  model.eval();
  infer::SampleOptions s;
  s.prompt = "To be";
  s.max_new_tokens = 60;
  s.temperature = 0;
  std::printf("sample: %s", s.prompt.c_str());
  infer::sample(model, *tokenizer, s, [](const std::string& t) { std::printf("%s", t.c_str()); });
  std::printf("\n");
  fs::remove_all(dir);
  return last < first / 2 ? 0 : 1;
}
