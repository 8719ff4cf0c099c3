#!/usr/bin/env bash
# Installs the Debian packages attend needs, only those that are missing.
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail

packages=(g++ cmake make libhdf5-dev libspdlog-dev libcli11-dev doctest-dev nlohmann-json3-dev fortunes)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present (${packages[*]})"
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
