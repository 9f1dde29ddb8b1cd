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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_json(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


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
        for r in range(a.rounds):
            # alternate which side goes first, so neither always gets the cooler machine
            order = [("remat", remat_cmd), ("torch", torch_cmd)]
            for side, cmd in (order if r % 2 == 0 else order[::-1]):
                print(f"  {model}: round {r + 1}/{a.rounds}: {side}", file=sys.stderr)
                rounds[side].append(run_json(cmd, env))
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


if __name__ == "__main__":
    main()
