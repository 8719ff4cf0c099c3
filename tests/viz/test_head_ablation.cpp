// Head ablation (viz/head_ablation.h): a head that contributes nothing costs exactly nothing to
// remove, and removing a head that does contribute changes the loss.
#include <filesystem>

#include "data/dataset.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "tensor/kernels.h"
#include "tensor/random.h"
#include "test_util.h"
#include "viz/head_ablation.h"

using namespace attend;
namespace fs = std::filesystem;

TEST_CASE("ablating a head whose output projection is zero costs exactly nothing") {
  const fs::path dir = test::temp_dir("heads");
  Generator g(3);
  const std::vector<int64_t> ids = randint({3000}, 0, 17, g).to_vector<int64_t>();
  data::write_token_file(dir / "t.bin", data::TokenIds(ids.begin(), ids.end()), 17);
  const nn::GPTConfig cfg{17, 16, 2, 4, 4, 32, 0.0, true};  // HS 8
  const data::TokenDataset ds(dir / "t.bin", cfg.block_size);
  nn::GPT model(cfg, 7);
  // Layer 1, head 2: its 8 input columns of c_proj are zero, so whatever the head outputs
  // never reaches the residual stream.
  const Tensor w = (*model.transformer->h)[1].attn->c_proj->weight;  // (C, C): (out, in)
  float* p = w.data<float>();
  for (int64_t o = 0; o < 32; ++o)
    for (int64_t i = 2 * 8; i < 3 * 8; ++i) p[o * 32 + i] = 0.0f;
  const viz::HeadAblation r = viz::ablate_heads(model, ds, 3, 4);
  REQUIRE(r.zero.size() == 8);
  REQUIRE(r.mean.size() == 8);
  CHECK(r.zero[1 * 4 + 2] == r.base_loss);  // exactly: its products with 0 add nothing
  CHECK(r.mean[1 * 4 + 2] == r.base_loss);
  // Every other head changes the loss (so the check above can fail).
  for (size_t i = 0; i < 8; ++i)
    if (i != 1 * 4 + 2) CHECK(r.zero[i] != r.base_loss);
  CHECK(r.tokens == 3 * 4 * 16);
  fs::remove_all(dir);
}
