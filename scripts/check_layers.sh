#!/bin/sh
# scripts/check_layers.sh SRC_DIR OBJ_DIR — fails when a file of the library
# reaches above its layer or into a backend.
#
# Each folder of src/ has a layer (scripts/layers.map: core and backends 0,
# autograd 1, ops 2, the features above 3). Two rules, checked on the
# private headers a file includes and on the symbols its object uses:
#  1. layers only point down: a file may use its own layer or lower ones;
#  2. the backend boundary: what a backend (src/backends/NAME/) defines is
#     used only inside that backend; everyone else reaches it through the
#     backend's registration: its one record (src/core/backend.h: device
#     vtable, kernel rows, transfer ops), rm_backend_NAME, which only the
#     list of built-in backends (src/backends/backends.c) names.
# OBJ_DIR is the library's CMake object directory for src/
# (build/CMakeFiles/remat_objects.dir/src). Known exceptions, each with its
# reason, are listed in scripts/layers.allow as "user-file symbol" or
# "user-file included-header".
set -eu
src=$(cd "$1" && pwd)
obj=$2
here=$(dirname "$0")
allow=$here/layers.allow
map=$here/layers.map

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^[[:space:]]*#' "$map" | awk 'NF >= 2 && $2 ~ /^[0-9]+$/ {print $1, $2}' > "$tmp/map"
: > "$tmp/allow"
grep -v '^[[:space:]]*#' "$allow" 2>/dev/null | awk 'NF >= 2 {print $1, $2}' > "$tmp/allow" || true

# layer_of PATH (relative to src/): its top folder's layer; "" when unmapped.
layer_of() {
  awk -v d="${1%%/*}" '$1 == d {print $2; exit}' "$tmp/map"
}
# owner_of PATH: "backends/NAME" for a file of a backend, else "".
owner_of() {
  case "$1" in backends/*/*) echo "$1" | cut -d/ -f1-2 ;; *) echo "" ;; esac
}

bad=0
for d in $(cd "$src" && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\./||' | sort); do
  if [ -z "$(layer_of "$d/x")" ]; then
    echo "src/$d/ has no layer: add a line for it to $map"
    bad=1
  fi
done
for f in $(cd "$src" && find . -mindepth 1 -maxdepth 1 -type f -name '*.[ch]' | sed 's|^\./||'); do
  echo "src/$f lies outside every layer's folder: move it into one (see $map)"
  bad=1
done

# Headers: an include is spelled from the file's folder or from src/.
for f in $(cd "$src" && find . -mindepth 2 -name '*.[ch]' -o -mindepth 2 -name '*.cu' -o -mindepth 2 -name '*.cuh' |
           sed 's|^\./||' | sort); do
  l=$(layer_of "$f")
  [ -n "$l" ] || continue
  own=$(owner_of "$f")
  dir=$(dirname "$f")
  for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include "\([^"]*\)".*/\1/p' "$src/$f"); do
    case "$inc" in remat/*) continue ;; esac
    if [ -e "$src/$dir/$inc" ]; then
      target=$(realpath -m --relative-to="$src" "$src/$dir/$inc")
    else
      target=$inc
    fi
    grep -q "^$f $target\$" "$tmp/allow" && continue
    tl=$(layer_of "$target")
    if [ -n "$tl" ] && [ "$tl" -gt "$l" ]; then
      echo "$f (layer $l) includes $target (layer $tl)"
      bad=1
    fi
    towner=$(owner_of "$target")
    if [ -n "$towner" ] && [ "$towner" != "$own" ]; then
      echo "$f includes $target, inside the backend $towner"
      bad=1
    fi
  done
done

# Symbols: nm over the objects; "symbol layer file owner" rows.
: > "$tmp/defs"
: > "$tmp/uses"
for o in $(cd "$obj" && find . -name '*.o' | sed 's|^\./||' | sort); do
  c=${o%.o}
  l=$(layer_of "$c")
  [ -n "$l" ] || continue
  own=$(owner_of "$c")
  [ -n "$own" ] || own=-
  nm -g --defined-only "$obj/$o" | awk -v l="$l" -v f="$c" -v w="$own" 'NF >= 3 {print $3, l, f, w}' >> "$tmp/defs"
  nm -u "$obj/$o" | awk -v l="$l" -v f="$c" -v w="$own" '{print $NF, l, f, w}' >> "$tmp/uses"
done
awk '
  FILENAME == ARGV[1] { allowed[$1 " " $2] = 1; next }
  FILENAME == ARGV[2] { def_layer[$1] = $2; def_file[$1] = $3; def_owner[$1] = $4; next }
  !($1 in def_layer) { next }
  (($3 " " $1) in allowed) { next }
  def_layer[$1] > $2 {
    printf "%s (layer %d) uses %s from %s (layer %d)\n", $3, $2, $1, def_file[$1], def_layer[$1]
    bad = 1
  }
  def_owner[$1] != "-" && def_owner[$1] != $4 && !($3 == "backends/backends.c" && $1 ~ /^rm_backend_/) {
    printf "%s uses %s from %s, inside the backend %s\n", $3, $1, def_file[$1], def_owner[$1]
    bad = 1
  }
  END { exit bad }
' "$tmp/allow" "$tmp/defs" "$tmp/uses" || bad=1
if [ "$bad" -ne 0 ]; then
  echo "check_layers: see the rules in $0 and the layers in $map"
  exit 1
fi
n=$(wc -l < "$tmp/defs")
if [ "$n" -lt 100 ]; then echo "check_layers: only $n symbols found under $obj: not the library's objects?"; exit 2; fi
echo "check_layers: layers point down, backends are reached through their registration ($n symbols checked)"
