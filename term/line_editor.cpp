#include "term/line_editor.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

namespace attend::term {

namespace {

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Code points in s[0, n).
size_t code_points(const std::string& s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) k += !continuation(static_cast<unsigned char>(s[i]));
  return k;
}

// A word: letters, digits and every byte of a non-ASCII character (so a move by words never
// stops inside one).
bool word_byte(unsigned char c) { return c >= 0x80 || std::isalnum(c); }

size_t prev_char(const std::string& s, size_t at) {
  if (at == 0) return 0;
  do --at;
  while (at > 0 && continuation(static_cast<unsigned char>(s[at])));
  return at;
}

size_t next_char(const std::string& s, size_t at) {
  if (at >= s.size()) return s.size();
  do ++at;
  while (at < s.size() && continuation(static_cast<unsigned char>(s[at])));
  return at;
}

size_t prev_word(const std::string& s, size_t at) {
  while (at > 0 && !word_byte(static_cast<unsigned char>(s[at - 1]))) --at;
  while (at > 0 && word_byte(static_cast<unsigned char>(s[at - 1]))) --at;
  return at;
}

size_t next_word(const std::string& s, size_t at) {
  while (at < s.size() && !word_byte(static_cast<unsigned char>(s[at]))) ++at;
  while (at < s.size() && word_byte(static_cast<unsigned char>(s[at]))) ++at;
  return at;
}

// The keys an escape sequence or a control byte stands for.
enum class Key { none, left, right, word_left, word_right, home, end, up, down, del, word_back };

// ESC [ params final, or ESC O final: xterm's and the VT100's cursor keys.
Key csi_key(const std::string& params, int final) {
  const bool ctrl = params == "1;5";  // Ctrl with an arrow: by words
  switch (final) {
    case 'A': return Key::up;
    case 'B': return Key::down;
    case 'C': return ctrl ? Key::word_right : Key::right;
    case 'D': return ctrl ? Key::word_left : Key::left;
    case 'H': return Key::home;
    case 'F': return Key::end;
    case '~':
      if (params == "1" || params == "7") return Key::home;
      if (params == "4" || params == "8") return Key::end;
      if (params == "3") return Key::del;
      return Key::none;
    default: return Key::none;
  }
}

}  // namespace

std::string render(const std::string& prompt, LineState& s, int cols) {
  const size_t pw = code_points(prompt, prompt.size());
  const size_t avail = std::max<size_t>(1, cols > 0 && static_cast<size_t>(cols) > pw + 1
                                               ? static_cast<size_t>(cols) - pw - 1
                                               : 1);
  const size_t cur = code_points(s.text, s.cursor);
  if (cur < s.scroll) s.scroll = cur;
  if (cur > s.scroll + avail) s.scroll = cur - avail;
  // the bytes of code points [scroll, scroll + avail)
  size_t from = 0;
  for (size_t k = 0; from < s.text.size() && k < s.scroll; ++k) from = next_char(s.text, from);
  size_t to = from;
  for (size_t n = 0; to < s.text.size() && n < avail; ++n) to = next_char(s.text, to);
  std::string out = "\r" + prompt + s.text.substr(from, to - from) + "\x1b[0K\r";
  const size_t col = pw + cur - s.scroll;
  if (col > 0) out += "\x1b[" + std::to_string(col) + "C";
  return out;
}

LineEditor::LineEditor(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}

int LineEditor::next_byte() {
  if (at_ < pending_.size()) return static_cast<unsigned char>(pending_[at_++]);
  char buf[4096];
  ssize_t n;
  do n = ::read(in_, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return -1;
  pending_.assign(buf, static_cast<size_t>(n));
  at_ = 1;
  return static_cast<unsigned char>(pending_[0]);
}

LineEditor::Result LineEditor::read(const std::string& prompt, std::string& line, int cols) {
  if (cols <= 0) cols = terminal_columns(out_);
  if (cols <= 0) cols = 80;
  auto write_all = [&](const std::string& s) {
    for (size_t done = 0; done < s.size();) {
      const ssize_t n = ::write(out_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the terminal went away: nothing more to draw
      done += static_cast<size_t>(n);
    }
  };
  LineState s;
  size_t hist = history_.size();  // history_.size(): the line being typed
  std::string typed;              // that line, kept while the history is browsed
  auto recall = [&](size_t h) {
    if (hist == history_.size()) typed = s.text;
    hist = h;
    s.text = hist == history_.size() ? typed : history_[hist];
    s.cursor = s.text.size();
  };
  auto erase = [&](size_t from, size_t to) {
    s.text.erase(from, to - from);
    s.cursor = from;
  };
  write_all(render(prompt, s, cols));
  for (;;) {
    const int c = next_byte();
    Key key = Key::none;
    if (c < 0) {  // end of input: a last line without its newline is still a line
      if (s.text.empty()) return Result::end_of_input;
      break;
    }
    if (c == '\r' || c == '\n') break;
    switch (c) {
      case 3:  // Ctrl-C
        write_all("^C\r\n");
        if (s.text.empty()) return Result::interrupt;
        s = LineState{};
        hist = history_.size();
        break;
      case 4:  // Ctrl-D
        if (s.text.empty()) {
          write_all("\r\n");
          return Result::end_of_input;
        }
        key = Key::del;
        break;
      case 1: key = Key::home; break;
      case 5: key = Key::end; break;
      case 2: key = Key::left; break;
      case 6: key = Key::right; break;
      case 16: key = Key::up; break;
      case 14: key = Key::down; break;
      case 8:
      case 127:
        erase(prev_char(s.text, s.cursor), s.cursor);
        break;
      case 11: erase(s.cursor, s.text.size()); break;  // Ctrl-K
      case 21: erase(0, s.cursor); break;              // Ctrl-U
      case 23: key = Key::word_back; break;            // Ctrl-W
      case 12: write_all("\x1b[H\x1b[2J"); break;      // Ctrl-L
      case 27: {  // an escape sequence, or Alt with a key
        const int c2 = next_byte();
        if (c2 == '[') {
          std::string params;
          int f = next_byte();
          while (f >= 0x20 && f <= 0x3F) params += static_cast<char>(f), f = next_byte();
          key = csi_key(params, f);
        } else if (c2 == 'O') {
          key = csi_key("", next_byte());
        } else if (c2 == 'b' || c2 == 'B') {
          key = Key::word_left;
        } else if (c2 == 'f' || c2 == 'F') {
          key = Key::word_right;
        } else if (c2 == 127 || c2 == 8) {
          key = Key::word_back;
        }
        break;
      }
      default:
        if (c < 0x20 || (c >= 0x80 && c < 0xC0) || c >= 0xF8) break;  // no key we know
        std::string ch(1, static_cast<char>(c));
        const int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        for (int i = 0; i < more; ++i) {
          const int b = next_byte();
          if (b < 0 || !continuation(static_cast<unsigned char>(b))) {
            if (b >= 0) --at_;  // not part of it: read it again as a key
            ch.clear();
            break;
          }
          ch += static_cast<char>(b);
        }
        s.text.insert(s.cursor, ch);
        s.cursor += ch.size();
    }
    switch (key) {
      case Key::none: break;
      case Key::left: s.cursor = prev_char(s.text, s.cursor); break;
      case Key::right: s.cursor = next_char(s.text, s.cursor); break;
      case Key::word_left: s.cursor = prev_word(s.text, s.cursor); break;
      case Key::word_right: s.cursor = next_word(s.text, s.cursor); break;
      case Key::home: s.cursor = 0; break;
      case Key::end: s.cursor = s.text.size(); break;
      case Key::del: erase(s.cursor, next_char(s.text, s.cursor)); break;
      case Key::word_back: erase(prev_word(s.text, s.cursor), s.cursor); break;
      case Key::up:
        if (hist > 0) recall(hist - 1);
        break;
      case Key::down:
        if (hist < history_.size()) recall(hist + 1);
        break;
    }
    write_all(render(prompt, s, cols));
  }
  s.cursor = s.text.size();
  write_all(render(prompt, s, cols) + "\r\n");
  line = s.text;
  if (!line.empty() && (history_.empty() || history_.back() != line)) history_.push_back(line);
  return Result::line;
}

RawMode::RawMode(int fd) : fd_(fd) {
  if (!isatty(fd) || tcgetattr(fd, &saved_) != 0) return;
  struct termios raw = saved_;
  raw.c_iflag &= ~static_cast<tcflag_t>(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
  raw.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // the editor writes its own \r\n
  raw.c_cflag |= CS8;
  raw.c_lflag &= ~static_cast<tcflag_t>(ECHO | ICANON | IEXTEN | ISIG);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  // TCSADRAIN, not TCSAFLUSH: keys typed ahead (a paste) are kept
  ok_ = tcsetattr(fd, TCSADRAIN, &raw) == 0;
}

RawMode::~RawMode() {
  if (ok_) tcsetattr(fd_, TCSADRAIN, &saved_);
}

int terminal_columns(int fd) {
  struct winsize w {};
  if (ioctl(fd, TIOCGWINSZ, &w) != 0) return 0;
  return w.ws_col;
}

}  // namespace attend::term
