#!/usr/bin/env python3
"""A second implementation of the chat templates: Hugging Face's way.

transformers' apply_chat_template renders a model's `chat_template` (a Jinja string from
its tokenizer_config.json) with Jinja2 (trim_blocks, lstrip_blocks). This renders the two
templates attend implements with Jinja2 the same way and compares each case attend wrote:

    chat_template_check.py CASES.json

CASES.json: [{"template": "chatml"|"llama3", "messages": [{"role", "content"}...],
"add_generation_prompt": bool, "ours": text}], the special tokens in `ours` written as
their names. A conversation that ends with the assistant's message is compared without the
newline ChatML's template writes after every message (attend's turn ends at <|im_end|>;
the next turn's rendering starts with that newline). Prints "jinja ok N" or the first
difference; exit 77 when Jinja2 is missing (the test is then skipped).
"""
import json
import sys

try:
    import jinja2
except ImportError:
    print("chat_template_check: python3-jinja2 is not installed")
    sys.exit(77)

# The templates as their models publish them: ChatML as Hugging Face's chat-templating
# documentation gives it; Llama 3 as Meta-Llama-3-8B-Instruct's tokenizer_config.json.
TEMPLATES = {
    "chatml": (
        "{% for message in messages %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}"
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}"
    ),
}


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    compiled = {name: env.from_string(src) for name, src in TEMPLATES.items()}
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    for i, case in enumerate(cases):
        theirs = compiled[case["template"]].render(
            messages=case["messages"],
            add_generation_prompt=case["add_generation_prompt"],
            bos_token="<|begin_of_text|>",
        )
        if case["template"] == "chatml" and not case["add_generation_prompt"]:
            theirs = theirs[:-1] if theirs.endswith("\n") else theirs + "(no final newline)"
        if theirs != case["ours"]:
            print(f"case {i} ({case['template']}) differs:\n  jinja: {theirs!r}\n  attend: {case['ours']!r}")
            sys.exit(1)
    print(f"jinja ok {len(cases)}")


if __name__ == "__main__":
    main()
