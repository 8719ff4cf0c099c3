#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds every examples/* project against
# it, as a user would: only -DCMAKE_PREFIX_PATH=PREFIX, nothing from the source or build
# tree. Then runs each example (each exits non-zero when its own check fails), checks that
# `attend --version` and the package's version agree, that no internal header
# (cmake/internal_headers.txt) was installed and every installed one compiles alone,
# compiles one example with pkg-config's flags,
# and does the same from the .deb CPack makes, unpacked into an empty folder.
#   install_examples.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
prefix="$w/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
[ -f "$prefix/include/attend/attend.h" ] || { echo "FAIL: attend/attend.h not installed"; exit 1; }
# The internal headers (cmake/internal_headers.txt) are not installed...
n=0
while read -r internal; do
  case "$internal" in ''|'#'*) continue ;; esac
  [ -e "$src/${internal%/}" ] || { echo "FAIL: $internal is listed as internal but is not in the source"; exit 1; }
  if [ -e "$prefix/include/attend/${internal%/}" ]; then
    echo "FAIL: the internal $internal was installed"; exit 1
  fi
  n=$((n + 1))
done <"$src/cmake/internal_headers.txt"
[ "$n" -ge 10 ] || { echo "FAIL: only $n internal headers read from cmake/internal_headers.txt"; exit 1; }
# ...and every installed header compiles alone with only the installed include roots, so
# none of them needs one that was left out.
find "$prefix/include/attend" -name '*.h' | sed "s|^$prefix/include/||" | sort >"$w/headers"
[ "$(wc -l <"$w/headers")" -ge 35 ] || { echo "FAIL: only $(wc -l <"$w/headers") headers installed"; exit 1; }
if ! xargs -P 2 -I{} sh -c 'printf "#include <%s>\n" "$1" | g++ -std=c++20 -fsyntax-only -fopenmp -x c++ \
       -I"$2/include" -I"$2/include/attend" - 2>"$3/hdr-$(echo "$1" | tr / _).err" ||
       { cat "$3/hdr-$(echo "$1" | tr / _).err"; echo "FAIL: the installed <$1> does not compile alone"; exit 1; }' \
       _ {} "$prefix" "$w" <"$w/headers"; then
  exit 1
fi
echo "headers: $n internal ones left out; $(wc -l <"$w/headers") installed, each compiles alone"
version="$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$prefix"/lib*/cmake/attend/attendConfigVersion.cmake)"
program="$("$prefix/bin/attend" --version)"
[ "$program" = "attend $version" ] || { echo "FAIL: attend --version says '$program', the package $version"; exit 1; }
echo "installed attend $version into a temporary prefix"
# The attention example reads a run that the installed program trains.
for i in $(seq 60); do echo "To be or not to be, that is the question."; done >"$w/corpus.txt"
"$prefix/bin/attend" train --data "$w/corpus.txt" --out "$w/run" --max_iters 5 --eval_iters 1 \
  --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --batch_size 2 >"$w/train.log" 2>&1 ||
  { cat "$w/train.log"; echo "FAIL: the installed attend could not train"; exit 1; }
examples() {  # PREFIX LABEL: configure, build and run every example against PREFIX
  local n=0 dir name exe args
  for dir in "$src"/examples/*/; do
    [ -f "$dir/CMakeLists.txt" ] || continue
    name="$(basename "$dir")"
    local b="$w/$2-$name"
    cmake -S "$dir" -B "$b" -DCMAKE_PREFIX_PATH="$1" -DCMAKE_BUILD_TYPE=Release >"$b.log" 2>&1 ||
      { cat "$b.log"; echo "FAIL: $name does not configure against the $2"; exit 1; }
    cmake --build "$b" -j 2 >>"$b.log" 2>&1 ||
      { cat "$b.log"; echo "FAIL: $name does not build against the $2"; exit 1; }
    exe="$(find "$b" -maxdepth 1 -type f -executable | head -1)"
    args=()
    [ "$name" = attention ] && args=("$w/run" "To be or")
    (cd "$w" && "$exe" "${args[@]}" >"$b.out") ||
      { cat "$b.out"; echo "FAIL: $name ran against the $2 and failed its own check"; exit 1; }
    echo "example $name: configured, built and ran against the $2"
    n=$((n + 1))
  done
  [ "$n" -ge 4 ] || { echo "FAIL: $n examples found under $src/examples, expected 4"; exit 1; }
}
examples "$prefix" "installed package"
# What the examples call is exported by a shared build too (nothing they reach is hidden).
bash "$src/tests/install/hidden_refs.sh" "$prefix"/lib*/libattend_*.a -- "$w"/installed\ package-*/CMakeFiles/*.dir/*.o
# pkg-config: the same example compiled by hand with the .pc file's flags.
command -v pkg-config >/dev/null ||
  { echo "FAIL: pkg-config not found (scripts/setup.sh installs it)"; exit 1; }
export PKG_CONFIG_PATH="$(echo "$prefix"/lib*/pkgconfig)"
# shellcheck disable=SC2046
g++ -O1 "$src/examples/custom_op/main.cpp" -o "$w/op_pc" $(pkg-config --cflags --libs --static attend)
"$w/op_pc" >/dev/null || { echo "FAIL: the pkg-config build of custom_op failed its check"; exit 1; }
echo "pkg-config: custom_op compiled with attend.pc's flags and ran"
# Every ```cpp block of docs/library.md is a whole program: compiled the same way and run.
awk -v dir="$w" '/^```cpp$/ { n++; f = dir "/snippet" n ".cpp"; on = 1; next }
                 /^```$/ { on = 0 } on { print > f }' "$src/docs/library.md"
n=0
for snippet in "$w"/snippet*.cpp; do
  [ -f "$snippet" ] || break
  # shellcheck disable=SC2046
  g++ -O1 "$snippet" -o "${snippet%.cpp}" $(pkg-config --cflags --libs --static attend) ||
    { echo "FAIL: docs/library.md's snippet $(basename "$snippet") does not compile"; exit 1; }
  "${snippet%.cpp}" >"${snippet%.cpp}.out" ||
    { cat "${snippet%.cpp}.out"; echo "FAIL: docs/library.md's snippet $(basename "$snippet") failed its check"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 3 ] || { echo "FAIL: $n cpp snippets found in docs/library.md, expected 3"; exit 1; }
echo "docs/library.md: $n snippets compiled against the installed package and ran"
# The Debian package: built by CPack, unpacked into an empty folder (a clean prefix, not
# the build tree or the system), the examples built against what it holds.
command -v dpkg-deb >/dev/null || { echo "FAIL: dpkg-deb not found (a Debian system has it)"; exit 1; }
(cd "$w" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$w/deb" >"$w/cpack.log" 2>&1) ||
  { cat "$w/cpack.log"; echo "FAIL: cpack -G DEB"; exit 1; }
deb="$(ls "$w"/deb/attend_*.deb)"
dpkg-deb -f "$deb" Package Version Depends
# apt would install it here: every dependency it names resolves (a simulation: the test does
# not change the system; the real `apt install ./attend_*.deb` is checked by hand,
# docs/library.md).
command -v apt-get >/dev/null || { echo "FAIL: apt-get not found (a Debian system has it)"; exit 1; }
apt-get -s install "$deb" >"$w/apt.log" 2>&1 || { cat "$w/apt.log"; echo "FAIL: apt-get -s install of the .deb"; exit 1; }
grep -q '^Inst attend ' "$w/apt.log" || { cat "$w/apt.log"; echo "FAIL: apt-get -s would not install attend"; exit 1; }
echo "apt-get -s install: the .deb and its dependencies resolve"
dpkg-deb -x "$deb" "$w/root"
[ -x "$w/root/usr/bin/attend" ] || { echo "FAIL: the .deb has no /usr/bin/attend"; exit 1; }
examples "$w/root/usr" "unpacked .deb"
