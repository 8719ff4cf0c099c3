// `attend attention`: the attention weights of a prompt as an HTML explorer, SVG
// heatmaps, CSV or JSON (viz/explorer.h).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/validators.h"
#include "data/instructions.h"
#include "tensor/error.h"
#include "tensor/util.h"
#include "train/model_io.h"
#include "train/toy.h"
#include "viz/diagram.h"
#include "viz/explorer.h"
#include "viz/head_sum.h"

namespace attend::cli {

namespace {

struct AttentionArgs {
  std::string checkpoint, prompt, out;
  // An instruction example instead of --prompt: rendered through the template, the
  // response (and the end-of-text token) after it, the loss's mask shown.
  std::string instruction, input, response, template_name = "alpaca";
  int64_t layer = -1, head = -1;  // -1: all
  int64_t position = -1;          // --position: what each head adds there (needs --layer)
  int decimals = 2;
  std::string convention = "row";
  bool scores = false;
  std::string toy, attention = "cross";  // --toy copy|reverse: an encoder-decoder's attention
  int64_t toy_steps = 1500;
};

// --toy: train the small encoder-decoder (train/toy.h) and take its attention on the
// prompt, the target being its own greedy answer (teacher-forced).
viz::AttentionMap toy_map(const AttentionArgs& a) {
  ATTEND_CHECK(a.checkpoint.empty(), "attention: --toy trains its own model; drop --checkpoint ",
               a.checkpoint);
  ATTEND_CHECK(a.position < 0, "attention: --position is for GPT checkpoints, not --toy");
  const std::vector<int32_t> src = train::toy_encode(a.prompt, "--prompt");  // checked first
  train::ToyOptions o;
  o.task = a.toy;
  o.steps = a.toy_steps;
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "training the toy %s model (%lld steps)...\n", a.toy.c_str(),
               static_cast<long long>(o.steps));
  const train::ToyModel toy = train::train_toy(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string answer = train::toy_decode(toy, a.prompt);
  const std::string expected = train::toy_answer(a.toy, a.prompt);
  std::printf("toy %s model: %lld steps in %.1f s, loss %.4f; '%s' -> '%s' (%s)\n", a.toy.c_str(),
              static_cast<long long>(o.steps), secs, toy.final_loss, a.prompt.c_str(),
              answer.c_str(),
              answer == expected ? "right" : ("expected '" + expected + "'").c_str());
  std::vector<std::string> src_tokens, tgt_tokens;
  for (char ch : a.prompt) src_tokens.emplace_back(1, ch);
  // Decoder position t reads the token before (the start symbol at t = 0) and writes
  // answer[t]: labelled "reads→writes".
  const std::vector<int32_t> tgt = train::toy_decoder_input(answer);
  for (size_t t = 0; t < answer.size(); ++t)
    tgt_tokens.push_back(std::string(1, t == 0 ? train::kToyStart : answer[t - 1]) + "\u2192" +
                         answer[t]);
  const nn::Seq2SeqConfig& c = toy.model->config;
  const std::string description = fmt::format(
      "toy encoder-decoder ({} task): {} encoder + {} decoder layers, {} heads, C {}, trained {} "
      "steps",
      a.toy, c.n_layer, c.n_layer, c.n_head, c.n_embd, o.steps);
  return viz::compute_seq2seq_attention(*toy.model, src, src_tokens, tgt, tgt_tokens, a.attention,
                                        description);
}

// --position: each head's change to the residual stream, their sum, and concat -> c_proj.
int run_head_sum(const AttentionArgs& a) {
  ATTEND_CHECK(a.layer >= 0, "attention: --position needs --layer (the layer to look at)");
  train::LoadedModel m = train::load_model_merged(a.checkpoint);
  std::fputs(
      viz::head_sum_text(viz::head_sum(*m.model, *m.tokenizer, a.prompt, a.layer, a.position))
          .c_str(),
      stdout);
  return 0;
}

int run_attention(const AttentionArgs& a) {
  ATTEND_CHECK(!a.toy.empty() || !a.checkpoint.empty(),
               "attention: --checkpoint is required (or --toy copy|reverse)");
  ATTEND_CHECK(a.toy.empty() || !a.out.empty(), "attention: --out is required");
  if (a.position >= 0 && a.out.empty()) return run_head_sum(a);
  ATTEND_CHECK(!a.out.empty(), "attention: --out is required (or --position with --layer)");
  if (a.position >= 0) run_head_sum(a);
  const std::string ext = std::filesystem::path(a.out).extension().string();
  ATTEND_CHECK(ext == ".html" || ext == ".svg" || ext == ".csv" || ext == ".json",
               "attention: --out ", a.out, ": expected a .html, .svg, .csv or .json file name");
  ATTEND_CHECK(a.decimals >= 1 && a.decimals <= 6, "attention: --decimals must be in [1, 6], got ",
               a.decimals);
  viz::AttentionMap map;
  std::string diagram;  // the HTML's whole-model figure with the prompt's activations
  if (!a.toy.empty()) {
    map = toy_map(a);
  } else {
    train::LoadedModel m = train::load_model_merged(a.checkpoint);
    if (a.instruction.empty()) {
      map = viz::compute_attention(*m.model, *m.tokenizer, a.prompt);
    } else {
      // As prepare --format alpaca encodes an example: prompt and response apart, then the
      // end-of-text token as its id.
      const data::ChatTemplate& t = data::chat_template(a.template_name);
      const data::TokenIds prompt =
          data::encode_rendered(*m.tokenizer, data::render_prompt(t, a.instruction, a.input));
      data::TokenIds ids = prompt;
      const data::TokenIds response = m.tokenizer->encode(a.response);
      ids.insert(ids.end(), response.begin(), response.end());
      const int32_t end = data::end_of_turn_id(t, m.tokenizer->spec());
      if (end >= 0) ids.push_back(end);
      map = viz::compute_attention(*m.model, *m.tokenizer, ids,
                                   static_cast<int64_t>(prompt.size()));
    }
    if (ext == ".html") {
      const viz::DiagramActivations acts =
          viz::diagram_activations(*m.model, map.ids, a.layer >= 0 ? a.layer : 0,
                                   a.instruction.empty() ? a.prompt : a.instruction);
      diagram = viz::model_diagram_svg(m.model->config, map.model, &acts);
    }
  }
  viz::AttentionSelection sel;
  if (a.layer >= 0) sel.layers = {a.layer};
  if (a.head >= 0) sel.heads = {a.head};
  sel.decimals = a.decimals;
  sel.scores = a.scores;
  sel.convention = a.convention;
  sel.vectors = a.scores;  // JSON: q and k beside the scores
  const std::string text = ext == ".html"  ? viz::attention_html(map, sel, diagram)
                           : ext == ".svg" ? viz::attention_svg(map, sel)
                           : ext == ".csv" ? viz::attention_csv(map, sel)
                                           : viz::attention_json(map, sel);
  write_file_atomic(a.out, text);
  std::printf("wrote %s: %lld tokens, %zu layer(s) x %zu head(s)\n", a.out.c_str(),
              static_cast<long long>(map.T()),
              sel.layers.empty() ? static_cast<size_t>(map.n_layer) : 1,
              sel.heads.empty() ? static_cast<size_t>(map.n_head) : 1);
  return 0;
}

}  // namespace

void add_attention(CLI::App& app, int& rc) {
  auto a = std::make_shared<AttentionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "attention weights of a prompt: .html explorer, .svg heatmaps, .csv or .json data");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint file or run folder");
  CLI::Option* prompt = cmd->add_option("--prompt", a->prompt, "the text whose attention to show");
  CLI::Option* instruction =
      cmd->add_option("--instruction", a->instruction,
                      "instead of --prompt: an instruction example rendered through --template, "
                      "with --response after it; the response's tokens (what the loss reads) "
                      "are marked")
          ->excludes(prompt);
  CLI::Option* input = cmd->add_option("--input", a->input, "with --instruction: its input");
  CLI::Option* response =
      cmd->add_option("--response", a->response, "with --instruction: the response");
  CLI::Option* tmpl = cmd->add_option("--template", a->template_name,
                                      "with --instruction: the prompt template")
                          ->check(CLI::IsMember(data::instruction_templates()))
                          ->capture_default_str();
  cmd->add_option("--layer", a->layer, "one layer (default: all)")->check(non_negative_int());
  cmd->add_option("--head", a->head, "one head (default: all)")->check(non_negative_int());
  cmd->add_option("--out", a->out, "FILE.html | FILE.svg | FILE.csv | FILE.json");
  cmd->add_option("--position", a->position,
                  "with --layer: what each head adds at this token position, their sum, and "
                  "concat -> c_proj (printed)")
      ->check(non_negative_int());
  cmd->add_option("--decimals", a->decimals, "decimals of the numbers shown in cells")
      ->capture_default_str();
  cmd->add_option(
         "--convention", a->convention,
         "row: queries as rows, softmax(QK^T)V (books, code); column: keys as rows, "
         "queries as columns, V softmax(K^T Q) (3Blue1Brown); the .html page also has a toggle")
      ->check(CLI::IsMember({"row", "column"}))
      ->capture_default_str();
  cmd->add_flag("--scores", a->scores,
                "CSV/JSON: also the scores q.k/sqrt(HS) before the mask and softmax (JSON: "
                "and each head's q and k vectors)");
  cmd->add_option("--toy", a->toy,
                  "instead of a checkpoint: train a small encoder-decoder (~10 s) to copy or "
                  "reverse the letters a-l, and show its attention on --prompt (3-8 letters)")
      ->check(CLI::IsMember({"copy", "reverse"}));
  CLI::Option* attention =
      cmd->add_option(
             "--attention", a->attention,
             "with --toy: cross (decoder queries, encoder keys), encoder (bidirectional: no "
             "mask) or decoder (causal)")
          ->check(CLI::IsMember({"cross", "encoder", "decoder"}))
          ->capture_default_str();
  CLI::Option* toy_steps =
      cmd->add_option("--toy_steps", a->toy_steps, "with --toy: training steps")
          ->check(CLI::Range(int64_t{0}, int64_t{100000}))
          ->capture_default_str();
  cmd->callback([a, &rc, attention, toy_steps, prompt, instruction, input, response, tmpl] {
    for (const CLI::Option* o : {attention, toy_steps})
      ATTEND_CHECK(o->count() == 0 || !a->toy.empty(), "attention: ", o->get_name(),
                   " is for --toy models only; add --toy copy|reverse or drop it");
    ATTEND_CHECK(prompt->count() > 0 || instruction->count() > 0,
                 "attention: --prompt is required (or --instruction and --response)");
    ATTEND_CHECK(instruction->count() == 0 || a->position < 0,
                 "attention: --position reads a --prompt, not an --instruction example");
    ATTEND_CHECK(instruction->count() == 0 || a->toy.empty(),
                 "attention: --instruction is for GPT checkpoints, not --toy");
    ATTEND_CHECK(instruction->count() == 0 || (response->count() > 0 && !a->response.empty()),
                 "attention: --instruction needs --response (the tokens the loss reads)");
    for (const CLI::Option* o : {input, response, tmpl})
      ATTEND_CHECK(o->count() == 0 || instruction->count() > 0, "attention: ", o->get_name(),
                   " goes with --instruction");
    rc = run_attention(*a);
  });
}

}  // namespace attend::cli
