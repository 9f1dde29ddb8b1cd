#!/bin/sh
# tests/autocast_train.sh REMAT — bf16 autocast trains the built-in GPT task like f32 (issue
# 19): 300 steps in f32 and under --autocast bf16 (same seeds, same data) for seeds 1-8.
#
# Two claims, each where it can be tested without drawing on luck:
#
# 1. While the two trajectories coincide (steps 20-60), bf16 learns as fast as f32: every
#    seed's mean training loss over those steps within 1% of f32's. Measured (AMD EPYC,
#    AVX2, 2026-11-28, seeds 1-12): within 0.12%. A bf16 path that rounds where it must
#    accumulate, or drops a cast, shows here first.
#
# 2. The final loss (mean training loss of the last 30 steps) is no worse than f32's beyond
#    the training noise: the mean over the 8 seeds of (bf16 - f32) / f32 at most 2% plus two
#    standard errors of that mean (from the 8 paired differences). Why the noise term: from
#    ~step 60 bf16's rounding has moved the trajectory enough that it behaves like another
#    draw of the training noise (which batches happen to be learned when), and one seed's
#    final loss then differs from f32's by a few percent either way — seeds 1-12 on an AVX2
#    EPYC, Release: standard deviation 3.4%, from -6.0% to +7.7%, mean -0.3%. The old test
#    (3 seeds, a flat 2% limit) failed by such a draw about once in eight builds or CPUs
#    (the -O1 ASan build on that EPYC drew +4.2%). With 8 seeds the limit is ~4.5% where
#    the draws spread like that, and tighter where they agree; an autocast that trains
#    systematically worse (by 5% and more) still fails it.
#
# One-sided: what autocast promises is that bf16 trains no worse than f32 beyond its
# rounding. How much *better* a run ends is the same trajectory noise, and it depends on the
# CPU: the GEMMs' summation order is the kernel's (AMX, AVX512_BF16, the f32 fallback under
# AVX2), so each CPU draws other trajectories.
set -eu
REMAT=$1
SEEDS="1 2 3 4 5 6 7 8"
TMP=${TMPDIR:-/tmp}/remat_autocast_train.$$
trap 'rm -f "$TMP".*' EXIT
# mean_loss LOG FIRST LAST: the mean training loss of steps FIRST..LAST (1-based, inclusive)
mean_loss() {
    grep -o '"loss":[0-9.e+-]*' "$1" | cut -d: -f2 | awk -v a="$2" -v b="$3" '
        NR >= a && NR <= b { s += $1; n++ }
        END { if (n == b - a + 1) printf "%.6f", s / n; else print "missing" }'
}
early=""
final=""
# run SEED AUTOCAST: one training run, on one thread (the two runs of a seed go side by side:
# this small model trains faster on 1 thread than on 2, 2.6 against 3.2 s on a 2-core EPYC)
run() {
    "$REMAT" train --steps 300 --seed "$1" --quiet --log "$TMP.$1.$2" --autocast "$2" \
        --threads 1 >/dev/null 2>&1
}
for seed in $SEEDS; do
    run "$seed" off &
    pid=$!
    run "$seed" bf16
    wait "$pid"
    e32=$(mean_loss "$TMP.$seed.off" 20 60)
    e16=$(mean_loss "$TMP.$seed.bf16" 20 60)
    f32=$(mean_loss "$TMP.$seed.off" 271 300)
    f16=$(mean_loss "$TMP.$seed.bf16" 271 300)
    case "$e32 $e16 $f32 $f16" in *missing*) echo "seed $seed: a run did not log 300 steps"; exit 1 ;; esac
    echo "seed $seed: mean loss of steps 20-60: f32 $e32, bf16 $e16; of the last 30: f32 $f32, bf16 $f16"
    early="$early $e32 $e16"
    final="$final $f32 $f16"
done
# claim 1: every seed, steps 20-60
echo "$early" | awk '{
    bad = 0
    for (i = 1; i < NF; i += 2) {
        d = ($(i + 1) - $i) / $i
        if (d < 0) d = -d
        if (!($i > 0) || d > 0.01) { printf "seed %d: steps 20-60 differ by %.4f (limit 0.01)\n", (i + 1) / 2, d; bad = 1 }
    }
    if (!bad) print "steps 20-60: bf16 within 1% of f32 for every seed"
    exit bad }'
# claim 2: the final loss, mean of the paired relative differences with its standard error
echo "$final" | awk '{
    n = 0
    for (i = 1; i < NF; i += 2) { if (!($i > 0 && $(i + 1) > 0)) exit 1; d[++n] = ($(i + 1) - $i) / $i; s += d[n] }
    m = s / n
    for (k = 1; k <= n; k++) v += (d[k] - m) ^ 2
    se = sqrt(v / (n - 1) / n)
    lim = 0.02 + 2 * se
    printf "last 30 steps over %d seeds: bf16 above f32 by %.4f on average (standard error %.4f; limit 0.02 + 2 x %.4f = %.4f)\n", n, m, se, se, lim
    exit !(m <= lim) }'
