#!/bin/sh
# bench/dist/scaling.sh — data-parallel scaling of `remat train` on this
# machine: 1 rank x 1 thread against N ranks x 1 thread, same per-rank batch,
# runs interleaved (1, N, 1, N, ...), medians and ranges of the JSON figures.
#
#   sh bench/dist/scaling.sh [REMAT] [REPS] [N] [extra remat train flags...]
#   defaults: build/remat, 5, 2; the GPT L=6 D=384, 6 heads, context 128,
#   batch 8 per rank, 12 steps per run (the first, learning step included
#   in nothing but the step-time median's sample).
#
# Prints, per strategy, step ms, global tokens/s, scaling efficiency =
# tokens/s(N) / (N * tokens/s(1)), all-reduce ms per step and the fraction
# of it hidden behind backward. Run it on a quiet machine (uptime load < 1).
remat=${1:-build/remat}; reps=${2:-5}; n=${3:-2}
shift 3 2>/dev/null || shift $#
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader
model="--layers 6 --width 384 --heads 6 --context 128 --batch 8 --steps 12 --eval-every 0 --threads 1 --quiet --json"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for strat in none block; do
  for r in $(seq "$reps"); do
    mpirun --oversubscribe -np 1 --bind-to core "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.1" || exit 1
    mpirun --oversubscribe -np "$n" --bind-to core "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.$n" || exit 1
  done
done
python3 - "$tmp" "$n" <<'PY'
import json, os, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
def load(f): return [json.loads(l) for l in open(os.path.join(d, f))]
def med(xs): return statistics.median(xs), min(xs), max(xs)
print("strategy  ranks  step ms (min-max)       tokens/s (min-max)        efficiency  all-reduce ms  hidden")
for s in ("none", "block"):
    one, many = load(s + ".1"), load("%s.%d" % (s, n))
    t1 = med([r["tokens_per_s"] for r in one]); tn = med([r["tokens_per_s"] for r in many])
    for rows, t in ((one, t1), (many, tn)):
        st = med([r["step_ms"] for r in rows])
        comm = med([r.get("comm_ms", 0) for r in rows]); hid = med([r.get("comm_hidden_fraction", 0) for r in rows])
        eff = t[0] / (rows[0]["world_size"] * t1[0])
        print("%-9s %5d  %7.1f (%.1f-%.1f)  %9.0f (%.0f-%.0f)  %10.3f  %8.1f  %6.0f%%" % (
            s, rows[0]["world_size"], st[0], st[1], st[2], t[0], t[1], t[2], eff, comm[0], 100 * hid[0]))
    print("%-9s peak alloc per rank: 1 rank %.1f MiB, %d ranks %.1f MiB (max over ranks)" % (
        s, one[0]["peak_alloc_bytes"] / 2**20, n, many[0]["peak_alloc_bytes"] / 2**20))
PY
