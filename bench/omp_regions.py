#!/usr/bin/env python3
"""bench/omp_regions.py -- OpenMP parallel regions per training step, by opener.

Runs `remat bench ARGS --reps 2` and `--reps 8` under
build/libremat_omp_regions.so (bench/preload/omp_regions.c), subtracts, divides
by 6 and names each opener with addr2line. Exact and the same every run: the
before/after measure of a change to the number of regions (each costs a thread
wake-up, ~45 us on the 2-vCPU machines, under the remat program's
OMP_WAIT_POLICY=passive).

    python3 bench/omp_regions.py --model gpt --layers 6 --width 384 --heads 6 \
        --context 256 --batch 8 --threads 2 --strategies block --autocast bf16
"""
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "build", "libremat_omp_regions.so")
REMAT = os.path.join(ROOT, "build", "remat")


def run(args, reps):
    with tempfile.NamedTemporaryFile(mode="r", suffix=".txt") as f:
        env = dict(os.environ, LD_PRELOAD=LIB, REMAT_OMP_REGIONS=f.name)
        subprocess.run([REMAT, "bench", *args, "--reps", str(reps)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts = collections.Counter()
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1] != "total":
                counts[(parts[1], parts[2] if len(parts) > 2 else "-")] += int(parts[0])
        return counts


def name(opener, exported):
    path, _, off = opener.rpartition("+")
    if exported != "-":
        return "%s (%s)" % (exported, os.path.basename(path))
    out = subprocess.run(["addr2line", "-f", "-s", "-e", path, off], capture_output=True,
                         text=True).stdout.split("\n")
    return "%s (%s)" % (out[0] if out and out[0] else off, os.path.basename(path))


def main():
    if not os.path.exists(LIB):
        sys.exit("omp_regions: %s missing (make build)" % LIB)
    args = sys.argv[1:]
    a, b = run(args, 2), run(args, 8)
    per = collections.Counter()
    for k in set(a) | set(b):
        per[name(*k)] += (b[k] - a[k]) / 6.0
    print("parallel regions per step: %.1f" % sum(per.values()))
    for who, n in per.most_common():
        if n >= 0.5:
            print("%8.1f  %s" % (n, who))


if __name__ == "__main__":
    main()
