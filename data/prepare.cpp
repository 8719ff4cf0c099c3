#include "data/prepare.h"

#include "data/instructions.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "data/token_file.h"
#include "data/utf8.h"
#include "tensor/error.h"
#include "tensor/util.h"

namespace attend::data {

namespace fs = std::filesystem;

Corpus read_corpus(const fs::path& path) {
  Corpus c;
  std::error_code ec;
  ATTEND_CHECK(fs::exists(path, ec), path.string(), ": no such file or folder");
  if (!fs::is_directory(path, ec)) {
    c.text = read_file(path);
    c.files.push_back(path);
  } else {
    std::vector<fs::path> all;
    for (auto it = fs::recursive_directory_iterator(
             path, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::path& p = it->path();
      if (p.filename().string().rfind('.', 0) == 0) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_symlink() || !it->is_regular_file()) continue;
      all.push_back(p);
    }
    ATTEND_CHECK(!ec, path.string(), ": cannot list the folder: ", ec.message());
    std::sort(all.begin(), all.end());
    for (const fs::path& p : all) {
      std::string t = read_file(p);
      if (t.find('\0') != std::string::npos || find_invalid_utf8(t) != std::string::npos) {
        c.skipped.push_back(p);
        continue;
      }
      c.text += t;
      c.files.push_back(p);
    }
    ATTEND_CHECK(!c.files.empty(), path.string(), ": no text files in this folder (",
                 c.skipped.size(), " files skipped as not UTF-8 text)");
  }
  ATTEND_CHECK(!c.text.empty(), path.string(), ": the corpus is empty");
  return c;
}

std::unique_ptr<Tokenizer> tokenizer_for_corpus(const std::string& spec,
                                                const std::string& corpus) {
  if (spec == "char") return build_char_tokenizer(corpus);
  if (spec.rfind("bpe:", 0) == 0) {
    const std::string n = spec.substr(4);
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit))
      return train_bpe_tokenizer(corpus, parse_int(n, "--tokenizer " + spec));
  }
  return tokenizer_from_arg(spec);
}

namespace {

// What prepare writes; an --out folder holding anything else is not prepare's to replace.
bool prepare_owns(const std::string& name) {
  return name == "train.bin" || name == "val.bin" || name == "tokenizer.json" ||
         name == "encoder.json" || name == "vocab.bpe" || name == "train.examples" ||
         name == "val.examples";
}

// The tokenizer instruction data is encoded with, the template's special tokens added
// when it lacks them (listed in `added`), and the id that ends each response.
std::unique_ptr<Tokenizer> examples_tokenizer(const PrepareOptions& o, const ChatTemplate& t,
                                              int32_t& end, std::vector<std::string>& added) {
  std::unique_ptr<Tokenizer> tok;
  if (o.use) {
    tok = make_tokenizer(*o.use);
  } else {
    ATTEND_CHECK(o.tokenizer.rfind("char", 0) != 0 && o.tokenizer.rfind("bpe:", 0) != 0,
                 "prepare --format ", o.format, ": --tokenizer ", o.tokenizer,
                 " has no end-of-text token to end each response; use gpt2, hf:PATH or a "
                 "saved tokenizer that has one");
    tok = tokenizer_from_arg(o.tokenizer);
  }
  ATTEND_CHECK(t.end_of_turn.empty() || tok->spec().kind == "bpe", "prepare --template ", t.name,
               ": tokenizer ", tok->spec().name, " is ", tok->spec().kind,
               "-level; the template's special tokens need a bpe tokenizer");
  TokenizerSpec wider = with_template_tokens(tok->spec(), t, &added);
  if (!added.empty()) tok = make_tokenizer(wider);
  end = end_of_turn_id(t, tok->spec());
  ATTEND_CHECK(end >= 0, "prepare --format ", o.format, ": tokenizer ", tok->spec().name,
               " has no end-of-text token (<|endoftext|> or <|end_of_text|>) to end each "
               "response");
  return tok;
}

// Instruction examples (alpaca): each encoded prompt, response and end token; the last
// val_fraction of the examples for validation. Preference pairs (preference): each pair as
// two examples, prompt + chosen + end then prompt + rejected + end, split by pairs.
PrepareResult prepare_examples(const PrepareOptions& o) {
  const bool pairs = o.format == "preference";
  std::vector<RenderedExample> examples;  // pairs: chosen, rejected, chosen, ...
  // each example's entry (an instruction, a pair, a conversation): the split keeps an
  // entry's examples on one side
  std::vector<int64_t> entry;
  if (pairs) {
    for (const PreferencePair& p : read_preference_file(o.data, o.template_name, o.system)) {
      entry.push_back(static_cast<int64_t>(examples.size() / 2));
      entry.push_back(static_cast<int64_t>(examples.size() / 2));
      examples.push_back({p.prompt, p.chosen});
      examples.push_back({p.prompt, p.rejected});
    }
  } else if (o.format == "chat") {
    examples = read_chat_file(o.data, o.template_name, o.system, &entry);
  } else {
    examples = read_instruction_file(o.data, o.template_name, o.system);
    for (size_t k = 0; k < examples.size(); ++k) entry.push_back(static_cast<int64_t>(k));
  }
  int32_t end = -1;
  std::vector<std::string> added;
  const std::unique_ptr<Tokenizer> tok =
      examples_tokenizer(o, chat_template(o.template_name), end, added);
  const int64_t E = entry.back() + 1;  // entries
  const int64_t e_train = E - static_cast<int64_t>(static_cast<double>(E) * o.val_fraction);
  const char* unit = pairs ? " pairs: " : o.format == "chat" ? " conversations: " : " examples: ";
  ATTEND_CHECK(e_train >= 1 && E - e_train >= 1, "prepare: ", o.data.string(), " holds ", E, unit,
               e_train, " for training and ", E - e_train, " for validation at --val_fraction ",
               o.val_fraction, "; each needs at least 1");
  int64_t train_examples = 0;
  TokenIds ids[2];
  std::vector<ExampleSpan> spans[2];
  int64_t bytes = 0;
  TokenIds prompt;
  for (int64_t k = 0; k < static_cast<int64_t>(examples.size()); ++k) {
    const int64_t e = entry[static_cast<size_t>(k)];
    const int split = e < e_train ? 0 : 1;
    train_examples += split == 0;
    const bool new_prompt = !pairs || k % 2 == 0;  // a pair's prompt once
    if (new_prompt) prompt = encode_rendered(*tok, examples[k].prompt);
    const TokenIds response = tok->encode(examples[k].response);
    ATTEND_CHECK(!prompt.empty() && !response.empty(), "prepare: ", o.data.string(),
                 o.format == "chat" ? ": conversation " : ": example ", e,
                 " encodes to no tokens");
    ids[split].insert(ids[split].end(), prompt.begin(), prompt.end());
    ids[split].insert(ids[split].end(), response.begin(), response.end());
    ids[split].push_back(end);
    spans[split].push_back({static_cast<int64_t>(prompt.size()),
                            static_cast<int64_t>(prompt.size() + response.size() + 1)});
    bytes += static_cast<int64_t>(
        (new_prompt ? rendered_text(examples[k].prompt).size() : 0) +
        examples[k].response.size());
  }
  StagedFolder stage(o.out, "prepare", prepare_owns);
  const uint64_t th = tokenizer_hash(tok->spec());
  const char* names[2] = {"train", "val"};
  for (int split = 0; split < 2; ++split) {
    write_token_file(stage.path() / (std::string(names[split]) + ".bin"), ids[split],
                     tok->vocab_size(), th);
    write_examples_file(stage.path() / (std::string(names[split]) + ".examples"), spans[split],
                        static_cast<int64_t>(ids[split].size()), pairs);
  }
  tok->save(stage.path());
  stage.commit();
  PrepareResult r;
  r.files = 1, r.bytes = bytes;
  r.train_tokens = static_cast<int64_t>(ids[0].size());
  r.val_tokens = static_cast<int64_t>(ids[1].size());
  // examples (pairs: pairs); a conversation counts each assistant message
  const int64_t per = pairs ? 2 : 1;
  r.train_examples = train_examples / per;
  r.val_examples = (static_cast<int64_t>(examples.size()) - train_examples) / per;
  r.vocab_size = tok->vocab_size();
  r.tokenizer = tok->spec().name;
  r.added_tokens = added;
  return r;
}

void check_out_folder(const fs::path& out, const fs::path& data) {
  std::error_code ec;
  const fs::path o = fs::weakly_canonical(out, ec), d = fs::weakly_canonical(data, ec);
  const auto rel = o.lexically_relative(d);
  ATTEND_CHECK(rel.empty() || *rel.begin() == "..", "prepare: --out ", out.string(),
               " is inside --data ", data.string(), "; the output would become corpus text");
  if (!fs::exists(out, ec)) return;
  ATTEND_CHECK(fs::is_directory(out, ec), "prepare: --out ", out.string(), " is not a folder");
  for (const auto& e : fs::directory_iterator(out, ec))
    ATTEND_CHECK(prepare_owns(e.path().filename().string()), "prepare: --out ", out.string(),
                 " holds ", e.path().filename().string(),
                 ", which prepare did not write; choose a new or empty folder");
}

}  // namespace

PrepareResult prepare(const PrepareOptions& o) {
  ATTEND_CHECK(o.val_fraction > 0 && o.val_fraction < 1,
               "prepare: --val_fraction must be in (0, 1) (training needs a validation split), "
               "got ",
               o.val_fraction);
  check_out_folder(o.out, o.data);
  if (o.format != "text") {
    ATTEND_CHECK(o.format == "alpaca" || o.format == "preference" || o.format == "chat",
                 "prepare: --format '", printable(o.format, 40),
                 "' is not text, alpaca, chat or preference");
    return prepare_examples(o);
  }
  Corpus corpus = read_corpus(o.data);
  auto tok = o.use ? make_tokenizer(*o.use) : tokenizer_for_corpus(o.tokenizer, corpus.text);
  TokenIds ids = tok->encode(corpus.text);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t n_train = n - static_cast<int64_t>(static_cast<double>(n) * o.val_fraction);
  ATTEND_CHECK(n_train >= 2 && n - n_train >= 2, "prepare: ", o.data.string(), " gives ", n,
               " tokens: ", n_train, " for train.bin and ", n - n_train,
               " for val.bin at --val_fraction ", o.val_fraction, "; each needs at least 2");
  // Built whole beside --out and swapped in (renameat2's exchange): a reader or a crash
  // sees the old prepared data or the new, never train.bin of one corpus beside val.bin
  // of another.
  StagedFolder stage(o.out, "prepare", prepare_owns);
  const uint64_t th = tokenizer_hash(tok->spec());
  write_token_file(stage.path() / "train.bin", TokenIds(ids.begin(), ids.begin() + n_train),
                   tok->vocab_size(), th);
  write_token_file(stage.path() / "val.bin", TokenIds(ids.begin() + n_train, ids.end()),
                   tok->vocab_size(), th);
  tok->save(stage.path());
  stage.commit();
  PrepareResult r;
  r.files = static_cast<int64_t>(corpus.files.size());
  r.bytes = static_cast<int64_t>(corpus.text.size());
  r.train_tokens = n_train;
  r.val_tokens = n - n_train;
  r.vocab_size = tok->vocab_size();
  r.tokenizer = tok->spec().name;
  r.skipped = corpus.skipped;
  return r;
}

}  // namespace attend::data
