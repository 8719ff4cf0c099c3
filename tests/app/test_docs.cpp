// Every command shown in README.md and docs/*.md runs as written: the fenced ```sh blocks
// are extracted and each line is run by bash in a sandbox folder, in order, file by file,
// with `attend` (and `build/attend`) being the program just built. A line may say why it
// is not run ("not run by the docs test: ..."): it is then listed, not run. Synopses
// (alternatives written a|b, optional [flags]) are ```text blocks and are not commands.
// Fixtures the pages assume: corpus.txt and my_text.txt (any text), runs/fortunes (the
// main job's run, here a short one).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "run_cmd.h"
#include "train/dist.h"

namespace fs = std::filesystem;
using attend::test::Run;

namespace {

struct Command {
  std::string file, line;
  int number;
};

std::vector<Command> sh_commands(const fs::path& page) {
  std::ifstream in(page);
  std::vector<Command> out;
  std::string line;
  bool inside = false;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("```", 0) == 0) {
      inside = !inside && line == "```sh";
      continue;
    }
    if (!inside) continue;
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] == '#') continue;
    out.push_back({page.filename().string(), line, n});
  }
  return out;
}

}  // namespace

TEST_CASE("every command shown in README.md and docs/ runs as written") {
  const fs::path src = ATTEND_SOURCE_DIR;
  std::vector<fs::path> pages = {src / "README.md"};
  for (const auto& e : fs::directory_iterator(src / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  std::sort(pages.begin() + 1, pages.end());
  const fs::path box = attend::test::temp_dir("docs");
  fs::create_directories(box / "build");
  fs::create_symlink(ATTEND_BIN, box / "build" / "attend");
  // Every printable ASCII character, so that any prompt the pages show is in the
  // vocabulary of a character-level model trained on it.
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "ROMEO: To be or not to be? Q: What is a cat? Once upon a time, the quick brown fox.\n";
    for (char ch = ' '; ch <= '~'; ++ch) text += ch;
    text += "\n";
  }
  std::ofstream(box / "corpus.txt") << text;
  std::ofstream(box / "my_text.txt") << text;
  const std::string env = "cd " + box.string() + " && export PATH=" + (box / "build").string() +
                          ":$PATH && ";
  Run main_job = attend::test::shell(env + "attend train --data corpus.txt --out runs/fortunes "
                                           "--max_iters 30 --eval_iters 2 --n_layer 2");
  REQUIRE_MESSAGE(main_job.code == 0, main_job.out);
  const bool mpi = attend::train::Dist::built_with_mpi() &&
                   attend::test::shell("command -v mpirun").code == 0;
  // node-llama-cpp where docs/cli.md runs it from (scripts/setup.sh --test-extras).
  const char* home = std::getenv("HOME");
  const bool llama_cpp =
      home && fs::exists(fs::path(home) / ".cache/attend/node-llama-cpp/node_modules/.bin/node-llama-cpp");
  // GPT-2's tokenizer files (scripts/setup.sh fetches them): asked of attend itself, from
  // where the pages' commands run, so its own search decides (data::find_gpt2_dir).
  const bool gpt2 =
      attend::test::shell(env + "attend tokenize --tokenizer gpt2 --text hi").code == 0;
  int ran = 0;
  for (const fs::path& page : pages) {
    for (const Command& c : sh_commands(page)) {
      if (c.line.find("not run by the docs test") != std::string::npos) {
        MESSAGE("not run: ", c.file, ":", c.number, ": ", c.line);
        continue;
      }
      if (c.line.rfind("mpirun", 0) == 0 && !mpi) {
        MESSAGE("not run (no mpirun here): ", c.file, ":", c.number);
        continue;
      }
      if (c.line.find("needs GPT-2's tokenizer files") != std::string::npos && !gpt2) {
        MESSAGE("not run (no GPT-2 tokenizer files here: scripts/setup.sh): ", c.file, ":",
                c.number);
        continue;
      }
      if (c.line.find("node-llama-cpp") != std::string::npos && !llama_cpp) {
        MESSAGE("not run (no node-llama-cpp here: scripts/setup.sh --test-extras): ", c.file, ":",
                c.number);
        continue;
      }
      Run r = attend::test::shell(env + "timeout 300 bash -c " + [&] {
        std::string q = "'";
        for (char ch : c.line) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
        return q + "'";
      }() + " </dev/null");
      INFO(c.file, ":", c.number, ": ", c.line, "\n", r.out);
      CHECK(r.code == 0);
      ++ran;
    }
  }
  MESSAGE(ran, " commands run");
  CHECK(ran >= 15);  // the pages hold 19 today: not vacuous
  fs::remove_all(box);
}

namespace {

// The first ```text block of a page (the command synopsis): each command it names (the word
// after "attend") and each flag (--name) it shows.
struct Synopsis {
  std::set<std::string> commands, flags;
};

Synopsis synopsis(const fs::path& page) {
  std::ifstream in(page);
  Synopsis s;
  std::string line;
  bool inside = false, done = false;
  while (!done && std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      done = inside;
      inside = !inside && line == "```text";
      continue;
    }
    if (!inside) continue;
    std::istringstream words(line);
    std::string w, prev;
    while (words >> w) {
      if (w == "#") break;  // a comment: the rest is prose
      if (prev == "attend") s.commands.insert(w);
      if (w.rfind("--", 0) == 0) {
        const size_t end = w.find_first_of("=]|");
        s.flags.insert(w.substr(0, end));
      }
      prev = w;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("the README's command synopsis agrees with docs/cli.md's: the same commands, no flag cli.md lacks") {
  const fs::path src = ATTEND_SOURCE_DIR;
  const Synopsis readme = synopsis(src / "README.md"), cli = synopsis(src / "docs" / "cli.md");
  REQUIRE(readme.commands.size() >= 10);  // the block was found
  CHECK(readme.commands == cli.commands);
  for (const std::string& f : readme.flags) {
    CAPTURE(f);
    CHECK(cli.flags.count(f) == 1);
  }
}
