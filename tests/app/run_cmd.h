// Running the attend program (or any shell command) from a test, output captured.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace attend::test {

struct Run {
  int code;         // the exit code, or 128 + the signal
  std::string out;  // stdout and stderr together (or stdout alone, see attend_stdout)
};

// Runs a shell command; `streams` is appended (" 2>&1": both, " 2>/dev/null": stdout).
inline Run shell(const std::string& cmd, const std::string& streams = " 2>&1") {
  FILE* p = ::popen((cmd + streams).c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// `attend ARGS` (prefix: shell words before it, e.g. "ulimit -f 100; " or "VAR=x ").
inline Run attend_cmd(const std::string& args, const std::string& prefix = "") {
  return shell(prefix + std::string(ATTEND_BIN) + " " + args);
}

// What a pipe or a file would receive from `attend ARGS`: stdout only.
inline std::string attend_stdout(const std::string& args) {
  return shell(std::string(ATTEND_BIN) + " " + args, " 2>/dev/null").out;
}

// The shared fixture: a tiny GPT (2 layers, C 16, T 16) trained 3 steps on a repeated line
// into dir/run (the corpus is dir/corpus.txt); `extra` adds train flags. Returns dir/run.
inline std::filesystem::path trained_run(const std::filesystem::path& dir,
                                         const std::string& extra = "") {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "So shaken as we are, so wan with care.\n";
  {
    FILE* f = std::fopen((dir / "corpus.txt").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  const std::filesystem::path r = dir / "run";
  Run t = attend_cmd("train --data " + (dir / "corpus.txt").string() + " --out " + r.string() +
                     " --n_layer 2 --n_head 2 --n_embd 16 --block_size 16 --batch_size 4"
                     " --eval_iters 2 --max_iters 3" +
                     extra);
  REQUIRE_MESSAGE(t.code == 0, t.out);
  return r;
}

}  // namespace attend::test
