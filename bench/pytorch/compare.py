#!/usr/bin/python3
"""remat against PyTorch, side by side: same models, same strategies, same method.

Alternates `remat bench --json` and `bench_torch.py --json` for --rounds rounds
(each side runs its own interleaved repetitions), takes the median over rounds
and prints, per model and strategy, step time, RSS growth and heap growth of
both and the ratios (PyTorch / remat: above 1 means remat is faster / smaller).
Heap growth needs build/libremat_heap_peak.so (`make build`), which both sides
run preloaded: it counts every malloc'd byte the same way in both processes.

    make build
    /usr/bin/python3 bench/pytorch/compare.py                  # GPT and MLP, defaults
    /usr/bin/python3 bench/pytorch/compare.py --models gpt --threads 2 --rounds 3
    /usr/bin/python3 bench/pytorch/compare.py --models mlp --layers 8 --width 256 --quick
    /usr/bin/python3 bench/pytorch/compare.py --python /work/venv-torch2/bin/python   # PyTorch 2.x
    /usr/bin/python3 bench/pytorch/compare.py --models gpt --autocast bf16 --quiet-load 0.8

On a shared machine --quiet-load waits before each side of each round for the 1-minute
load average to fall to that value and prints the loads; a second table gives the CPU time
a step (every thread) and its per-round ratios, which other jobs stretch far less than
wall time.

Model flags (--layers, --width, --heads, --context, --batch) are passed to both
sides; left out, both use the defaults of `remat bench`.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_json(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def wait_quiet(limit, longest):
    """Waits until the 1-minute load average is at most `limit` (0: not at all), at most
    `longest` seconds; returns the load it starts at."""
    t0 = time.monotonic()
    while limit > 0 and os.getloadavg()[0] > limit and time.monotonic() - t0 < longest:
        time.sleep(5)
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remat", default=os.path.join(ROOT, "build", "remat"))
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs bench_torch.py: Debian's python3-torch 1.13 "
                         "(/usr/bin/python3) or a PyTorch 2.x venv (bench/pytorch/setup_venv.sh)")
    ap.add_argument("--models", default="gpt,mlp")
    ap.add_argument("--strategies", default="none,block,sequential=2,sequential=4")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reentrant", action="store_true")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: both sides' forwards under autocast (remat --autocast bf16, "
                         "torch.autocast('cpu', bfloat16))")
    ap.add_argument("--quiet-load", type=float, default=0.0,
                    help="on a shared machine: before each side of each round wait until the "
                         "1-minute load average is at most this (0: do not wait); each round's "
                         "loads are printed")
    ap.add_argument("--quiet-wait", type=float, default=600.0,
                    help="the longest wait for --quiet-load, seconds (then it runs anyway)")
    ap.add_argument("--quick", action="store_true", help="1 round of 2 reps (a smoke test)")
    ap.add_argument("--no-heap", dest="heap", action="store_false",
                    help="do not preload the heap counters (libremat_heap_peak.so)")
    ap.add_argument("--wait-policy", default="passive", choices=["passive", "active"],
                    help="OMP_WAIT_POLICY for both sides (remat defaults to passive, libgomp and "
                         "so PyTorch to active; spinning workers slow both down on a busy machine)")
    for f in ("layers", "width", "heads", "context", "batch"):
        ap.add_argument(f"--{f}", type=int)
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.reps = 1, 2
    if not os.access(a.remat, os.X_OK):
        sys.exit(f"{a.remat} not found: run `make build` first (or pass --remat PATH)")

    env = dict(os.environ, OMP_WAIT_POLICY=a.wait_policy.upper())
    # the same heap counters in both processes (bench/preload/heap_peak.c): exact
    # bytes where RSS depends on page faults; built by `make build`
    heap_lib = os.path.join(os.path.dirname(os.path.abspath(a.remat)), "libremat_heap_peak.so")
    if a.heap and os.path.exists(heap_lib):
        env["LD_PRELOAD"] = heap_lib
    elif a.heap:
        print(f"note: {heap_lib} not found (`make build` makes it): no heap+ columns",
              file=sys.stderr)
    for model in a.models.split(","):
        common = ["--model", model, "--strategies", a.strategies, "--reps", str(a.reps)]
        for f in ("layers", "width", "heads", "context", "batch", "threads"):
            v = getattr(a, f)
            if v:
                common += [f"--{f}", str(v)]
        if a.reentrant:
            common.append("--reentrant")
        if a.autocast != "off":
            common += ["--autocast", a.autocast]
        remat_cmd = [a.remat, "bench", "--json", "--quiet"] + common
        torch_cmd = [a.python, os.path.join(HERE, "bench_torch.py"), "--json"] + common
        if a.threads > 0 and shutil.which("taskset"):
            # torch.set_num_threads(1) still leaves PyTorch ~1.9 cores busy here (measured:
            # 20 s of CPU time in 11 s of wall time); pin both sides to `threads` cores so
            # the comparison is like for like.
            cores = "0-%d" % (a.threads - 1)
            remat_cmd = ["taskset", "-c", cores] + remat_cmd
            torch_cmd = ["taskset", "-c", cores] + torch_cmd
        rounds = {"remat": [], "torch": []}
        loads = []
        for r in range(a.rounds):
            # alternate which side goes first, so neither always gets the cooler machine
            order = [("remat", remat_cmd), ("torch", torch_cmd)]
            for side, cmd in (order if r % 2 == 0 else order[::-1]):
                before = wait_quiet(a.quiet_load, a.quiet_wait)
                print(f"  {model}: round {r + 1}/{a.rounds}: {side} (load {before:.2f})",
                      file=sys.stderr)
                rounds[side].append(run_json(cmd, env))
                loads.append(f"r{r + 1} {side} {before:.2f}-{os.getloadavg()[0]:.2f}")
        first = rounds["remat"][0]
        print(f"\n{model.upper()}: {first['layers']} layers, width {first['width']}, "
              f"batch {first['batch']}, {first['params'] / 1e6:.2f}M parameters, "
              f"{first['threads']} threads; medians of {a.rounds} rounds x {a.reps} reps "
              f"(PyTorch {rounds['torch'][0]['torch']}, OMP_WAIT_POLICY={a.wait_policy})")
        heap = all(x["strategies"][i].get("heap_growth_bytes") is not None
                   for side in rounds.values() for x in side for i in range(len(x["strategies"])))
        print(f"{'strategy':<24} {'remat ms':>9} {'torch ms':>9} {'torch/remat':>12} "
              f"{'remat RSS+':>11} {'torch RSS+':>11} {'torch/remat':>12}"
              + (f" {'remat heap+':>12} {'torch heap+':>12} {'torch/remat':>12}" if heap else "")
              + "  remat alloc peak")
        for i, s in enumerate(first["strategies"]):
            def med(side, key):
                return statistics.median(x["strategies"][i][key] for x in rounds[side])
            rm, tm = med("remat", "step_ms"), med("torch", "step_ms")
            rr, tr = med("remat", "rss_growth_bytes"), med("torch", "rss_growth_bytes")
            h = ""
            if heap:
                rh, th = med("remat", "heap_growth_bytes"), med("torch", "heap_growth_bytes")
                h = f" {rh / 2**20:>11.1f}M {th / 2**20:>11.1f}M {th / max(rh, 1):>11.2f}x"
            pk = s["step_alloc_bytes"]
            print(f"{s['strategy']:<24} {rm:>9.1f} {tm:>9.1f} {tm / rm:>11.2f}x "
                  f"{rr / 2**20:>10.1f}M {tr / 2**20:>10.1f}M {tr / max(rr, 1):>11.2f}x{h}  "
                  f"{pk / 2**20:.1f}M")
        if heap:
            print("heap+: peak of the C heap over the step minus its bytes at the start, both "
                  "sides counted by bench/preload/heap_peak.c")
        # CPU time a step (every thread; both sides' medians of their reps), per round: on a
        # shared machine other jobs stretch wall time but hardly the process's own CPU time,
        # and the two sides of one round ran back to back
        if all("step_cpu_ms" in x["strategies"][i] for side in rounds.values() for x in side
               for i in range(len(first["strategies"]))):
            print(f"{'strategy':<24} {'remat CPU ms':>13} {'torch CPU ms':>13} "
                  f"{'remat/torch CPU':>16}  per round")
            for i, s in enumerate(first["strategies"]):
                rc = [x["strategies"][i]["step_cpu_ms"] for x in rounds["remat"]]
                tc = [x["strategies"][i]["step_cpu_ms"] for x in rounds["torch"]]
                per = [r / t for r, t in zip(rc, tc)]
                print(f"{s['strategy']:<24} {statistics.median(rc):>13.1f} "
                      f"{statistics.median(tc):>13.1f} {statistics.median(per):>15.3f}x  "
                      + " ".join(f"{p:.3f}" for p in per))
        print("1-min load before-after each side: " + ", ".join(loads))


if __name__ == "__main__":
    main()
