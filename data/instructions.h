// Instruction data: Alpaca-style examples rendered through a prompt template, with the loss
// on the response only.
//
// An example {"instruction": I, "input": X, "output": O} (X optional) renders, with the
// template `alpaca` (Stanford Alpaca's, as in "Build a Large Language Model (From Scratch)",
// chapter 7), to a prompt
//   "Below is an instruction that describes a task. Write a response that appropriately
//    completes the request.\n\n### Instruction:\n" I ["\n\n### Input:\n" X] "\n\n### Response:\n"
// and a response O. Prompt and response are encoded apart (so the boundary is exact) and
// the tokenizer's end-of-text token is appended as an id, never encoded from its text:
//   tokens = encode(prompt) + encode(O) + [end]
// The loss counts the targets at positions >= prompt_len: the response and its end marker;
// never the prompt, never padding.
//
// Examples files (train.examples, val.examples beside train.bin and val.bin):
//   offset  size  field
//   0       8     magic "ATNDEXMP"
//   8       4     format version: 1 (examples), 2 (preference pairs)
//   12      4     kind: 0 in version 1; 1 in version 2, the examples are pairs: example 2i is
//                 pair i's chosen response, 2i + 1 its rejected one, both with its prompt
//   16      8     example count E
//   24      8     the token file's token count N (the examples tile it exactly)
//   32      E*16  per example: u64 prompt length P, u64 length L (both tokens; 1 <= P < L)
// Example e starts where e - 1 ends; the lengths sum to N. Every field is checked against
// the file's size and the token file before anything is sized from it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer.h"

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend::data {

// The templates `prepare --template` knows: alpaca, chatml, llama3.
std::vector<std::string> instruction_templates();

// A template's rendering: pieces of text, each encoded by the tokenizer, and special
// tokens, each inserted as its id (never by encoding its text).
struct TemplatePiece {
  std::string text;
  bool special = false;  // text names a special token: <|im_start|>, <|eot_id|>, ...
};
using Rendered = std::vector<TemplatePiece>;

// A prompt template:
//   alpaca  Stanford Alpaca's (above); the response ends with the end-of-text token. One
//           turn: no system message, no history.
//   chatml  "<|im_start|>system\n{system}<|im_end|>\n" (when there is a system message)
//           "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n", the response
//           ending with <|im_end|>; a next turn continues "\n<|im_start|>user\n...".
//   llama3  Meta's Llama 3 format: "<|begin_of_text|>" then for each message
//           "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>", the prompt
//           ending with the assistant's header; the response ends with <|eot_id|>. Every
//           content, the response's too, is stripped of surrounding whitespace, as Meta's
//           template's `trim` does.
// {user} is the instruction, then "\n\n" and the input when there is one.
struct ChatTemplate {
  std::string name;
  std::vector<std::string> specials;  // the special tokens it uses, in the order they are added
  std::string end_of_turn;            // ends a response; empty: the end-of-text token
  bool multi_turn = false;            // has a system message and a history (not alpaca)
};
// Throws naming --template when attend does not know the name.
const ChatTemplate& chat_template(const std::string& name);

// The prompt of a first turn: what the model continues with a response.
Rendered render_prompt(const ChatTemplate& t, const std::string& instruction,
                       const std::string& input = "", const std::string& system = "");
// A later turn of a multi-turn template, after the previous response's end-of-turn token.
Rendered render_next_turn(const ChatTemplate& t, const std::string& user);
// s without the whitespace Python's str.strip() removes at both ends (Unicode's, as
// str.isspace says): Jinja's `trim`, which Llama 3's published template applies to every
// message.
std::string python_strip(const std::string& s);
// A message's content as template t renders it: stripped for llama3 (its template trims),
// as it is for the others. Responses go through it too.
std::string template_content(const ChatTemplate& t, const std::string& content);
// The text of a rendering, the special tokens written as their names (for display).
std::string rendered_text(const Rendered& r);

// The ids of a rendering: text pieces encoded, special tokens looked up. Throws naming the
// token and the tokenizer when it lacks one (prepare adds them; see with_template_tokens).
TokenIds encode_rendered(const Tokenizer& tokenizer, const Rendered& r);
// The id a response ends with: the template's end-of-turn token, or the end-of-text token;
// -1 when the tokenizer has none.
int32_t end_of_turn_id(const ChatTemplate& t, const TokenizerSpec& spec);
// The tokenizer with the template's special tokens it lacks appended (new ids V, V + 1, ...;
// named "<name>+<template>"), and which were added. A model trained on data made with it
// has its embedding grown to match (train --init_from does this).
TokenizerSpec with_template_tokens(const TokenizerSpec& spec, const ChatTemplate& t,
                                   std::vector<std::string>* added = nullptr);
// Whether `wider` is `base` with special tokens (<|...|>) appended and nothing else changed:
// what with_template_tokens makes. Sets the count of added tokens.
bool extends_with_specials(const TokenizerSpec& wider, const TokenizerSpec& base,
                           int64_t* added = nullptr);

struct RenderedExample {
  Rendered prompt;
  std::string response;
};

// A preference pair (DPO): one prompt, the chosen and the rejected response.
struct PreferencePair {
  Rendered prompt;
  std::string chosen, rejected;
};

// The prompt an instruction (and an optional input) renders to, as text: what the model
// then continues with a response. Throws naming the template if attend does not know it.
std::string instruction_prompt(const std::string& template_name, const std::string& instruction,
                               const std::string& input = "");

// The examples of an Alpaca-style JSON file (an array of objects with string "instruction"
// and "output", optional string "input"), rendered through `template_name` (a system
// message for the templates that have one). Refused, naming
// the file, the entry's index and the field: a missing or non-string field, an empty
// instruction or output.
std::vector<RenderedExample> read_instruction_file(const std::filesystem::path& file,
                                                   const std::string& template_name,
                                                   const std::string& system = "");

// The pairs of a preference file: entries as read_instruction_file's with string "chosen"
// and "rejected" instead of "output" (an "output" is ignored). Refused the same way, and an
// empty side of a pair naming the entry and the field.
std::vector<PreferencePair> read_preference_file(const std::filesystem::path& file,
                                                 const std::string& template_name,
                                                 const std::string& system = "");

// The examples of a conversation file (prepare --format chat): a JSON array of entries
// {"messages": [{"role": R, "content": C}, ...]} (Hugging Face's and OpenAI's chat layout),
// an optional "system" message first, then "user" and "assistant" alternating, from a user
// message to an assistant one. Each assistant message becomes one example: its prompt is the
// conversation before it rendered through a multi-turn template (each earlier assistant
// message followed by the end-of-turn token, as the chat command keeps it), its response the
// message. So every assistant message is learned once, with its whole history as context:
// the (context, target) pairs of one row whose every assistant turn counts, for the cost of
// repeating the history. A system message in the entry replaces `system` (the default).
// `conversation` receives each example's entry index (the validation split keeps a
// conversation's examples together). Refused, naming the file, entry, message and field: a
// single-turn template, a missing or non-string field, an unknown role, a system message not
// first, roles out of turn, an empty message, a conversation not ending with the assistant.
std::vector<RenderedExample> read_chat_file(const std::filesystem::path& file,
                                            const std::string& template_name,
                                            const std::string& system,
                                            std::vector<int64_t>* conversation);

// The id of the tokenizer's end-of-text token (<|endoftext|>, <|end_of_text|>), or -1.
int32_t end_of_text_id(const TokenizerSpec& spec);
// The id of a token by its exact bytes, or -1.
int32_t token_id(const TokenizerSpec& spec, const std::string& token);

struct ExampleSpan {
  int64_t prompt = 0, length = 0;  // tokens
};

// pairs: the spans are preference pairs (chosen, rejected), written as version 2.
void write_examples_file(const std::filesystem::path& path, const std::vector<ExampleSpan>& spans,
                         int64_t tokens, bool pairs = false);
// Reads and checks an examples file against the token count of the file it indexes; pairs,
// when given, receives whether it holds preference pairs.
std::vector<ExampleSpan> read_examples_file(const std::filesystem::path& path, int64_t tokens,
                                            bool* pairs = nullptr);
// The same on the file's bytes, already read (errors name `path`).
std::vector<ExampleSpan> parse_examples_file(const std::string& bytes,
                                             const std::filesystem::path& path, int64_t tokens,
                                             bool* pairs = nullptr);

}  // namespace attend::data
#pragma GCC visibility pop
