#!/bin/sh
# bench/autocast.sh — bf16 autocast against f32, side by side in one run: remat bench
# (--autocast off / bf16, strategies none and block) and PyTorch's torch.autocast('cpu',
# bfloat16) on the same model (bench/pytorch/bench_torch.py), at 1 and 2 threads, ROUNDS
# interleaved rounds of REPS timed repetitions each. GPT L=6 D=384 H=6 T=256 B=8
# (AUTOCAST_MODEL="--model gpt --layers 2 ..." overrides the model flags).
#
# Prints every round's raw lines, then a summary per threads x strategy: step time medians
# over all repetitions of all rounds with their IQR and min-max, remat's exact allocator
# bytes (step = what the step adds over the memory held before it; peak = with the
# parameters; act = activation bytes, step bytes minus the parameter gradients live at the
# step's peak, f32 in both runs: docs/autocast.md "Memory"), PyTorch's RSS growth during its
# step, and the ratios the issue asks for: remat bf16 / remat f32 step time (<= 0.65) and
# activation bytes (<= 0.6; step bytes beside them), remat bf16 / PyTorch
# bf16 step time (<= 0.6) and remat's peak step bytes against PyTorch's RSS+. Each time ratio
# is given twice: of the medians over all rounds, and as the median (min-max) of per-round
# ratios, whose two sides ran back to back in one round (drift in load over the run cancels).
# Timings mean something only on an otherwise idle machine; the bytes are exact anyway.
# Usage: [PY=venv/bin/python] bench/autocast.sh [ROUNDS] [REPS]   (repository root, after make build;
# PY picks the PyTorch, /usr/bin/python3 by default)
set -eu
ROUNDS=${1:-3}
REPS=${2:-5}
M=${AUTOCAST_MODEL:-"--model gpt --layers 6 --width 384 --heads 6 --context 256 --batch 8"}
PY=${PY:-/usr/bin/python3}   # PY=/path/to/venv/bin/python: a PyTorch 2.x
OUT=${TMPDIR:-/tmp}/remat_autocast_bench.$$
trap 'rm -f "$OUT"' EXIT
: >"$OUT"
grep -m1 "model name" /proc/cpuinfo
grep -qw avx512_bf16 /proc/cpuinfo && echo "cpu flags: avx512_bf16" || echo "cpu flags: no avx512_bf16"
TORCH_VERSION=$($PY -c 'import torch; print(torch.__version__)')
export TORCH_VERSION
echo "PyTorch $TORCH_VERSION ($PY)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); rounds $ROUNDS, reps $REPS; $M"
for r in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do
    for ac in off bf16; do
      echo "== round $r, $t thread(s), autocast $ac"
      ./build/remat bench $M --threads "$t" --strategies none,block --reps "$REPS" --autocast "$ac" \
        --json 2>/dev/null | sed "s/^/remat $t $ac $r /" >>"$OUT"
      $PY bench/pytorch/bench_torch.py $M --threads "$t" --strategies none,block \
        --reps "$REPS" --autocast "$ac" --json 2>/dev/null | sed "s/^/torch $t $ac $r /" >>"$OUT"
      tail -n 2 "$OUT" | $PY -c '
import json, sys
for line in sys.stdin:
    who, t, ac, rnd, doc = line.split(" ", 4)
    for s in json.loads(doc)["strategies"]:
        mem = ("step %6.1f MiB  act %6.1f MiB  peak %6.1f MiB" % (s["step_alloc_bytes"] / 2**20,
               s.get("activation_bytes", float("nan")) / 2**20, s["peak_alloc_bytes"] / 2**20)
               if who == "remat" else "RSS+ %6.1f MiB" % (s["rss_growth_bytes"] / 2**20))
        print("  %-5s %-6s median %8.1f ms  %s" % (who, s["strategy"], s["step_ms"], mem))'
    done
  done
done
$PY - "$OUT" <<'PY'
import json, os, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, t, ac, rnd, doc = line.split(" ", 4)
    for s in json.loads(doc)["strategies"]:
        k = (who, int(t), ac, s["strategy"])
        r = runs.setdefault(k, {"ms": [], "step": [], "act": [], "peak": [], "rss": [], "round": {}})
        r["ms"] += s["step_ms_all"]
        r["round"][int(rnd)] = statistics.median(s["step_ms_all"])
        r["rss"].append(s["rss_growth_bytes"])
        if who == "remat":
            r["step"].append(s["step_alloc_bytes"])
            r["act"].append(s.get("activation_bytes", float("nan")))
            r["peak"].append(s["peak_alloc_bytes"])
def q(v, f):
    v = sorted(v); i = f * (len(v) - 1); lo = int(i); hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)
def med(k): return statistics.median(runs[k]["ms"])
# The time ratios per round: numerator and denominator ran back to back in the same round,
# so load that drifts over the run (another process, the machine's clock) hits both alike;
# the figure is the median of the per-round ratios, with their min-max.
def paired(a, b):
    v = sorted(runs[a]["round"][r] / runs[b]["round"][r] for r in runs[a]["round"] if r in runs[b]["round"])
    return "%.3fx (rounds %.3f-%.3f)" % (statistics.median(v), v[0], v[-1])
MiB = 2**20
print("\nsummary: step ms = median of all timed repetitions [IQR] (min-max); bytes: remat exact"
      " allocator bytes (same every round), PyTorch RSS+ median over rounds")
for t in (1, 2):
    for st in ("none", "block"):
        print("\n%d thread(s), %s" % (t, st))
        for who in ("remat", "torch"):
            for ac in ("off", "bf16"):
                k = (who, t, ac, st)
                if k not in runs: continue
                v = runs[k]["ms"]
                mem = ("step %.1f MiB, act %.1f MiB, peak %.1f MiB" % (max(runs[k]["step"]) / MiB,
                       max(runs[k]["act"]) / MiB, max(runs[k]["peak"]) / MiB)
                       if who == "remat" else "RSS+ %.1f MiB" % (statistics.median(runs[k]["rss"]) / MiB))
                print("  %-5s %-4s %8.1f ms [%.1f-%.1f] (%.1f-%.1f)  %s" % (
                    who, "f32" if ac == "off" else "bf16", statistics.median(v), q(v, .25), q(v, .75),
                    min(v), max(v), mem))
        rf, rb, tb = ("remat", t, "off", st), ("remat", t, "bf16", st), ("torch", t, "bf16", st)
        if rf in runs and rb in runs:
            print("  remat bf16 / f32: step time %.3fx (target <= 0.65), per round %s; activation bytes"
                  " %.3fx (target <= 0.6), step bytes %.3fx" % (med(rb) / med(rf), paired(rb, rf),
                  max(runs[rb]["act"]) / max(runs[rf]["act"]),
                  max(runs[rb]["step"]) / max(runs[rf]["step"])))
        if rb in runs and tb in runs:
            print("  remat bf16 / PyTorch %s bf16: step time %.3fx (target <= 0.6), per round %s;"
                  " remat step bytes %.1f MiB vs PyTorch RSS+ %.1f MiB" % (os.environ["TORCH_VERSION"],
                  med(rb) / med(tb), paired(rb, tb),
                  max(runs[rb]["step"]) / MiB,
                  statistics.median(runs[tb]["rss"]) / MiB))
PY
