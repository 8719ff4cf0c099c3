// The line editor (term/line_editor.h) run over pipes: the keys as a terminal sends them in,
// the line (and the drawing) out.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fuzz.h"
#include "term/line_editor.h"
#include "test_util.h"

using namespace attend::term;

namespace {

// Feeds `keys` to an editor and reads lines until the input ends; each result with its line.
struct Read {
  std::vector<LineEditor::Result> results;
  std::vector<std::string> lines;
  std::string drawn;
};

Read type(const std::string& keys, int reads, int cols = 40) {
  int in[2], out[2];
  REQUIRE(pipe(in) == 0);
  REQUIRE(pipe(out) == 0);
  // a drawing longer than the pipe holds is cut, never waited for (read after the editor)
  REQUIRE(fcntl(out[1], F_SETFL, O_NONBLOCK) == 0);
  REQUIRE(write(in[1], keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
  close(in[1]);
  Read r;
  {
    LineEditor e(in[0], out[1]);
    for (int i = 0; i < reads; ++i) {
      std::string line;
      r.results.push_back(e.read("> ", line, cols));
      r.lines.push_back(r.results.back() == LineEditor::Result::line ? line : "");
    }
  }
  close(in[0]);
  close(out[1]);
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) r.drawn.append(buf, static_cast<size_t>(n));
  close(out[0]);
  return r;
}

std::string line_of(const std::string& keys) {
  const Read r = type(keys, 1);
  REQUIRE(r.results[0] == LineEditor::Result::line);
  return r.lines[0];
}

const std::string left = "\x1b[D", right = "\x1b[C", up = "\x1b[A", down = "\x1b[B";

}  // namespace

TEST_CASE("line editor: typing, moving and deleting by characters, ends and words") {
  CHECK(line_of("hello\r") == "hello");
  CHECK(line_of("helo" + left + "l\r") == "hello");
  CHECK(line_of("ello\x01h\x05!\r") == "hello!");                      // Ctrl-A, Ctrl-E
  CHECK(line_of("ab\x02\x02x\x06\x06y\r") == "xaby");                  // Ctrl-B, Ctrl-F
  CHECK(line_of("abc\x7f\x7f" "d\r") == "ad");                         // Backspace
  CHECK(line_of("abc\x01\x04\r") == "bc");                             // Ctrl-D deletes
  CHECK(line_of("abc\x1b[H\x1b[3~\r") == "bc");                        // Home, Delete
  CHECK(line_of("abc\x1bOH\x1b[F!\r") == "abc!");                      // Home, End (other codes)
  CHECK(line_of("abc\x1b[1~x\x1b[4~y\r") == "xabcy");                  // Home, End (VT220)
  CHECK(line_of("hello world" + left + left + "\x0b\r") == "hello wor");  // Ctrl-K
  CHECK(line_of("hello world" + left + left + "\x15\r") == "ld");         // Ctrl-U
  CHECK(line_of("one two, three\x17\r") == "one two, ");                  // Ctrl-W
  CHECK(line_of("one two\x1b\x7f\r") == "one ");                          // Alt-Backspace
  CHECK(line_of("one two\x1b" "b" "X\r") == "one Xtwo");                  // Alt-B
  CHECK(line_of("one two\x01\x1b" "fX\r") == "oneX two");                 // Alt-F
  CHECK(line_of("one two\x1b[1;5D" "X\x1b[1;5C" "Y\r") == "one XtwoY");   // Ctrl-arrows
  CHECK(line_of("a\nb") == "a");                                          // \n ends a line too
  // keys it does not know change nothing: Page Up, F5, Tab, a stray continuation byte
  CHECK(line_of("a\x1b[5~\x1b[15~\t\x80" "b\r") == "ab");
  CHECK(line_of("\x7f" + left + "\x17\x0b\x15x\r") == "x");  // edits of nothing do nothing
}

TEST_CASE("line editor: a UTF-8 character is one step, never split") {
  CHECK(line_of("h\xc3\xa9llo" + left + left + left + left + "X\r") == "hX\xc3\xa9llo");
  CHECK(line_of("h\xc3\xa9\x7f\r") == "h");  // Backspace takes both bytes of é
  CHECK(line_of("\xe2\x82\xac\xf0\x9f\x99\x82" + left + "\x7f\r") == "\xf0\x9f\x99\x82");
  CHECK(line_of("caf\xc3\xa9 ol\xc3\xa9\x17\r") == "caf\xc3\xa9 ");  // a word of non-ASCII
  // a lead byte without its continuation is dropped; the byte after it still counts
  CHECK(line_of("a\xc3" "b\r") == "ab");
}

TEST_CASE("line editor: history, Ctrl-C, Ctrl-D, pasted lines, input that ends") {
  using R = LineEditor::Result;
  {  // Up twice recalls the first line; Down comes back to the line being typed
    const Read r = type("first\rsecond\r" + up + up + "!\rdraft" + up + down + "?\r", 4);
    CHECK(r.lines == std::vector<std::string>{"first", "second", "first!", "draft?"});
  }
  {  // Ctrl-P / Ctrl-N as Up / Down; a repeated line is kept once, so a second Up stays
    const Read r = type("a\ra\r\x10\x10!\r\x10\x0e\r", 4);
    CHECK(r.lines == std::vector<std::string>{"a", "a", "a!", ""});
  }
  {  // Ctrl-C drops the line typed; on an empty line it interrupts
    const Read r = type("oops\x03kept\r\x03", 2);
    CHECK(r.results == std::vector<R>{R::line, R::interrupt});
    CHECK(r.lines[0] == "kept");
    CHECK(r.drawn.find("^C") != std::string::npos);
  }
  {  // Ctrl-D on an empty line ends the input; the input's end does too
    const Read r = type("x\r\x04", 2);
    CHECK(r.results == std::vector<R>{R::line, R::end_of_input});
    const Read e = type("", 1);
    CHECK(e.results[0] == R::end_of_input);
    const Read last = type("no newline", 2);  // a last line without \r is still a line
    CHECK(last.results == std::vector<R>{R::line, R::end_of_input});
    CHECK(last.lines[0] == "no newline");
  }
  {  // several lines arriving in one read (a paste) come out one per call
    const Read r = type("one\rtwo\rthree\r", 3);
    CHECK(r.lines == std::vector<std::string>{"one", "two", "three"});
  }
}

TEST_CASE("line editor: the drawing scrolls a long line around the cursor") {
  LineState s;
  s.text = "abcdefghijklmnopqrst", s.cursor = s.text.size();
  // 12 columns: "> " and 9 characters, one column kept free for the cursor
  CHECK(render("> ", s, 12) == "\r> lmnopqrst\x1b[0K\r\x1b[11C");
  CHECK(s.scroll == 11);
  s.cursor = 3;  // back to the start: the window follows
  CHECK(render("> ", s, 12) == "\r> defghijkl\x1b[0K\r\x1b[2C");
  s.cursor = 0;
  CHECK(render("> ", s, 12) == "\r> abcdefghi\x1b[0K\r\x1b[2C");
  LineState u;  // columns count code points, not bytes
  u.text = "\xc3\xa9t\xc3\xa9", u.cursor = u.text.size();
  CHECK(render("> ", u, 40) == "\r> \xc3\xa9t\xc3\xa9\x1b[0K\r\x1b[5C");
  LineState empty;
  CHECK(render("", empty, 40) == "\r\x1b[0K\r");
  // the whole read draws the final line and moves to the next one
  CHECK(type("hi\r", 1).drawn.find("\r> hi\x1b[0K\r\x1b[4C\r\n") != std::string::npos);
}

TEST_CASE("line editor: raw mode leaves what is not a terminal alone") {
  int p[2];
  REQUIRE(pipe(p) == 0);
  {
    const RawMode raw(p[0]);
    CHECK(!raw.ok());
  }
  CHECK(terminal_columns(p[0]) == 0);
  close(p[0]);
  close(p[1]);
}

// Whatever bytes arrive (mutations of a session with every kind of key), the editor ends,
// and each line it returns holds no control byte and only whole UTF-8 sequences: the
// cursor never stopped inside a character.
TEST_CASE("line editor: fuzzed keys give whole characters and no control bytes") {
  const std::string session = "h\xc3\xa9llo w\xe2\x82\xacrld" + left + left + "\x7f\x01X\x05" +
                              "\x1b[1;5D\x17\x1b" "b\x1b" "f\x0b\x15\xf0\x9f\x99\x82\r" + up +
                              down + up + "\x1b[3~\x1b[H\x1bOF!\x03again\x04\r";
  std::mt19937_64 rng(20261206);
  const int64_t cases = attend::test::fuzz_cases(3000);
  for (int64_t i = 0; i < cases; ++i) {
    const std::string keys = attend::test::mutate(session, rng);
    const Read r = type(keys, 6, 12);
    for (const std::string& line : r.lines) {
      INFO(line);
      for (size_t at = 0; at < line.size();) {
        const auto c = static_cast<unsigned char>(line[at]);
        REQUIRE(c >= 0x20);
        const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        REQUIRE((c < 0x80 || c >= 0xC0));
        REQUIRE(at + n <= line.size());
        for (size_t k = 1; k < n; ++k) REQUIRE((static_cast<unsigned char>(line[at + k]) & 0xC0) == 0x80);
        at += n;
      }
    }
  }
}
