// `attend chat`: talk to an instruction-tuned checkpoint. Each line you type is an
// instruction rendered through the template (data/instructions.h) and the reply is drawn
// until the template's end-of-turn token (or --max_new_tokens), streamed to stdout. With
// chatml and llama3 the conversation is kept, key/value caches included, so a turn runs
// only its own tokens; alpaca is single-turn.
// --prompt gives one turn without a terminal (what tests and scripts use). On a terminal
// each line is typed in a line editor (term/line_editor.h: arrows, emacs keys, this chat's
// history); from a pipe, lines are read as they come. Ctrl-C stops a reply, or drops the
// line being typed; Ctrl-D (or Ctrl-C) at an empty prompt ends the chat.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.h"
#include "data/instructions.h"
#include "infer/sample.h"
#include "tensor/error.h"
#include "term/line_editor.h"
#include "train/model_io.h"

namespace attend::cli {

namespace {

// Ctrl-C during a reply stops that reply (the next line is still read); at the prompt it
// does what it does by default (ends the program).
std::atomic<bool> g_interrupted{false}, g_replying{false};
extern "C" void on_interrupt(int sig) {
  if (g_replying.load()) {
    g_interrupted.store(true);
  } else {  // both async-signal-safe
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

struct ChatArgs {
  std::string checkpoint, template_name = "alpaca", prompt, system;
  infer::SampleOptions options;
};

int run_chat(ChatArgs a) {
  const data::ChatTemplate& t = data::chat_template(a.template_name);  // before loading
  ATTEND_CHECK(a.system.empty() || t.multi_turn, "chat: --system: the ", t.name,
               " template has no system message; use --template chatml or llama3");
  train::LoadedModel m = train::load_model(a.checkpoint);
  const kernel::PrecisionScope precision =
      use_precision(weights_precision("", "", m.config.precision), "--precision");
  infer::SampleOptions o = a.options;
  o.stop_token = data::end_of_turn_id(t, m.tokenizer->spec());
  ATTEND_CHECK(o.stop_token >= 0, "chat: ", m.checkpoint.string(), ": its tokenizer ",
               m.tokenizer->spec().name, " has no ",
               t.end_of_turn.empty() ? std::string("end-of-text token") : t.end_of_turn,
               " to end a reply; chat needs a model finetuned on instruction data rendered "
               "with --template ", t.name, " (attend prepare --format alpaca)");
  o.cancel = &g_interrupted;
  infer::Conversation conv(*m.model, o.weights);
  bool first = true;
  auto turn = [&](const std::string& line, uint32_t k) {
    g_interrupted.store(false);
    g_replying.store(true);
    // A multi-turn template keeps the conversation (its caches too) and continues it with
    // the previous reply's end marker and the next turn; alpaca answers each line alone.
    data::TokenIds ids;
    if (!first && t.multi_turn) {
      ids.push_back(o.stop_token);
      const data::TokenIds next =
          data::encode_rendered(*m.tokenizer, data::render_next_turn(t, line));
      ids.insert(ids.end(), next.begin(), next.end());
      if (!conv.fits(static_cast<int64_t>(ids.size()), o.max_new_tokens)) {
        std::fprintf(stderr,
                     "(the conversation has outgrown the model's context of %lld tokens: "
                     "starting over from this turn)\n",
                     static_cast<long long>(m.model->config.block_size));
        first = true;
      }
    }
    if (first || !t.multi_turn) {
      conv.reset();
      ids = data::encode_rendered(*m.tokenizer, data::render_prompt(t, line, "", a.system));
      ATTEND_CHECK(conv.fits(static_cast<int64_t>(ids.size()), 1), "chat: this turn renders to ",
                   ids.size(), " tokens; the model's context is ", m.model->config.block_size,
                   ": shorten it");
    }
    first = false;
    conv.reply(
        *m.tokenizer, ids, o,
        [](const std::string& piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        k);
    g_replying.store(false);
    std::printf("\n");
    std::fflush(stdout);
  };
  if (!a.prompt.empty()) {
    turn(a.prompt, 0);
    return 0;
  }
  // Each line is one turn. Ctrl-D (end of input) ends the chat. The editor draws on stderr,
  // where the prompt goes, so stdout holds the replies alone.
  const bool tty = isatty(STDIN_FILENO), editor = tty && isatty(STDERR_FILENO);
  term::LineEditor lines(STDIN_FILENO, STDERR_FILENO);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  if (tty)
    std::fprintf(stderr, "chat with %s (template %s%s); Ctrl-D ends\n",
                 m.checkpoint.string().c_str(), t.name.c_str(),
                 t.multi_turn ? ", replies see the turns before" : ", each line on its own");
  std::string line;
  for (uint32_t k = 0;; ++k) {
    if (editor) {
      term::LineEditor::Result r;
      {
        const term::RawMode raw(STDIN_FILENO);  // only while a line is typed
        r = lines.read("> ", line);
      }
      if (r == term::LineEditor::Result::end_of_input) break;
      if (r == term::LineEditor::Result::interrupt) {  // as Ctrl-C ends any program
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
      }
    } else {
      if (tty) std::fputs("> ", stderr);
      if (!std::getline(std::cin, line)) break;
    }
    if (line.empty()) continue;
    try {
      turn(line, k);
    } catch (const Error& e) {  // a turn too long: say so, and read the next one
      g_replying.store(false);
      std::fprintf(stderr, "%s\n", e.what());
      first = true;
    }
  }
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, int& rc) {
  auto a = std::make_shared<ChatArgs>();
  infer::SampleOptions& o = a->options;
  o.max_new_tokens = 256;
  o.temperature = 0.0;
  CLI::App* cmd = app.add_subcommand(
      "chat",
      "talk to an instruction-tuned checkpoint: each line an instruction, the reply to "
      "its end-of-text token");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint file (.h5), or a run folder (its newest)")
      ->required();
  cmd->add_option("--template", a->template_name, "the prompt template it was finetuned with")
      ->check(CLI::IsMember(data::instruction_templates()))
      ->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "one instruction, answered without a terminal");
  cmd->add_option("--system", a->system,
                  "--template chatml or llama3: the system message the conversation starts with");
  cmd->add_option(flag_names("max_new_tokens"), o.max_new_tokens, "longest reply, in tokens")
      ->capture_default_str();
  add_draw_options(cmd, o);
  cmd->callback([a, &rc] { rc = run_chat(*a); });
}

}  // namespace attend::cli
