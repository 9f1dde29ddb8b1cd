#!/usr/bin/env python3
"""bench/planner_targets.py [--remat PATH] -- REMAT BENCH FLAGS...

Runs `remat bench --json FLAGS` once (its strategies interleaved, --reps
repetitions each; the first strategy must be `none`) and prints the issue-33
table: per strategy the activation bytes (exact, and as a ratio of none's),
the step's allocator peak, wall time (median, q1-q3), CPU time (median: the
process's CPU time over each step, every thread: `step_cpu_ms`), CPU time as a
ratio of none's medians, the paired ratio (per repetition, CPU(strategy) /
CPU(none) of the same round: median [min-max]) and whether the gradients
are bitwise none's. The 1-minute load is printed before and after. Each
plan's budget, predicted peak and step time (the profile's wall-time model)
and structure follow the table.

Example (the issue's GPT, f32, 2 threads):
  python3 bench/planner_targets.py -- --layers 12 --width 384 --heads 6 \\
      --context 256 --batch 8 --threads 2 --reps 7 \\
      --strategies none,budget=57%,budget=42%,budget=35%
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def main():
    argv = sys.argv[1:]
    remat = os.path.join(ROOT, "build", "remat")
    if argv[:1] == ["--remat"]:
        remat, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit(__doc__)
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    cmd = [remat, "bench", "--json", "--quiet"] + argv
    t0, l0 = time.strftime("%H:%M:%S", time.gmtime()), load()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    t1, l1 = time.strftime("%H:%M:%S", time.gmtime()), load()
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}")
    j = json.loads(p.stdout)
    ss = j["strategies"]
    ref = ss[0]
    if ref["strategy"] != "none":
        sys.exit("the first strategy must be none")
    print("command: " + " ".join(["OMP_WAIT_POLICY=" + env["OMP_WAIT_POLICY"]] + cmd))
    print(f"model: {j['model']} L={j['layers']} D={j['width']} H={j['heads']} T={j['context']} "
          f"B={j['batch']}, {j['threads']} threads, {j['reps']} reps")
    print(f"load: {l0} before, {l1} after ({t0}-{t1} UTC)")
    hdr = (f"{'strategy':<24} {'act bytes':>10} {'act x':>6} {'peak bytes':>10} "
           f"{'wall med':>9} {'wall q1-q3':>12} {'CPU med':>8} {'CPU x':>6} "
           f"{'paired CPU x [min-max]':>23} grads")
    print(hdr)
    ref_act, ref_cpu = ref["activation_bytes"], ref["step_cpu_ms"]
    ref_all = ref["step_cpu_ms_all"]
    for s in ss:
        pr = [a / b for a, b in zip(s["step_cpu_ms_all"], ref_all)]
        grads = ("bitwise" if s["grads_bitwise_equal"]
                 else f"max|d| {s['grads_max_abs_diff']:.1e}")
        print(f"{s['strategy']:<24} {s['activation_bytes']:>10} "
              f"{s['activation_bytes'] / ref_act:>6.3f} {s['peak_alloc_bytes']:>10} "
              f"{s['step_ms']:>9.0f} {s['step_ms_q1']:>5.0f}-{s['step_ms_q3']:<6.0f} "
              f"{s['step_cpu_ms']:>8.0f} {s['step_cpu_ms'] / ref_cpu:>6.3f} "
              f"{statistics.median(pr):>8.3f} [{min(pr):.3f}-{max(pr):.3f}] {grads}")
    for s in ss:
        if "plan_structure" in s:
            print(f"  {s['strategy']}: budget {s['budget_bytes']}, predicted peak "
                  f"{s['plan_peak_bytes']}, predicted {s['plan_step_ms']:.0f} ms; "
                  f"{s['plan_structure']}")


if __name__ == "__main__":
    main()
