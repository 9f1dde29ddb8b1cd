#!/usr/bin/python3
"""remat's budget plans against today's PyTorch at equal memory.

PyTorch 2.x has its own automatic rematerialisation: torch.compile with
torch._functorch.config.activation_memory_budget = F recomputes activations
until what it saves fits F of what its default partitioner keeps. This script
measures PyTorch (eager: none and torch.utils.checkpoint per block; compiled at
several budgets) with bench_torch.py, then gives remat's planner, for every
PyTorch point, a whole-step budget equal to that point's memory (remat's
bytes before the step + PyTorch's heap growth over the step), and prints both
side by side: step time and heap growth, each counted by the same preloaded
heap counters (build/libremat_heap_peak.so). Each side's step time comes twice:
wall (median) and the process's CPU time over the same steps, every thread
(median; on a shared machine, other load stretches wall times far more).

Needs a PyTorch 2.x interpreter (bench/pytorch/setup_venv.sh) and `make build`:

    bench/pytorch/setup_venv.sh /work/venv-torch2
    /usr/bin/python3 bench/pytorch/yardstick.py --python /work/venv-torch2/bin/python \\
        --threads 2 --reps 5

Not run by CI (the venv is 3+ GiB, compiling takes minutes).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 2.0 ** 20


def run_json(cmd, env):
    print("  " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="a PyTorch 2.x interpreter")
    ap.add_argument("--remat", default=os.path.join(ROOT, "build", "remat"))
    ap.add_argument("--model", default="gpt", choices=["gpt", "mlp", "llama"])
    ap.add_argument("--budgets", default="1.0,0.5,0.2,0.0",
                    help="activation_memory_budget values for torch.compile (1.0 = 'compile')")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="both sides' forward under bf16 autocast (torch.autocast('cpu', "
                         "bfloat16) / remat --autocast bf16)")
    for f in ("layers", "width", "heads", "context", "batch"):
        ap.add_argument(f"--{f}", type=int)
    a = ap.parse_args()
    if not os.access(a.remat, os.X_OK):
        sys.exit(f"{a.remat} not found: run `make build` first (or pass --remat PATH)")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    heap_lib = os.path.join(os.path.dirname(os.path.abspath(a.remat)), "libremat_heap_peak.so")
    if not os.path.exists(heap_lib):
        sys.exit(f"{heap_lib} not found: `make build` makes it (equal memory is measured with it)")
    env["LD_PRELOAD"] = heap_lib
    common = ["--model", a.model, "--reps", str(a.reps), "--autocast", a.autocast]
    for f in ("layers", "width", "heads", "context", "batch", "threads"):
        if getattr(a, f):
            common += [f"--{f}", str(getattr(a, f))]
    pin = []
    if a.threads > 0 and shutil.which("taskset"):
        pin = ["taskset", "-c", "0-%d" % (a.threads - 1)]  # as compare.py: like for like

    torch_strats = ["none", "block"] + [
        "compile" if float(b) == 1.0 else f"compile-budget={b}" for b in a.budgets.split(",")]
    tj = run_json(pin + [a.python, os.path.join(HERE, "bench_torch.py"), "--json",
                         "--strategies", ",".join(torch_strats)] + common, env)
    # remat's bytes before the step and the planner's range
    rj0 = run_json(pin + [a.remat, "bench", "--json", "--quiet", "--strategies",
                          "none,budget=100%"] + common, env)
    base = rj0["strategies"][0]["baseline_bytes"]
    lo, hi = rj0["planner"]["min_budget_bytes"], rj0["planner"]["store_all_bytes"]
    budgets = {}
    for s in tj["strategies"]:
        b = base + s["heap_growth_bytes"]
        budgets[s["strategy"]] = max(lo, min(b, hi)) if b >= lo else None
    plans = sorted({b for b in budgets.values() if b is not None})
    rj = run_json(pin + [a.remat, "bench", "--json", "--quiet", "--strategies",
                         ",".join(["none", "block"] + [f"budget={b}" for b in plans])] + common,
                  env)
    by_name = {s["strategy"]: s for s in rj["strategies"]}

    head = (f"{a.model.upper()} {rj['layers']} layers, width {rj['width']}, batch {rj['batch']}, "
            f"{rj['threads']} threads, {a.reps} reps, autocast {a.autocast}; PyTorch {tj['torch']} against this build of remat")
    rows = []
    for s in tj["strategies"]:
        name = s["strategy"]
        kind = "eager" if name in ("none", "block") else "torch.compile"
        if name == "block":
            kind += ", torch.utils.checkpoint per block"
        b = budgets[name]
        r = by_name.get(f"budget={b}") if b is not None else None
        rows.append([f"PyTorch {tj['torch']} {kind}", name, f"{s['step_ms']:.1f}",
                     f"{s['heap_growth_bytes'] / MIB:.1f}",
                     f"budget={b / MIB:.2f}MiB" if b is not None else "below remat's minimum",
                     f"{r['step_ms']:.1f}" if r else "-",
                     f"{r['heap_growth_bytes'] / MIB:.1f}" if r else "-",
                     f"{r['peak_alloc_bytes'] / MIB:.1f}" if r else "-",
                     f"{r['step_ms'] / s['step_ms']:.2f}" if r else "-",
                     f"{s['step_cpu_ms']:.1f}", f"{r['step_cpu_ms']:.1f}" if r else "-",
                     f"{r['step_cpu_ms'] / s['step_cpu_ms']:.2f}" if r else "-",
                     str(r["plan_recomputed_blocks"]) if r else "-"])
    hdr = ["PyTorch side", "strategy", "PyTorch ms", "PyTorch heap+ MiB", "remat at equal memory",
           "remat ms", "remat heap+ MiB", "remat alloc peak MiB", "remat / PyTorch time",
           "PyTorch CPU ms", "remat CPU ms", "remat / PyTorch CPU", "blocks recomputed"]
    print(head)
    print(f"remat alone: none {by_name['none']['step_ms']:.1f} ms, "
          f"{by_name['none']['heap_growth_bytes'] / MIB:.1f} MiB heap+; block "
          f"{by_name['block']['step_ms']:.1f} ms, {by_name['block']['heap_growth_bytes'] / MIB:.1f} "
          f"MiB heap+; planner range {lo / MIB:.2f}-{hi / MIB:.2f} MiB for the whole step")
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
        for r in rows:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))


if __name__ == "__main__":
    main()
