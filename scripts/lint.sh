#!/bin/bash
# `make lint`: clang-tidy (checks in .clang-tidy, src/backends/cpu/.clang-tidy) over every src/*.c
# and every tools/ and bench/ file the build compiles (those in compile_commands.json: the
# programs, benchmarks and preload libraries; not the hand-built bench/cuda or bench/dist
# mains), with the compile flags of a CMake build's compile_commands.json. Exits non-zero on
# any finding.
# Usage: scripts/lint.sh [build-dir] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-lint}
jobs=${2:-2}
cmake -S . -B "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_C_COMPILER=clang \
  -DREMAT_BUILD_TESTS=OFF >/dev/null
log="$build/lint.log"
list="$build/lint.files"
root=$(pwd)
find src -name '*.c' >"$list"
grep -o '"file": *"[^"]*\.c"' "$build/compile_commands.json" | sed 's/^"file": *"//; s/"$//' |
  sed "s|^$root/||" | grep -E '^(tools|bench)/' | sort -u >>"$list"
n=$(wc -l <"$list")
# clang-tidy also prints "N warnings generated." for the (suppressed) findings in system
# headers; the log keeps everything, the terminal gets the findings only.
if sort "$list" | tr '\n' '\0' | xargs -0 -P "$jobs" -n 4 clang-tidy -p "$build" --quiet >"$log" 2>&1; then
  echo "lint: clang-tidy found nothing in $n files under src/, tools/ and bench/"
else
  grep -v 'warnings\? generated\.$' "$log" || true
  echo "lint: clang-tidy findings above (checks: .clang-tidy; full log: $log)" >&2
  exit 1
fi
