#!/bin/sh
# bench/dist/scaling.sh — data-parallel scaling of `remat train` on this
# machine, and PyTorch DDP (gloo) on the same model and strategy, in one run:
#
#   sh bench/dist/scaling.sh [REMAT] [REPS] [N] [extra remat train flags...]
#   defaults: build/remat, 5, 2. The GPT L=6 D=384, 6 heads, context 128,
#   batch 8 per rank, 1 thread per rank, 10 steps per run; strategies none
#   and block (non-reentrant per-block checkpointing in both programs).
#   About 3-4 minutes on 2 quiet cores (estimated from a step's ~0.6 s of
#   CPU); run it when nobody builds (uptime load < 1).
#
# remat: 1 process (no mpirun: no DDP) and N ranks interleaved (1, N, 1,
# N, ...), REPS runs each,
# medians and ranges of the runs' --json figures. PyTorch
# (bench/pytorch/ddp_torch.py, Debian's python3-torch): one run of --world 1
# and one of --world N per strategy, median step over the steps after the
# first. Printed per strategy and program:
#   step ms, global tokens/s, scaling efficiency = tokens/s(N) / (N *
#   tokens/s(1)), all-reduce ms per step and the fraction of it hidden
#   behind backward (remat: 1 - waited after backward / first bucket start
#   to last bucket done), peak memory per rank (remat: allocator bytes and
#   RSS, max over ranks; PyTorch: RSS (VmHWM), max over ranks), the
#   step-time ratio remat / PyTorch at N ranks, and the share of buckets
#   whose reduction completed while backward still ran (Open MPI progresses
#   non-blocking collectives only inside MPI calls: remat polls at each
#   gradient accumulation; a low share with a high exposed time means the
#   reductions waited for the end).
#
# Environment: LAYERS WIDTH HEADS CONTEXT BATCH STEPS change the model and
# the run length (a smoke test: LAYERS=1 WIDTH=32 HEADS=2 CONTEXT=16
# BATCH=2 STEPS=3 sh bench/dist/scaling.sh build/remat 1); TORCH=0 skips
# PyTorch; PYTHON (default /usr/bin/python3, Debian's python3-torch).
remat=${1:-build/remat}; reps=${2:-5}; n=${3:-2}
if [ $# -ge 3 ]; then shift 3; else shift $#; fi
L=${LAYERS:-6}; D=${WIDTH:-384}; H=${HEADS:-6}; T=${CONTEXT:-128}; B=${BATCH:-8}; S=${STEPS:-10}
py=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl=self,vader
model="--layers $L --width $D --heads $H --context $T --batch $B --steps $S --eval-every 0 --threads 1 --quiet --json"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t_start=$(date +%s)
# the single-rank baseline is a plain process (no mpirun, no DDP), on one core
pin1=; command -v taskset > /dev/null && pin1="taskset -c 0"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; want < 1)"
for strat in none block; do
  for r in $(seq "$reps"); do
    $pin1 "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.1" || exit 1
    mpirun --oversubscribe -np "$n" --bind-to core "$remat" train $model --checkpoint $strat "$@" >> "$tmp/$strat.$n" || exit 1
  done
  if [ "${TORCH:-1}" != 0 ]; then
    port=29531
    for w in 1 "$n"; do
      port=$((port + 1 + ${#strat}))
      "$py" bench/pytorch/ddp_torch.py --world "$w" --checkpoint $strat --layers $L --width $D \
        --heads $H --context $T --batch $B --steps $((S + 1)) --port $port >> "$tmp/torch.$strat.$w" || exit 1
    done
  fi
done
python3 - "$tmp" "$n" <<'PY'
import json, os, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
def load(f):
    p = os.path.join(d, f)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
def med(xs): return statistics.median(xs), min(xs), max(xs)
MiB = 2.0 ** 20
print("strategy program ranks  step ms (min-max)         global tok/s (min-max)    efficiency  comm ms  hidden  peak/rank: alloc MiB  RSS MiB")
ratios, done = [], []
for s in ("none", "block"):
    one, many = load(s + ".1"), load("%s.%d" % (s, n))
    t1 = med([r["tokens_per_s"] for r in one])
    for rows in (one, many):
        st = med([r["step_ms"] for r in rows]); t = med([r["tokens_per_s"] for r in rows])
        eff = t[0] / (rows[0]["world_size"] * t1[0])
        hid = "%5.0f%%" % (100 * med([r["comm_hidden_fraction"] for r in rows])[0]) if "comm_hidden_fraction" in rows[0] else "     -"
        comm = "%7.1f" % med([r["comm_ms"] for r in rows])[0] if "comm_ms" in rows[0] else "      -"
        if "comm_done_in_backward" in rows[0]:
            done.append("%s %d ranks: %.0f%%" % (s, rows[0]["world_size"], 100 * med([r["comm_done_in_backward"] for r in rows])[0]))
        print("%-8s remat   %5d  %8.1f (%.1f-%.1f)  %9.0f (%.0f-%.0f)  %10.3f  %s  %s  %20.1f  %7.1f" % (
            s, rows[0]["world_size"], st[0], st[1], st[2], t[0], t[1], t[2], eff, comm, hid,
            max(r["peak_alloc_bytes"] for r in rows) / MiB, max(r["peak_rss_bytes"] for r in rows) / MiB))
    p1, pn = load("torch.%s.1" % s), load("torch.%s.%d" % (s, n))
    if p1 and pn:
        for r in (p1[0], pn[0]):
            print("%-8s pytorch %5d  %8.1f                %9.0f                %10.3f        -       -  %20s  %7.1f" % (
                s, r["world_size"], r["step_ms"], r["tokens_per_s"],
                r["tokens_per_s"] / (r["world_size"] * p1[0]["tokens_per_s"]), "-",
                max(r["peak_rss_bytes_per_rank"]) / MiB))
        ratios.append("%s %.2f" % (s, statistics.median([r["step_ms"] for r in many]) / pn[0]["step_ms"]))
if done:
    print("buckets whose reduction completed before backward ended (MPI progress): " + ", ".join(done))
if ratios:
    print("step time remat / PyTorch DDP at %d ranks: %s (< 1: remat faster)" % (n, ", ".join(ratios)))
print("targets (issue 16): efficiency >= 0.9 and >= 80%% hidden at %d ranks, for none and block" % n)
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); took $(( $(date +%s) - t_start )) s"
