#!/bin/sh
# tests/autocast_train.sh REMAT — 300 steps of the built-in GPT task in f32 and under
# --autocast bf16 (same seeds, same data) for seeds 1, 2 and 3: the final loss under
# autocast, averaged over the seeds, must be at most 2% above f32's (issue 19). "Final loss"
# is the mean training loss of the last 30 steps of a run (one step's loss moves by ~10%
# from batch to batch here).
#
# Why several seeds: bf16's rounding perturbs the trajectory, which on this small model
# parts from f32's after ~100 steps and then behaves like another draw of the training
# noise. One run's final loss then moves by a few percent either way — as much as f32's
# own final loss moves from seed to seed (seeds 1-8: 0.811 to 0.852, 2.5% around the
# mean). Seeds 1-8 one by one: bf16 - f32 = -0.2, -4.3, +2.8, -0.4, -0.8, 0.0, -0.7, +2.7%;
# any three consecutive seeds averaged: within 0.7%; all eight: -0.1%. A single seed
# within 2% would hold or fail by the seed's luck; three seeds test the claim.
#
# One-sided: what autocast promises is that bf16 trains no worse than f32 beyond its
# rounding. How much *better* a run ends is the same trajectory noise, and it depends on
# the CPU: the GEMMs' summation order is the kernel's (AMX, AVX512_BF16, the f32 fallback
# under AVX2), so each CPU draws other trajectories; on an AMX machine the three seeds
# averaged more than 2% below f32, which a two-sided limit failed.
set -eu
REMAT=$1
TMP=${TMPDIR:-/tmp}/remat_autocast_train.$$
trap 'rm -f "$TMP".*' EXIT
final() { # final SEED AUTOCAST
    "$REMAT" train --steps 300 --seed "$1" --quiet --log "$TMP.$1.$2" --autocast "$2" >/dev/null 2>&1
    grep -o '"loss":[0-9.e+-]*' "$TMP.$1.$2" | tail -n 30 | cut -d: -f2 |
        awk '{ s += $1; n++ } END { if (n == 30) printf "%.6f", s / n; else print "missing" }'
}
sf=0
sb=0
for seed in 1 2 3; do
    f32=$(final "$seed" off)
    bf16=$(final "$seed" bf16)
    echo "seed $seed: mean loss of the last 30 of 300 steps: f32 $f32, bf16 autocast $bf16"
    case "$f32 $bf16" in *missing*) echo "a run did not log 300 steps"; exit 1 ;; esac
    sf=$(awk -v s="$sf" -v x="$f32" 'BEGIN { printf "%.6f", s + x }')
    sb=$(awk -v s="$sb" -v x="$bf16" 'BEGIN { printf "%.6f", s + x }')
done
awk -v a="$sf" -v b="$sb" 'BEGIN {
    d = (b - a) / a
    printf "over seeds 1-3: f32 %.4f, bf16 %.4f, bf16 above f32 by %.4f (limit 0.02)\n", a / 3, b / 3, d
    exit !(a > 0 && b > 0 && d <= 0.02) }'
