// A shortened run of nanoGPT's CPU recipe on tinyshakespeare (char level): the model
// must learn. bench/train_recipe.sh runs the full 2000 steps.
#include <filesystem>

#include "data/prepare.h"
#include "test_util.h"
#include "train/trainer.h"

using namespace attend;
namespace fs = std::filesystem;

TEST_CASE("300 steps of the cpu-char recipe bring tinyshakespeare's val loss below 2.55") {
  const fs::path text = test::shared_data("tinyshakespeare.txt");
  if (text.empty()) ATTEND_SKIP("../shared/data/tinyshakespeare.txt not found");
  const fs::path dir =
      fs::temp_directory_path() / ("attend_learning_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  train::TrainRequest req;
  train::TrainConfig& c = req.settings.config;
  c.data = text.string();
  c.max_iters = 300;
  c.lr_decay_iters = 300;
  c.eval_interval = 300;
  c.log_interval = 100;
  req.run_dir = (dir / "run").string();
  train::TrainOutcome s = train::run_training(req);
  MESSAGE("val loss after 300 steps: ", s.final_val_loss);
  // Untrained: ln 65 = 4.17. Measured (2 threads): seed 1337 (the default) 2.413; seeds
  // 1, 2, 3 with the same recipe 2.381, 2.372, 2.419. The threshold leaves 0.13 for
  // other machines.
  CHECK(s.final_val_loss < 2.55);
  CHECK(s.final_val_loss > 0.5);  // far below would mean leaking val into train
  fs::remove_all(dir);
}
