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

// The templates `prepare --template` knows.
std::vector<std::string> instruction_templates();

struct RenderedExample {
  std::string prompt, response;
};

// A preference pair (DPO): one prompt, the chosen and the rejected response.
struct PreferencePair {
  std::string prompt, chosen, rejected;
};

// The prompt an instruction (and an optional input) renders to: what the model then
// continues with a response. Throws naming the template if attend does not know it.
std::string instruction_prompt(const std::string& template_name, const std::string& instruction,
                               const std::string& input = "");

// The examples of an Alpaca-style JSON file (an array of objects with string "instruction"
// and "output", optional string "input"), rendered through `template_name`. Refused, naming
// the file, the entry's index and the field: a missing or non-string field, an empty
// instruction or output.
std::vector<RenderedExample> read_instruction_file(const std::filesystem::path& file,
                                                   const std::string& template_name);

// The pairs of a preference file: entries as read_instruction_file's with string "chosen"
// and "rejected" instead of "output" (an "output" is ignored). Refused the same way, and an
// empty side of a pair naming the entry and the field.
std::vector<PreferencePair> read_preference_file(const std::filesystem::path& file,
                                                 const std::string& template_name);

// The id of the tokenizer's end-of-text token (<|endoftext|>, <|end_of_text|>), or -1.
int32_t end_of_text_id(const TokenizerSpec& spec);

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
