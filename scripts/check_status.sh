#!/bin/sh
# scripts/check_status.sh CC FLAGS... -- SOURCES... — fails when a function
# and its declaration disagree on remat_status.
#
# remat_status is `typedef int` (include/remat/error.h), so a definition that
# says `int` where its declaration says remat_status, or an `int` function
# stored in a pointer whose type returns remat_status (a kernel table, a
# device type's callbacks), compiles silently. With REMAT_STATUS_CHECK
# defined, error.h makes remat_status a distinct integer type (long): each
# such disagreement is then a "conflicting types" or incompatible-pointer
# error. This script compiles every C source of the library that way
# (syntax only, nothing is written) and lists the errors.
#
# FLAGS are the library's include directories, definitions and options
# (CMakeLists.txt passes them, CTest `status_types`); SOURCES its sources
# (the .c ones are checked).
set -u
cc=$1
shift
flags=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in -I | -D | "") ;; *) flags="$flags '$1'" ;; esac
  shift
done
[ $# -gt 0 ] && shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bad=0
n=0
for src in "$@"; do
  case "$src" in *.c) ;; *) continue ;; esac
  n=$((n + 1))
  if ! eval "\"\$cc\" $flags" -std=c11 -fsyntax-only -w -DREMAT_STATUS_CHECK \
    -Werror=incompatible-pointer-types '"$src"' > "$out" 2>&1; then
    grep -E "error" "$out" | sed 's/^/  /'
    bad=$((bad + 1))
  fi
done
if [ "$n" -eq 0 ]; then
  echo "check_status: no C sources given"
  exit 2
fi
if [ "$bad" -ne 0 ]; then
  echo "check_status: $bad of $n files disagree with their declarations on remat_status"
  echo "(say remat_status in the definition, or in the pointer type, where the value is a status)"
  exit 1
fi
echo "check_status: $n files, every status function agrees with its declaration"
