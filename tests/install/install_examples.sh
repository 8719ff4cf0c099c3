#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds every examples/* project against
# it, as a user would: only -DCMAKE_PREFIX_PATH=PREFIX, nothing from the source or build
# tree. Then runs each example (each exits non-zero when its own check fails), checks that
# `attend --version` and the package's version agree, that an internal header
# (io/hdf5_file.h) was not installed, compiles one example with pkg-config's flags,
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
for internal in io/hdf5_file.h tensor/kernels; do
  if [ -e "$prefix/include/attend/$internal" ]; then
    echo "FAIL: the internal $internal was installed"; exit 1
  fi
done
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
# pkg-config: the same example compiled by hand with the .pc file's flags.
command -v pkg-config >/dev/null ||
  { echo "FAIL: pkg-config not found (scripts/setup.sh installs it)"; exit 1; }
export PKG_CONFIG_PATH="$(echo "$prefix"/lib*/pkgconfig)"
# shellcheck disable=SC2046
g++ -O1 "$src/examples/custom_op/main.cpp" -o "$w/op_pc" $(pkg-config --cflags --libs --static attend)
"$w/op_pc" >/dev/null || { echo "FAIL: the pkg-config build of custom_op failed its check"; exit 1; }
echo "pkg-config: custom_op compiled with attend.pc's flags and ran"
# The Debian package: built by CPack, unpacked into an empty folder (a clean prefix, not
# the build tree or the system), the examples built against what it holds.
command -v dpkg-deb >/dev/null || { echo "FAIL: dpkg-deb not found (a Debian system has it)"; exit 1; }
(cd "$w" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$w/deb" >"$w/cpack.log" 2>&1) ||
  { cat "$w/cpack.log"; echo "FAIL: cpack -G DEB"; exit 1; }
deb="$(ls "$w"/deb/attend_*.deb)"
dpkg-deb -f "$deb" Package Version Depends
dpkg-deb -x "$deb" "$w/root"
[ -x "$w/root/usr/bin/attend" ] || { echo "FAIL: the .deb has no /usr/bin/attend"; exit 1; }
examples "$w/root/usr" "unpacked .deb"
