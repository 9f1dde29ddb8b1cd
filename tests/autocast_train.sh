#!/bin/sh
# tests/autocast_train.sh REMAT — 300 steps of the built-in GPT task in f32 and under
# --autocast bf16 (seed 1, same data): the final loss under autocast must be within 2% of
# f32's (issue 19). "Final loss" is the mean training loss of the last 30 steps (one step's
# loss moves by ~10% from batch to batch here). Other seeds: docs/autocast.md.
set -eu
REMAT=$1
TMP=${TMPDIR:-/tmp}/remat_autocast_train.$$
trap 'rm -f "$TMP".*' EXIT
final() {
    "$REMAT" train --steps 300 --seed 1 --quiet --log "$TMP.$1" --autocast "$1" >/dev/null 2>&1
    grep -o '"loss":[0-9.e+-]*' "$TMP.$1" | tail -n 30 | cut -d: -f2 |
        awk '{ s += $1; n++ } END { if (n == 30) printf "%.6f", s / n; else print "missing" }'
}
f32=$(final off)
bf16=$(final bf16)
echo "mean loss of the last 30 of 300 steps: f32 $f32, bf16 autocast $bf16"
awk -v a="$f32" -v b="$bf16" 'BEGIN {
    d = (b - a) / a; if (d < 0) d = -d
    printf "relative difference %.4f (limit 0.02)\n", d
    exit !(a > 0 && b > 0 && d <= 0.02) }'
