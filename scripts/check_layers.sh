#!/bin/sh
# scripts/check_layers.sh SRC_DIR OBJ_DIR — fails when a lower layer of the
# library references a symbol defined in a higher one.
#
# Layers only point down:
#   0 core      src/*.c, src/dispatch/ (kernel table, interception bracket),
#               src/backends/ (the device types' kernels)
#   1 autograd  src/autograd/
#   2 ops       src/ops/ (the op descriptors, their driver, the registry)
#   3 top       src/checkpoint/, src/sac/, src/planner/ and any other
#               directory of src/ (optimizers, distributed training, ...)
# OBJ_DIR is the library's CMake object directory for src/
# (build/CMakeFiles/remat_objects.dir/src). Private headers are checked the same way
# (a file includes headers of its layer or below). Known exceptions, each
# with its reason, are listed in scripts/layers.allow as "user-file symbol"
# or "user-file included-header".
set -eu
src=$(cd "$1" && pwd)
obj=$2
allow=$(dirname "$0")/layers.allow

layer_of() {
  case "$1" in
    internal.h) echo 2 ;;          # core, autograd and ops headers at once
    dispatch/dispatch.h) echo 2 ;; # op descriptors: the ops layer's header
    dispatch/*|backends/*) echo 0 ;;
    autograd/*) echo 1 ;;
    ops/*) echo 2 ;;
    */*) echo 3 ;;
    *) echo 0 ;;
  esac
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/allow"
grep -v '^[[:space:]]*#' "$allow" 2>/dev/null | awk 'NF >= 2 {print $1, $2}' > "$tmp/allow" || true
bad=0
# Headers: a file may include private headers of its own layer or below.
for f in $(cd "$src" && find . -name '*.[ch]' | sed 's|^\./||' | sort); do
  l=$(layer_of "$f")
  dir=$(dirname "$f")
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src/$f"); do
    case "$inc" in remat/*) continue ;; esac
    target=$(realpath -m --relative-to="$src" "$src/$dir/$inc")
    tl=$(layer_of "$target")
    if [ "$tl" -gt "$l" ] && ! grep -q "^$f $target\$" "$tmp/allow" 2>/dev/null; then
      echo "$f (layer $l) includes $target (layer $tl)"
      bad=1
    fi
  done
done
: > "$tmp/defs"
: > "$tmp/uses"
for c in $(cd "$src" && find . -name '*.c' | sed 's|^\./||' | sort); do
  o="$obj/$c.o"
  [ -f "$o" ] || continue # a source this configuration does not build (e.g. dist without MPI)
  l=$(layer_of "$c")
  nm -g --defined-only "$o" | awk -v l="$l" -v f="$c" 'NF >= 3 {print $3, l, f}' >> "$tmp/defs"
  nm -u "$o" | awk -v l="$l" -v f="$c" '{print $NF, l, f}' >> "$tmp/uses"
done
awk '
  FILENAME == ARGV[1] { allowed[$1 " " $2] = 1; next }
  FILENAME == ARGV[2] { def_layer[$1] = $2; def_file[$1] = $3; next }
  ($1 in def_layer) && def_layer[$1] > $2 {
    if (($3 " " $1) in allowed) next
    printf "%s (layer %d) uses %s from %s (layer %d)\n", $3, $2, $1, def_file[$1], def_layer[$1]
    bad = 1
  }
  END { exit bad }
' "$tmp/allow" "$tmp/defs" "$tmp/uses" || bad=1
if [ "$bad" -ne 0 ]; then
  echo "check_layers: a lower layer references a higher one (see the layers in $0)"
  exit 1
fi
n=$(wc -l < "$tmp/defs")
if [ "$n" -lt 100 ]; then echo "check_layers: only $n symbols found under $obj: not the library's objects?"; exit 2; fi
echo "check_layers: layers point down ($n symbols checked)"
