// `attend prepare`: tokenize a corpus into train.bin, val.bin and its tokenizer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "data/instructions.h"
#include "data/prepare.h"
#include "tensor/error.h"

namespace attend::cli {

namespace {

int run_prepare(const data::PrepareOptions& o) {
  data::PrepareResult r = data::prepare(o);
  std::printf("read %lld bytes from %lld file(s)", static_cast<long long>(r.bytes),
              static_cast<long long>(r.files));
  if (!r.skipped.empty()) std::printf(" (%zu skipped: not UTF-8 text)", r.skipped.size());
  std::printf("\ntokenizer %s, vocab_size %lld\n", r.tokenizer.c_str(),
              static_cast<long long>(r.vocab_size));
  std::printf("train.bin %lld tokens, val.bin %lld tokens, in %s\n",
              static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
              o.out.c_str());
  if (!r.added_tokens.empty()) {
    std::string names;
    for (const std::string& t : r.added_tokens) names += (names.empty() ? "" : ", ") + t;
    std::printf(
        "added the template's tokens %s to the tokenizer (now %s, vocab_size %lld); a model "
        "finetuned on this data grows its embedding to match\n",
        names.c_str(), r.tokenizer.c_str(), static_cast<long long>(r.vocab_size));
  }
  if (o.format == "preference")
    std::printf("%lld train and %lld val preference pairs (template %s; for train --dpo)\n",
                static_cast<long long>(r.train_examples), static_cast<long long>(r.val_examples),
                o.template_name.c_str());
  else if (o.format == "chat")
    std::printf("%lld train and %lld val examples, one per assistant message with the "
                "conversation before it (template %s; the loss counts that message only)\n",
                static_cast<long long>(r.train_examples), static_cast<long long>(r.val_examples),
                o.template_name.c_str());
  else if (o.format != "text")
    std::printf("%lld train and %lld val examples (template %s; the loss counts responses only)\n",
                static_cast<long long>(r.train_examples), static_cast<long long>(r.val_examples),
                o.template_name.c_str());
  return 0;
}

}  // namespace

void add_prepare(CLI::App& app, int& rc) {
  auto o = std::make_shared<data::PrepareOptions>();
  CLI::App* cmd =
      app.add_subcommand("prepare", "tokenize a corpus into train.bin, val.bin and its tokenizer");
  cmd->add_option("--data", o->data, "a text file, or a folder of text files")->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "char | gpt2 | bpe:N (train N tokens) | hf:PATH (Hugging Face tokenizer.json) | "
                  "a saved tokenizer")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output folder")->required();
  cmd->add_option(flag_names("val_fraction"), o->val_fraction,
                  "the last fraction of tokens kept for validation")
      ->capture_default_str();
  cmd->add_option("--format", o->format,
                  "text: a corpus; alpaca: a JSON array of {instruction, input, output} "
                  "examples, the loss on the responses only; preference: the same with "
                  "{chosen, rejected} responses, for train --dpo; chat: a JSON array of "
                  "{messages: [{role, content}, ...]} conversations, the loss on the assistant's "
                  "messages (docs/finetune.md)")
      ->check(CLI::IsMember({"text", "alpaca", "chat", "preference"}))
      ->capture_default_str();
  cmd->add_option("--template", o->template_name,
                  "--format alpaca, chat or preference: the prompt template the examples are "
                  "rendered through (chat: chatml or llama3)")
      ->check(CLI::IsMember(data::instruction_templates()))
      ->capture_default_str();
  cmd->add_option("--system", o->system,
                  "--template chatml or llama3: a system message before every example (chat: "
                  "for conversations without their own)");
  cmd->callback([o, &rc] { rc = run_prepare(*o); });
}

}  // namespace attend::cli
