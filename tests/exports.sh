#!/bin/sh
# tests/exports.sh LIB INCLUDE_DIR — the shared library exports exactly the
# public API: every defined dynamic symbol is named remat_* (or REMAT_*), and
# every function a public header declares is among them.
set -eu
lib=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u > "$tmp/exported"
grep -Ev '^(remat_|REMAT_)' "$tmp/exported" > "$tmp/foreign" || true
if [ -s "$tmp/foreign" ]; then
  echo "exports.sh: $lib exports names outside remat_*/REMAT_*:"
  head -50 "$tmp/foreign"
  exit 1
fi
# declarations: "remat_name(" at the start of a declarator, after a type
cat "$inc"/*.h | grep -oE '^[A-Za-z_][A-Za-z0-9_ *]*[ *](remat_[a-z0-9_]+)\(' |
  grep -oE 'remat_[a-z0-9_]+\($' | tr -d '(' | sort -u > "$tmp/declared"
comm -23 "$tmp/declared" "$tmp/exported" > "$tmp/missing"
if [ -s "$tmp/missing" ]; then
  echo "exports.sh: declared in $inc but not exported by $lib:"
  cat "$tmp/missing"
  exit 1
fi
echo "exports.sh: $(wc -l < "$tmp/exported") symbols exported, all remat_*; $(wc -l < "$tmp/declared") declared functions all exported"
