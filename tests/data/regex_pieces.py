"""Independent checker for attend's pre-tokenizer regex engine (data/regex.h): cuts texts
with Python's `regex` module (the engine tiktoken's and Hugging Face's patterns are written
for) as Hugging Face's Split pre-tokenizer with behavior "Isolated" does: every non-empty
match is a piece, and so is every stretch between matches.

    regex_pieces.py IN.json OUT.json
IN: {"patterns": [...], "texts": [...]}; OUT: one list per pattern, of one list of pieces
per text. Exit 77 when the `regex` module is missing (the C++ test then skips).
"""
import json
import sys

try:
    import regex
except ImportError:
    sys.exit(77)


def pieces(pattern, text):
    out, gap = [], 0
    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        if gap < m.start():
            out.append(text[gap:m.start()])
        out.append(m.group(0))
        gap = m.end()
    if gap < len(text):
        out.append(text[gap:])
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    result = []
    for p in job["patterns"]:
        compiled = regex.compile(p)
        result.append([pieces(compiled, t) for t in job["texts"]])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=True)


if __name__ == "__main__":
    main()
