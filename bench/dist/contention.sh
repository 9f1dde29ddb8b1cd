#!/bin/sh
# bench/dist/contention.sh — the machine's contention floor for 2-rank data
# parallelism: how much slower one `remat train` process gets when a second,
# independent one (no MPI, no communication) runs at the same time on the
# other core, next to the 2-rank DDP run of the same model.
#
#   sh bench/dist/contention.sh [REMAT] [REPS] [extra remat train flags...]
#   defaults: build/remat, 5. The GPT of bench/dist/scaling.sh (L=6 D=384,
#   6 heads, context 128, batch 8 per process, 1 thread per process, 10
#   steps per run); strategies none and block. Run it when nobody builds
#   (uptime load < 1): about 3 minutes on 2 quiet cores (estimated: each
#   round is 4 runs of ~5 s).
#
# Per round, interleaved (REPS rounds per strategy):
#   alone  one process pinned to core 0 (taskset -c 0);
#   pair   two processes started together, pinned to cores 0 and 1, each
#          with the same model and batch: what 2 ranks would cost if
#          they never communicated (memory bandwidth and caches shared);
#   ddp    mpirun -np 2 --bind-to core, the same flags (DDP, all-reduce).
# Printed per strategy: median step ms (min-max) of each, and
#   floor efficiency  alone / pair  (the best 2 ranks can do here),
#   ddp efficiency    alone / ddp   (what scaling.sh calls efficiency),
#   ddp over pair     ddp / pair    (what data parallelism itself adds:
#                     exposed all-reduce, bucket copies, MPI polls),
#   exposed ms        the DDP's wait for communication after backward.
# A pair's step is the mean of its two processes' medians.
#
# Environment: LAYERS WIDTH HEADS CONTEXT BATCH STEPS as in scaling.sh (a
# smoke test: LAYERS=1 WIDTH=32 HEADS=2 CONTEXT=16 BATCH=2 STEPS=3
# sh bench/dist/contention.sh build/remat 1).
remat=${1:-build/remat}; reps=${2:-5}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
L=${LAYERS:-6}; D=${WIDTH:-384}; H=${HEADS:-6}; T=${CONTEXT:-128}; B=${BATCH:-8}; S=${STEPS:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader
model="--layers $L --width $D --heads $H --context $T --batch $B --steps $S --eval-every 0 --threads 1 --quiet --json"
command -v taskset > /dev/null || { echo "contention.sh: needs taskset (util-linux)"; exit 1; }
ncpu=$(getconf _NPROCESSORS_ONLN)
[ "$ncpu" -ge 2 ] || { echo "contention.sh: needs 2 cores ($ncpu online)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t_start=$(date +%s)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; want < 1)"
for strat in none block; do
  for r in $(seq "$reps"); do
    taskset -c 0 "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.alone" || exit 1
    taskset -c 0 "$remat" train $model --checkpoint $strat "$@" > "$tmp/a" & a=$!
    taskset -c 1 "$remat" train $model --checkpoint $strat "$@" > "$tmp/b" & b=$!
    wait $a || exit 1
    wait $b || exit 1
    python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); print(json.dumps({"step_ms": (a["step_ms"]+b["step_ms"])/2}))' \
      "$tmp/a" "$tmp/b" >> "$tmp/$strat.pair" || exit 1
    mpirun --oversubscribe -np 2 --bind-to core "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.ddp" || exit 1
  done
done
python3 - "$tmp" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
def load(f): return [json.loads(l) for l in open(os.path.join(d, f))]
def med(rows, k):
    xs = [r[k] for r in rows]
    return statistics.median(xs), min(xs), max(xs)
print("strategy  alone ms (min-max)     pair ms (min-max)      ddp ms (min-max)       floor eff  ddp eff  ddp/pair  exposed ms")
for s in ("none", "block"):
    al, pa, dd = load(s + ".alone"), load(s + ".pair"), load(s + ".ddp")
    a, p, q = med(al, "step_ms"), med(pa, "step_ms"), med(dd, "step_ms")
    ex = "%10.1f" % med(dd, "comm_exposed_ms")[0] if "comm_exposed_ms" in dd[0] else "         -"
    print("%-8s %7.1f (%.1f-%.1f)  %7.1f (%.1f-%.1f)  %7.1f (%.1f-%.1f)  %9.3f  %7.3f  %8.3f  %s" % (
        s, a[0], a[1], a[2], p[0], p[1], p[2], q[0], q[1], q[2], a[0] / p[0], a[0] / q[0],
        q[0] / p[0], ex))
print("floor eff = alone / pair: two processes that never communicate; ddp eff = alone / ddp")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); took $(( $(date +%s) - t_start )) s"
