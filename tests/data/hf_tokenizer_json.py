"""Independent writer of Hugging Face's tokenizer.json for GPT-2, from OpenAI's two files,
laid out as the `tokenizers` library saves GPT-2's (its vocab, merges, added
<|endoftext|>, ByteLevel pre-tokenizer, post-processor and decoder). attend's reader
(data/hf_tokenizer.cpp) must give GPT-2's ids from it.

    hf_tokenizer_json.py ENCODER.json VOCAB.bpe OUT.json VARIANT
VARIANT: strings   merges as "a b" strings (tokenizers before 0.20)
         pairs     merges as ["a", "b"] pairs (tokenizers 0.20 and later)
         split     pre_tokenizer a Sequence of a Split on GPT-2's regex and a ByteLevel
                   without its own regex (the shape Llama 3's file has)
"""
import json
import sys

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def main():
    encoder_path, bpe_path, out_path, variant = sys.argv[1:5]
    with open(encoder_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(bpe_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # vocab.bpe: a "#version" line, then one "a b" merge per line, then a final newline.
    merges = [line for line in lines[1:] if line]
    if variant == "pairs":
        merges = [line.split(" ") for line in merges]
    if variant == "split":
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_REGEX}, "behavior": "Isolated",
             "invert": False},
            byte_level(False)]}
    else:
        pre = byte_level(True)
    eot = vocab["<|endoftext|>"]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": byte_level(True),
        "decoder": byte_level(True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
