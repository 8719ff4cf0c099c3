// Instruction data (data/instructions.h): the Alpaca template's exact text, the refusals
// naming entry and field, the examples file, and batches whose targets are the responses
// only.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/instructions.h"
#include "data/token_file.h"
#include "fuzz.h"
#include "test_util.h"

using namespace attend;
using namespace attend::data;
namespace fs = std::filesystem;

namespace {

fs::path write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

}  // namespace

TEST_CASE("instructions: the alpaca template renders as the book's chapter 7 does") {
  const fs::path dir = test::temp_dir("inst_render");
  const fs::path f = write_text(
      dir / "i.json",
      R"([{"instruction": "Edit the sentence.", "input": "He go home.", "output": "He goes home."},
          {"instruction": "Name a colour.", "input": "", "output": "Blue."},
          {"instruction": "Say hi.", "output": "Hi.", "other": 1}])");
  const std::vector<RenderedExample> e = read_instruction_file(f, "alpaca");
  REQUIRE(e.size() == 3);
  const std::string head =
      "Below is an instruction that describes a task. Write a response that appropriately "
      "completes the request.\n\n### Instruction:\n";
  CHECK(rendered_text(e[0].prompt) == head + "Edit the sentence.\n\n### Input:\nHe go home.\n\n### Response:\n");
  CHECK(e[0].response == "He goes home.");
  CHECK(rendered_text(e[1].prompt) == head + "Name a colour.\n\n### Response:\n");  // no input: no section
  CHECK(rendered_text(e[2].prompt) == head + "Say hi.\n\n### Response:\n");         // unknown fields ignored
  fs::remove_all(dir);
}

TEST_CASE("instructions: a bad file or entry is refused naming the entry and the field") {
  const fs::path dir = test::temp_dir("inst_bad");
  struct Row {
    std::string json, error;
  };
  const std::vector<Row> rows = {
      {R"({"instruction": "a"})", "expected a JSON array"},
      {"[1]", "example 0 is not an object"},
      {R"([{"instruction": "a", "output": "b"}, {"output": "b"}])",
       "example 1 has no \"instruction\""},
      {R"([{"instruction": "a", "output": 3}])", "example 0: \"output\" is number"},
      {R"([{"instruction": "a", "input": ["x"], "output": "b"}])", "\"input\" is array"},
      {R"([{"instruction": "a", "output": ""}])",
       "\"output\" is empty (an example needs a response)"},
      {R"([{"instruction": "", "output": "b"}])", "\"instruction\" is empty"},
      {"[]", "holds no examples"},
      {"[{", "not JSON"},
  };
  for (const Row& r : rows) {
    INFO(r.json);
    const fs::path f = write_text(dir / "i.json", r.json);
    CHECK_THROWS_WITH(read_instruction_file(f, "alpaca"), doctest::Contains(r.error.c_str()));
  }
  CHECK_THROWS_WITH(read_instruction_file(dir, "alpaca"), doctest::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_instruction_file(dir / "i.json", "chatgpt"),
                    doctest::Contains("--template 'chatgpt' is not a template attend knows"));
  fs::remove_all(dir);
}

TEST_CASE("instructions: examples files round-trip and a damaged one is refused") {
  const fs::path dir = test::temp_dir("inst_idx");
  const std::vector<ExampleSpan> spans = {{3, 7}, {1, 2}, {4, 10}};
  write_examples_file(dir / "t.examples", spans, 19);
  const std::vector<ExampleSpan> back = read_examples_file(dir / "t.examples", 19);
  REQUIRE(back.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back[i].prompt == spans[i].prompt);
    CHECK(back[i].length == spans[i].length);
  }
  CHECK_THROWS_WITH(read_examples_file(dir / "t.examples", 20),
                    doctest::Contains("indexes 19 tokens, but its token file holds 20"));
  CHECK_THROWS_WITH(write_examples_file(dir / "u.examples", {{2, 2}}, 2),
                    doctest::Contains("example 0 has prompt 2 of length 2"));
  CHECK_THROWS_WITH(write_examples_file(dir / "u.examples", {{1, 2}}, 3),
                    doctest::Contains("the lengths sum to 2, not 3"));
  std::string bytes = read_file(dir / "t.examples");
  std::string bad = bytes;
  bad[16] = 4;  // count 4: one more than the file holds
  write_text(dir / "b.examples", bad);
  CHECK_THROWS_WITH(read_examples_file(dir / "b.examples", 19),
                    doctest::Contains("example count 4 does not fit"));
  bad = bytes;
  bad[32 + 16 + 8] = 30;  // example 1 of length 30
  write_text(dir / "b.examples", bad);
  CHECK_THROWS_WITH(read_examples_file(dir / "b.examples", 19),
                    doctest::Contains("example 1 (prompt 1, length 30) does not fit"));
  bad = bytes;
  bad[0] = 'X';
  write_text(dir / "b.examples", bad);
  CHECK_THROWS_WITH(read_examples_file(dir / "b.examples", 19), doctest::Contains("magic"));
  fs::remove_all(dir);
}

TEST_CASE("instructions: a batch's targets are the responses and end markers, nothing else") {
  const fs::path dir = test::temp_dir("inst_batch");
  // Three examples: tokens 100 + k per position; prompts of 3, 1 and 6 tokens.
  const std::vector<ExampleSpan> spans = {{3, 7}, {1, 2}, {6, 10}};
  TokenIds ids;
  for (int i = 0; i < 19; ++i) ids.push_back(100 + i);
  write_token_file(dir / "train.bin", ids, 200);
  write_examples_file(dir / "train.examples", spans, 19);
  const TokenDataset ds(dir / "train.bin", 5);  // T 5: example 2's prompt (6) is too long
  CHECK(ds.instructions());
  CHECK(ds.dropped_examples() == 1);
  REQUIRE(ds.num_windows() == 2);
  const Batch w = ds.windows(0, 2);
  // Example 0: tokens 100..106, prompt 3; cut to T + 1 = 6 tokens: x 100..104, targets from
  // position 2 (predicting token 3, the response's first).
  REQUIRE(w.x.shape() == Shape{2, 5});
  CHECK(w.x.to_vector<int64_t>() == std::vector<int64_t>{100, 101, 102, 103, 104, 107, 0, 0, 0, 0});
  CHECK(w.y.to_vector<int64_t>() ==
        std::vector<int64_t>{-100, -100, 103, 104, 105, 108, -100, -100, -100, -100});
  // Random batches draw only usable examples, every row scoring at least one target.
  for (uint64_t step = 0; step < 20; ++step) {
    const Batch b = ds.random_batch(1, step, 0, 3);
    const auto x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
    const int64_t W = b.x.size(1);
    for (int64_t r = 0; r < 3; ++r) {
      const bool first = x[r * W] == 100;
      CHECK((first || x[r * W] == 107));
      int64_t scored = 0;
      for (int64_t t = 0; t < W; ++t) {
        const int64_t want = first ? (t >= 2 && t < 5 ? 101 + t : -100) : (t == 0 ? 108 : -100);
        CHECK(y[r * W + t] == want);
        scored += y[r * W + t] != -100;
      }
      CHECK(scored >= 1);
    }
  }
  // the batch stream is a function of (seed, step, micro-step)
  CHECK(test::bit_identical(ds.random_batch(1, 3, 1, 3).x, ds.random_batch(1, 3, 1, 3).x));
  // content_hash covers the examples file
  const uint64_t h = ds.content_hash();
  write_examples_file(dir / "train.examples", {{3, 7}, {1, 12}}, 19);
  CHECK(TokenDataset(dir / "train.bin", 5).content_hash() != h);
  fs::remove_all(dir);
}

TEST_CASE("fuzz: examples and pairs files are refused cleanly or read consistently") {
  const fs::path dir = test::temp_dir("fuzz_examples");
  for (const bool pairs : {false, true}) {
    INFO(pairs);
    std::vector<ExampleSpan> spans;
    int64_t n = 0;
    for (int i = 0; i < 40; ++i) {
      // A pair's two examples share a prompt length.
      spans.push_back({1 + (pairs ? i / 2 : i) % 5, 6 + i % 7});
      n += spans.back().length;
    }
    write_examples_file(dir / "good.examples", spans, n, pairs);
    const std::string good = read_file(dir / "good.examples");
    const auto r = test::fuzz_file(
        "examples file", good, dir / "e.examples", pairs ? 2 : 1, test::fuzz_cases(2000),
        [n](const fs::path& p) { read_examples_file(p, n); },
        [n](const fs::path& p) -> std::string {
          int64_t sum = 0;
          bool is_pairs = false;
          const std::vector<ExampleSpan> read = read_examples_file(p, n, &is_pairs);
          for (size_t i = 0; i < read.size(); ++i) {
            const ExampleSpan& e = read[i];
            if (e.prompt < 1 || e.prompt >= e.length) return "a prompt not inside its example";
            if (is_pairs && i % 2 == 1 && e.prompt != read[i - 1].prompt)
              return "a pair whose prompts differ";
            sum += e.length;
          }
          if (is_pairs && read.size() % 2 != 0) return "an odd number of examples as pairs";
          return sum == n ? "" : "the examples do not tile the tokens";
        });
    CHECK(r.refused > 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("chat templates: ChatML and Llama 3 render exactly, their special tokens as ids") {
  const ChatTemplate& chatml = chat_template("chatml");
  CHECK(rendered_text(render_prompt(chatml, "Name a fruit.", "Be brief.", "You are terse.")) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a fruit.\n\n"
        "Be brief.<|im_end|>\n<|im_start|>assistant\n");
  CHECK(rendered_text(render_prompt(chatml, "Hi.")) ==
        "<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n");
  CHECK(rendered_text(render_next_turn(chatml, "More.")) ==
        "\n<|im_start|>user\nMore.<|im_end|>\n<|im_start|>assistant\n");
  const ChatTemplate& llama3 = chat_template("llama3");
  CHECK(rendered_text(render_prompt(llama3, "Hi.", "", "Be kind.")) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(rendered_text(render_next_turn(llama3, "More.")) ==
        "<|start_header_id|>user<|end_header_id|>\n\nMore.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK_THROWS_WITH(render_prompt(chat_template("alpaca"), "Hi.", "", "sys"),
                    doctest::Contains("the alpaca template has no system message"));
  CHECK_THROWS_WITH(chat_template("vicuna"),
                    doctest::Contains("'vicuna' is not a template attend knows"));

  // A byte-level BPE without the tokens gets them appended, in the template's order.
  const auto bpe = train_bpe_tokenizer("user assistant system Name a fruit. Hi there.", 280);
  std::vector<std::string> added;
  const TokenizerSpec wider = with_template_tokens(bpe->spec(), chatml, &added);
  REQUIRE(added == std::vector<std::string>{"<|im_start|>", "<|im_end|>"});
  const int32_t V = static_cast<int32_t>(bpe->vocab_size());
  CHECK(token_id(wider, "<|im_start|>") == V);
  CHECK(token_id(wider, "<|im_end|>") == V + 1);
  CHECK(end_of_turn_id(chatml, wider) == V + 1);
  CHECK(wider.name == bpe->spec().name + "+chatml");
  int64_t n = 0;
  CHECK(extends_with_specials(wider, bpe->spec(), &n));
  CHECK(n == 2);
  CHECK(!extends_with_specials(bpe->spec(), wider));
  TokenizerSpec other = wider;
  other.tokens.push_back("word");  // not a special token
  CHECK(!extends_with_specials(other, bpe->spec()));
  other = wider;
  other.tokens[0] = "x";  // an old token changed
  CHECK(!extends_with_specials(other, bpe->spec()));
  // A tokenizer that has them already gains nothing.
  CHECK(with_template_tokens(wider, chatml).tokens.size() == wider.tokens.size());

  // Special tokens go in as ids; their text, typed by a user, stays text.
  const auto tok = make_tokenizer(wider);
  const TokenIds ids = encode_rendered(*tok, render_prompt(chatml, "Hi."));
  CHECK(ids.front() == V);
  CHECK(std::count(ids.begin(), ids.end(), V) == 2);
  CHECK(std::count(ids.begin(), ids.end(), V + 1) == 1);
  const TokenIds typed = tok->encode("<|im_start|>");
  CHECK(std::find(typed.begin(), typed.end(), V) == typed.end());
  CHECK(tok->decode(ids) == rendered_text(render_prompt(chatml, "Hi.")));
  CHECK_THROWS_WITH(encode_rendered(*bpe, render_prompt(llama3, "Hi.")),
                    doctest::Contains("has no <|begin_of_text|> token"));
}

// --format chat: one example per assistant message, its prompt the conversation before it as
// the chat command keeps it (each earlier answer followed by the end-of-turn token); the
// entry's own system message wins over --system; the refusals name conversation, message
// and field.
TEST_CASE("chat data: each assistant message is an example with its history, refusals named") {
  const fs::path dir = test::temp_dir("inst_chat");
  const fs::path f = write_text(
      dir / "c.json",
      R"([{"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello."},
                        {"role": "user", "content": "Name a color"},
                        {"role": "assistant", "content": "Blue."}]},
          {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
           "id": 7}])");
  std::vector<int64_t> conv;
  const std::vector<RenderedExample> e = read_chat_file(f, "chatml", "Default.", &conv);
  REQUIRE(e.size() == 3);
  CHECK(conv == std::vector<int64_t>{0, 0, 1});
  CHECK(rendered_text(e[0].prompt) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(e[0].response == "Hello.");
  CHECK(rendered_text(e[1].prompt) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a color<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(e[1].response == "Blue.");
  // the end-of-turn token after an answer is a special piece (an id), not encoded text
  size_t specials = 0;
  for (const TemplatePiece& p : e[1].prompt) specials += p.special && p.text == "<|im_end|>";
  CHECK(specials == 4);
  // no system message of its own: --system's
  CHECK(rendered_text(e[2].prompt) ==
        "<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n");
  // the same history as the prompt, first turn, answer, end of turn and the next turn
  const ChatTemplate& t = chat_template("chatml");
  Rendered want = render_prompt(t, "Hi", "", "Be brief.");
  want.push_back({"Hello."});
  want.push_back({"<|im_end|>", true});
  for (const TemplatePiece& p : render_next_turn(t, "Name a color")) want.push_back(p);
  REQUIRE(want.size() == e[1].prompt.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(want[i].text == e[1].prompt[i].text);
    CHECK(want[i].special == e[1].prompt[i].special);
  }
  // Llama 3: one <|begin_of_text|>, headers per message
  const auto l = read_chat_file(f, "llama3", "", nullptr);
  CHECK(rendered_text(l[1].prompt) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nName a color<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");

  auto refused = [&](const std::string& json, const std::string& want_msg,
                     const std::string& tmpl = "chatml") {
    INFO(json);
    const fs::path g = write_text(dir / "bad.json", json);
    CHECK_THROWS_WITH(read_chat_file(g, tmpl, "", nullptr), doctest::Contains(want_msg.c_str()));
  };
  const std::string ok = R"([{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}])";
  refused(ok, "--template alpaca has one turn and no history", "alpaca");
  refused(R"([{"message": []}])", "conversation 0 has no \"messages\"");
  refused(R"([{"messages": []}])", "conversation 0: \"messages\" is empty");
  refused(R"([{"messages": "hi"}])", "conversation 0: \"messages\" is string");
  refused(R"([{"messages": [{"role": "user"}]}])", "conversation 0, message 0 has no \"content\"");
  refused(R"([{"messages": [{"role": "user", "content": 3}]}])",
          "message 0: \"content\" is number, expected a string");
  refused(R"([{"messages": [{"role": "bot", "content": "x"}]}])",
          "message 0: \"role\" is 'bot', expected system, user or assistant");
  refused(R"([{"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "b"}]}])",
          "message 0: \"content\" is empty");
  refused(R"([{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]}])",
          "message 1: a system message comes first or not at all");
  refused(R"([{"messages": [{"role": "assistant", "content": "a"}]}])",
          "message 0: the conversation starts with the assistant");
  refused(R"([{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}])",
          "message 1: two user messages in a row");
  refused(R"([{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "assistant", "content": "c"}]}])",
          "message 2: two assistant messages in a row");
  refused(R"([{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}])",
          "conversation 0 ends with a user message");
  refused(R"([{"messages": [{"role": "system", "content": "s"}]}])",
          "conversation 0 has no assistant message to learn");
  refused(R"([])", "holds no examples");
  fs::remove_all(dir);
}

// Conversation files (prepare --format chat) mutated: refused with attend's error, or read
// into examples that keep the reader's promises (a prompt ending with the assistant's header,
// a nonempty answer, entries in order).
TEST_CASE("fuzz: conversation files are refused cleanly or read consistently") {
  const fs::path dir = test::temp_dir("fuzz_chat");
  nlohmann::json conv = nlohmann::json::array();
  for (int i = 0; i < 6; ++i) {
    nlohmann::json m = nlohmann::json::array();
    if (i % 2 == 0) m.push_back({{"role", "system"}, {"content", str("Sys ", i)}});
    for (int t = 0; t <= i % 3; ++t) {
      m.push_back({{"role", "user"}, {"content", str("Q", t)}});
      m.push_back({{"role", "assistant"}, {"content", str("A", t)}});
    }
    conv.push_back({{"messages", m}});
  }
  const std::string good = conv.dump();
  for (const char* tmpl : {"chatml", "llama3"}) {
    INFO(tmpl);
    const std::string header = std::string(tmpl) == "chatml" ? "<|im_start|>assistant\n"
                                                             : "assistant<|end_header_id|>\n\n";
    const auto r = test::fuzz_file(
        "conversation file", good, dir / "c.json", 11, test::fuzz_cases(1500),
        [&](const fs::path& p) { read_chat_file(p, tmpl, "", nullptr); },
        [&](const fs::path& p) -> std::string {
          std::vector<int64_t> conv_of;
          const auto e = read_chat_file(p, tmpl, "", &conv_of);
          if (e.size() != conv_of.size()) return "an example without its conversation";
          for (size_t i = 0; i < e.size(); ++i) {
            const std::string text = rendered_text(e[i].prompt);
            if (e[i].response.empty()) return "an empty answer";
            if (text.size() < header.size() ||
                text.compare(text.size() - header.size(), header.size(), header) != 0)
              return "a prompt that does not end with the assistant's header";
            if (i > 0 && conv_of[i] < conv_of[i - 1]) return "conversations out of order";
          }
          return e.empty() ? "no examples accepted" : "";
        });
    CHECK(r.refused > 0);
  }
  fs::remove_all(dir);
}

// A second implementation: Jinja2 rendering the templates as their models publish them, the
// way Hugging Face's apply_chat_template does (tests/data/chat_template_check.py), on the
// 1,100 instructions (when ../shared/data has them) with and without a system message, and
// on conversations whose contents carry surrounding whitespace (which Llama 3's template
// trims and ChatML's keeps): each prompt, and each prompt with its response and end marker.
TEST_CASE("chat templates: Jinja2 renders the published templates to the same text") {
  const fs::path dir = test::temp_dir("inst_jinja");
  nlohmann::json cases = nlohmann::json::array();
  auto message = [](const char* role, const std::string& content) {
    return nlohmann::json{{"role", role}, {"content", content}};
  };
  auto add = [&](const ChatTemplate& t, const nlohmann::json& before, const RenderedExample& e,
                 const std::string& reply) {
    cases.push_back({{"template", t.name}, {"messages", before}, {"add_generation_prompt", true},
                     {"ours", rendered_text(e.prompt)}});
    nlohmann::json all = before;
    all.push_back(message("assistant", reply));
    cases.push_back({{"template", t.name}, {"messages", all}, {"add_generation_prompt", false},
                     {"ours", rendered_text(e.prompt) + e.response + t.end_of_turn}});
  };
  // Alpaca-style entries: the user message is the instruction, then a blank line and the input
  nlohmann::json entries = nlohmann::json::array(
      {{{"instruction", "Name a colour."}, {"output", "Blue."}},
       {{"instruction", "Translate to French."}, {"input", "Good morning"}, {"output", "Bonjour"}},
       {{"instruction", "  Pad me \n"}, {"input", "\tand me "}, {"output", "\u00a0 done.\u3000\n"}}});
  const fs::path shared = test::shared_data("instructions/instruction-data.json");
  if (!shared.empty()) {
    std::ifstream in(shared);
    for (const auto& e : nlohmann::json::parse(in)) entries.push_back(e);
  }
  write_text(dir / "inst.json", entries.dump());
  for (const char* name : {"chatml", "llama3"})
    for (const std::string system : {"", "You are terse. "}) {
      const ChatTemplate& t = chat_template(name);
      const std::vector<RenderedExample> ex = read_instruction_file(dir / "inst.json", name, system);
      REQUIRE(ex.size() == entries.size());
      for (size_t i = 0; i < ex.size(); ++i) {
        const nlohmann::json& e = entries[i];
        const std::string input = e.value("input", "");
        nlohmann::json before = nlohmann::json::array();
        if (!system.empty()) before.push_back(message("system", system));
        before.push_back(message("user", e["instruction"].get<std::string>() +
                                             (input.empty() ? "" : "\n\n" + input)));
        add(t, before, ex[i], e["output"].get<std::string>());
      }
    }
  // Conversations, each assistant message an example with its history
  const nlohmann::json convs = nlohmann::json::array(
      {{{"messages", {message("system", " Be brief.\n"), message("user", "Hi "),
                      message("assistant", " Hello. "), message("user", "\u2003Name a colour"),
                      message("assistant", "Blue.\n\n"), message("user", "Why?"),
                      message("assistant", "It is.")}}},
       {{"messages", {message("user", "2+2?"), message("assistant", "4")}}}});
  write_text(dir / "chat.json", convs.dump());
  for (const char* name : {"chatml", "llama3"}) {
    const ChatTemplate& t = chat_template(name);
    std::vector<int64_t> conv;
    const std::vector<RenderedExample> ex = read_chat_file(dir / "chat.json", name, "", &conv);
    size_t k = 0;
    for (const auto& c : convs) {
      nlohmann::json before = nlohmann::json::array();
      for (const auto& m : c["messages"]) {
        if (m["role"] == "assistant") {
          REQUIRE(k < ex.size());
          add(t, before, ex[k++], m["content"].get<std::string>());
        }
        before.push_back(m);
      }
    }
    CHECK(k == ex.size());
  }
  write_text(dir / "cases.json", cases.dump());
  const fs::path script = fs::path(__FILE__).parent_path() / "chat_template_check.py";
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + (dir / "cases.json").string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  fs::remove_all(dir);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) ATTEND_SKIP("python3-jinja2 not installed");
  MESSAGE(out);
  CHECK(status == 0);
  CHECK(out.find("jinja ok " + std::to_string(cases.size())) != std::string::npos);
}
