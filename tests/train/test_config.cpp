// The training configuration table: every field survives a checkpoint's /config, the
// config file takes dashes or underscores, and bad values name the flag.
#include <fstream>

#include "test_util.h"
#include "train/config.h"

using namespace attend;
using namespace attend::train;

TEST_CASE("every field round-trips through the checkpoint's config values") {
  TrainConfig c;
  c.data = "corpus dir";
  c.tokenizer = "bpe:512";
  c.n_layer = 3, c.n_head = 6, c.n_kv_head = 2, c.n_embd = 48, c.block_size = 32;
  c.dropout = 0.125, c.bias = false, c.decay_lr = false, c.optimizer = "sgd";
  c.learning_rate = 3e-4, c.min_lr = 3e-5, c.seed = 7, c.keep_checkpoints = 5;
  TrainConfig back = from_values(to_values(c, 101));
  for (const ConfigField& f : config_fields()) {
    CAPTURE(f.name);
    CHECK(get_field(back, f) == get_field(c, f));
  }
  CHECK(get_field(back, *find_field("bias")) == "false");
  CHECK(back.model(101) == c.model(101));
  CHECK(back.model(101).n_kv_head == 2);
}

TEST_CASE("config files and values: dashes or underscores, errors naming the setting") {
  const auto dir = test::temp_dir("config");
  std::ofstream(dir / "c.json") << R"({"n-layer": 2, "learning_rate": 0.0005, "bias": false, "preset": "cpu-char"})";
  auto values = read_config_file((dir / "c.json").string());
  CHECK(values.at("n_layer") == "2");
  CHECK(values.at("bias") == "false");
  CHECK(std::stod(values.at("learning_rate")) == 0.0005);
  TrainConfig c;
  test::check_error([&] { set_field(c, *find_field("max_iters"), "12x", "--max_iters"); },
                    "--max_iters: expected an integer, got '12x'");
  test::check_error([&] { set_field(c, *find_field("dropout"), "nan", "--dropout"); },
                    "--dropout: expected a finite number, got 'nan'");
  c.grad_clip = -1;
  test::check_error([&] { c.validate(); }, "--grad_clip: must be >= 0 (0: off), got -1");
  std::ofstream(dir / "bad.json") << R"({"n_layer": [1, 2]})";
  test::check_error([&] { read_config_file((dir / "bad.json").string()); },
                    "bad.json: setting 'n_layer' must be a string, number or boolean");
  std::filesystem::remove_all(dir);
}
