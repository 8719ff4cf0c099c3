// Running the attend program (or any shell command) from a test, output captured.
#pragma once

#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <vector>
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

// `attend ARGS` on a terminal (a pseudo-terminal), as a person at a keyboard runs it: each
// entry of `turns` is typed when the line editor draws a fresh, empty prompt ("> ", the
// cursor after it). Returns the exit code and everything the terminal showed. Gives up (and
// kills the program) after `seconds`.
inline Run attend_on_terminal(const std::string& args, const std::vector<std::string>& turns,
                              int seconds = 120) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + std::string(ATTEND_BIN) + " " + args).c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string fresh = "\r> \x1b[0K\r\x1b[2C";  // term::render of an empty line
  std::string out;
  size_t typed = 0, from = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
    struct pollfd p {master, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO: the program has ended and closed the terminal
      out.append(buf, static_cast<size_t>(n));
    }
    const size_t at = out.find(fresh, from);
    if (typed < turns.size() && at != std::string::npos) {
      const std::string& keys = turns[typed++];
      REQUIRE(::write(master, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
      from = at + fresh.size();
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
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
