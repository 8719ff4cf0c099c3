// `attend diagram`: the whole model in one figure (.svg or .html) with its real shapes and
// parameter counts, and with --prompt the activations of that text in every box.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "app/commands.h"
#include "app/model_flags.h"
#include "app/validators.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "train/model_io.h"
#include "viz/diagram.h"

namespace attend::cli {

namespace {

int run_diagram(const ModelArgs& a) {
  const std::string ext = std::filesystem::path(a.out).extension().string();
  ATTEND_CHECK(ext == ".svg" || ext == ".html", "diagram: --out ", a.out,
               ": expected a .svg or .html file name");
  const nn::GPTConfig c = model_from_flags(a);
  const std::string title = nn::describe(c) + ": " + std::to_string(c.n_layer) + " layers, " +
                            std::to_string(c.n_head) + " heads (" + std::to_string(c.n_kv_head) +
                            " key/value), C " + std::to_string(c.n_embd) + ", V " +
                            std::to_string(c.vocab_size);
  std::unique_ptr<viz::DiagramActivations> acts;
  if (!a.prompt.empty()) {
    ATTEND_CHECK(!a.checkpoint.empty(), "diagram: --prompt needs --checkpoint (the weights)");
    train::LoadedModel m = train::load_model_merged(a.checkpoint);
    ATTEND_CHECK(m.model->config == c,
                 "diagram: --prompt shows the checkpoint's own model; drop the model flags");
    acts = std::make_unique<viz::DiagramActivations>(
        viz::diagram_activations(*m.model, m.tokenizer->encode(a.prompt), a.layer, a.prompt));
  }
  write_file_atomic(a.out, ext == ".svg" ? viz::model_diagram_svg(c, title, acts.get())
                                         : viz::model_diagram_html(c, title, acts.get()));
  std::printf("wrote %s: %s\n", a.out.c_str(), title.c_str());
  return 0;
}

}  // namespace

void add_diagram(CLI::App& app, int& rc) {
  auto a = std::make_shared<ModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diagram", "the whole model in one figure with its real shapes and parameter counts");
  add_model_flags(cmd, *a);
  cmd->add_option("--out", a->out, "FILE.svg | FILE.html")->required();
  CLI::Option* prompt = cmd->add_option(
      "--prompt", a->prompt,
      "with --checkpoint: this text's activations (shape, mean, std) in every box");
  CLI::Option* layer =
      cmd->add_option("--layer", a->layer, "with --prompt: the block whose activations are shown")
          ->check(non_negative_int())
          ->capture_default_str();
  cmd->callback([a, &rc, layer, prompt] {
    ATTEND_CHECK(prompt->count() == 0 || !a->prompt.empty(),
                 "diagram: --prompt is empty; give at least one character, or leave --prompt out "
                 "for the diagram without activations");
    ATTEND_CHECK(
        layer->count() == 0 || !a->prompt.empty(),
        "diagram: --layer chooses the block whose activations --prompt shows; add --prompt");
    rc = run_diagram(*a);
  });
}

}  // namespace attend::cli
