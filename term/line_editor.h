// A line editor for a terminal: what `attend chat` reads each turn with. No library:
// readline is GPL and none of our Debian dependencies has one, so this is the small core
// every shell's editor shares (linenoise's single-line mode is the model).
//
// Keys (emacs bindings, as bash and Python's REPL use them):
//   Left / Right, Ctrl-B / Ctrl-F     a character back / forward (UTF-8 aware)
//   Alt-B / Alt-F, Ctrl-Left / -Right a word back / forward
//   Home / End, Ctrl-A / Ctrl-E       start / end of the line
//   Backspace, Ctrl-H                 delete the character before the cursor
//   Delete, Ctrl-D                    delete the character under it (Ctrl-D on an empty
//                                     line: end of input)
//   Ctrl-U / Ctrl-K                   delete to the start / to the end
//   Ctrl-W                            delete the word before the cursor
//   Up / Down, Ctrl-P / Ctrl-N        the previous / next line of this session's history
//   Ctrl-L                            clear the screen
//   Enter                             the line
//   Ctrl-C                            an empty line: interrupt; else drop the line typed
// A line wider than the terminal scrolls sideways around the cursor. Width counts code
// points (a double-width character counts one: a cosmetic error, never a wrong line).
//
// The editor reads bytes from a file descriptor and writes its drawing to another, so the
// whole loop runs in tests over pipes; RawMode puts a terminal in the mode it needs.
#pragma once

#include <termios.h>

#include <cstddef>
#include <string>
#include <vector>

namespace attend::term {

// What the user typed so far and where the cursor is (a byte offset, always at the start
// of a UTF-8 code point), with the sideways scroll of its drawing.
struct LineState {
  std::string text;
  size_t cursor = 0;
  size_t scroll = 0;  // the first code point drawn
};

// The drawing of a line after the prompt on a terminal `cols` wide: back to column 0, the
// prompt, the part of the text that fits (cursor visible; updates s.scroll), clear to the
// end, and the cursor put back in place.
std::string render(const std::string& prompt, LineState& s, int cols);

class LineEditor {
 public:
  enum class Result { line, end_of_input, interrupt };

  // in: bytes typed (a terminal in raw mode, or a pipe in tests); out: the drawing.
  LineEditor(int in_fd, int out_fd);
  // Reads one line, drawing as it goes; cols: the terminal's width (0: ask the terminal,
  // 80 if it cannot say). Returns line with the line in `line` (added to the history when
  // not empty), or end_of_input / interrupt.
  Result read(const std::string& prompt, std::string& line, int cols = 0);
  const std::vector<std::string>& history() const { return history_; }

 private:
  int next_byte();  // -1 at the end of input
  int in_, out_;
  std::string pending_;  // bytes read and not used yet (a paste of several lines)
  size_t at_ = 0;
  std::vector<std::string> history_;
};

// While it lives, the terminal at fd is in raw mode (no echo, no line buffering, no signals
// from keys, no CR/NL translation either way); restored when it ends. Does nothing if fd is
// not a terminal (ok() false).
class RawMode {
 public:
  explicit RawMode(int fd);
  ~RawMode();
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool ok_ = false;
  struct termios saved_ {};
};

// The terminal's width in columns, or 0 when fd is not a terminal.
int terminal_columns(int fd);

}  // namespace attend::term
