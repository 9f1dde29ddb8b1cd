#!/bin/sh
# Applies .clang-format to every C, header and CUDA C source git tracks
# (`scripts/format.sh`, or `make format`), or checks that none would change
# (`scripts/format.sh --check`, part of `make lint`: exit 1 naming the files).
# The layout is clang-format 14's (Debian bookworm's, what CI installs);
# another version may lay a few lines out differently.
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null 2>&1 || {
    echo "format.sh: clang-format not found (Debian: apt-get install clang-format)" >&2; exit 2; }
files=$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
    bad=""
    for f in $files; do
        clang-format --style=file "$f" | cmp -s - "$f" || bad="$bad $f"
    done
    if [ -n "$bad" ]; then
        echo "format.sh: these files differ from .clang-format (make format rewrites them):" >&2
        for f in $bad; do
            n=$(clang-format --style=file "$f" | diff "$f" - | grep -c '^[<>]' || true)
            echo "  $f ($n lines)" >&2
        done
        exit 1
    fi
    echo "format.sh: all $(echo "$files" | wc -l) files match .clang-format"
else
    echo "$files" | xargs clang-format --style=file -i
fi
