#!/bin/sh
# tests/exports.sh SHARED_LIB INCLUDE_DIR [STATIC_LIB] — the libraries define
# exactly the public API as global names: every defined dynamic symbol of
# the shared library, and every defined global symbol of the static one
# (cmake/localize.cmake), is named remat_* (or REMAT_*), and every function
# a public header declares is among them.
set -eu
lib=$1 inc=$2 static=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# declarations: "remat_name(" at the start of a declarator, after a type
cat "$inc"/*.h | grep -oE '^[A-Za-z_][A-Za-z0-9_ *]*[ *](remat_[a-z0-9_]+)\(' |
  grep -oE 'remat_[a-z0-9_]+\($' | tr -d '(' | sort -u > "$tmp/declared"
# check NAME FILE_OF_SYMBOLS
check() {
  grep -Ev '^(remat_|REMAT_)' "$2" > "$tmp/foreign" || true
  if [ -s "$tmp/foreign" ]; then
    echo "exports.sh: $1 defines global names outside remat_*/REMAT_*:"
    head -50 "$tmp/foreign"
    exit 1
  fi
  comm -23 "$tmp/declared" "$2" > "$tmp/missing"
  if [ -s "$tmp/missing" ]; then
    echo "exports.sh: declared in $inc but not defined globally by $1:"
    cat "$tmp/missing"
    exit 1
  fi
  echo "exports.sh: $1: $(wc -l < "$2") global symbols, all remat_*; $(wc -l < "$tmp/declared") declared functions all there"
}
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u > "$tmp/shared"
check "$lib" "$tmp/shared"
if [ -n "$static" ]; then
  # "name.o:" member lines and blank lines have fewer than 3 fields
  nm -g --defined-only "$static" | awk 'NF >= 3 {print $3}' | sort -u > "$tmp/static"
  check "$static" "$tmp/static"
fi
# The soname follows the ABI (remat/version.h): libremat.so.0.MINOR while the
# major version is 0, libremat.so.MAJOR after.
v() { sed -n "s/^#define REMAT_VERSION_$1 \([0-9]*\)$/\1/p" "$inc/version.h"; }
major=$(v MAJOR) minor=$(v MINOR)
if [ "$major" = 0 ]; then want=libremat.so.0.$minor; else want=libremat.so.$major; fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "$want" ]; then
  echo "exports.sh: $lib has soname '$soname'; remat/version.h says $want"
  exit 1
fi
echo "exports.sh: soname $soname"
