#!/usr/bin/env bash
# A shared build exports only what the headers mark (#pragma GCC visibility push(default));
# the rest is compiled hidden in static builds too, where readelf can see it. This checks,
# without a second (shared) build, that nothing reaches a symbol another library hides:
# no library archive and no program object refers to a global that a different archive
# defines as HIDDEN (such a reference links statically but not against the .so files).
#   hidden_refs.sh ARCHIVE... -- OBJECT...
set -euo pipefail
archives=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do archives+=("$1"); shift; done
[ $# -gt 0 ] && shift
objects=("$@")
[ "${#archives[@]}" -ge 1 ] || { echo "FAIL: no archives given"; exit 1; }
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
# Columns of readelf -sW: Num Value Size Type Bind Vis Ndx Name.
defs() { readelf -sW "$1" | awk '$5 ~ /GLOBAL|WEAK/ && $6 == "HIDDEN" && $7 != "UND" && $8 !~ /^DW\.ref\./ { print $8 }' | sort -u; }
undefs() { readelf -sW "$@" | awk '$7 == "UND" && $8 != "" { print $8 }' | sort -u; }
bad=0
for a in "${archives[@]}"; do
  [ -f "$a" ] || { echo "FAIL: no archive $a"; exit 1; }
  defs "$a" >"$w/hidden"
  for b in "${archives[@]}"; do
    [ "$b" = "$a" ] && continue
    undefs "$b" >"$w/und"
    if comm -12 "$w/hidden" "$w/und" | grep -q .; then
      echo "FAIL: $(basename "$b") uses symbols $(basename "$a") hides:"
      comm -12 "$w/hidden" "$w/und" | c++filt | head -5
      bad=1
    fi
  done
  if [ "${#objects[@]}" -gt 0 ]; then
    undefs "${objects[@]}" >"$w/und"
    if comm -12 "$w/hidden" "$w/und" | grep -q .; then
      echo "FAIL: the program objects use symbols $(basename "$a") hides:"
      comm -12 "$w/hidden" "$w/und" | c++filt | head -5
      bad=1
    fi
  fi
done
[ "$bad" = 0 ] || exit 1
echo "visibility: ${#archives[@]} archives and ${#objects[@]} objects use no hidden symbol of another library"
