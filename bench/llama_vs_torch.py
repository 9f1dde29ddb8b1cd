#!/usr/bin/env python3
"""bench/llama_vs_torch.py — remat against PyTorch 2.x + transformers on a
Llama-style model (issue 31 part 8), one command:

    make build
    python3 bench/llama_vs_torch.py --python /work/venv-hf/bin/python      # defaults below

Model: Llama, 8 layers, width 512, 8 heads / 2 KV heads, MLP 1376, vocab
32000, 55M parameters (--layers/--hidden/--heads/--kv-heads/--intermediate/
--vocab); fine-tune steps at context 512, batch 1 (--context, --batch) with
AdamW. bench/bench_llama.c writes the model once (seeded init) as a Hugging
Face directory (--dir) that both sides load, so they start from the same
weights on the same token ids: the first step's loss must agree, and greedy
samples must be the same ids.

For each round (--rounds) and each strategy (none, block, budget[=F]) it runs
remat (build/bench_llama) and PyTorch (bench/pytorch/llama_torch.py under
--python), alternating which goes first, each a fresh process doing one
warm-up step and --reps timed steps with the same --threads, OMP_WAIT_POLICY
passive on both, build/libremat_heap_peak.so preloaded into both (the C heap's
peak growth over a step, counted the same way in both processes). "budget" is
remat's planner at min + F x (store-all - min) of its profile (F = 0.5); eager
PyTorch has no planner, so its side checkpoints, each on its own, the layers
remat's plan does not store. Then sampling: greedy generation of --sample
tokens after a --prompt-token prompt with the KV cache, remat_model_generate
against transformers' generate, --rounds interleaved runs of --sample-reps.

Prints the CPU, the load average at each run, medians over all timed steps
with min-max, ratios (remat / PyTorch: below 1 means remat is faster or
smaller), the memory peaks (remat's allocator, PyTorch's C heap: live bytes
above the step's start), and the losses.
--json FILE also writes every raw result.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load():
    return os.getloadavg()[0]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def run_json(cmd, env):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]), p.stderr


def spread(v):
    return f"{statistics.median(v):8.1f} ({min(v):.1f}-{max(v):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="a PyTorch 2.x + transformers interpreter")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench_llama"))
    ap.add_argument("--dir", default="/tmp/remat_llama_bench", help="the model directory (made once)")
    ap.add_argument("--strategies", default="none,block,budget")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--sample", type=int, default=64, help="tokens to generate (0: no sampling)")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--sample-reps", type=int, default=3)
    ap.add_argument("--json", help="write every raw result here")
    for f, d in (("layers", 8), ("hidden", 512), ("heads", 8), ("kv-heads", 2),
                 ("intermediate", 1376), ("vocab", 32000)):
        ap.add_argument(f"--{f}", type=int, default=d)
    a = ap.parse_args()
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"{a.bin} not found: run `make build` first")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(a.threads),
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    heap_lib = os.path.join(os.path.dirname(os.path.abspath(a.bin)), "libremat_heap_peak.so")
    if os.path.exists(heap_lib):
        env["LD_PRELOAD"] = heap_lib
    else:
        print(f"note: {heap_lib} not found: no heap peaks", file=sys.stderr)
    if not os.path.exists(os.path.join(a.dir, "config.json")):
        subprocess.run([a.bin, "--export", a.dir, "--layers", str(a.layers), "--hidden", str(a.hidden),
                        "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--intermediate",
                        str(a.intermediate), "--vocab", str(a.vocab),
                        "--positions", str(max(1024, a.context, a.prompt + a.sample))],
                       check=True, env=env)
    torch_py = os.path.join(HERE, "pytorch", "llama_torch.py")
    common = ["--dir", a.dir, "--threads", str(a.threads)]
    step_args = common + ["--batch", str(a.batch), "--context", str(a.context), "--reps", str(a.reps)]
    raw, loads = [], []
    res = {}  # (strategy, side) -> list of results
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; threads {a.threads}; model {a.dir}: "
          f"L={a.layers} D={a.hidden} heads {a.heads}/{a.kv_heads} MLP {a.intermediate} "
          f"vocab {a.vocab}; batch {a.batch} x context {a.context}", flush=True)
    plans = {}
    for r in range(a.rounds):
        for s in a.strategies.split(","):
            sides = ["remat", "torch"] if r % 2 == 0 else ["torch", "remat"]
            for side in sides:
                loads.append(load())
                if side == "remat":
                    out, err = run_json([a.bin, "--step", s] + step_args, env)
                    plans[s] = out.get("checkpointed_layers", [])
                    if r == 0 and s.startswith("budget"):
                        print(err.strip(), file=sys.stderr)
                else:
                    ts = "budget" if s.startswith("budget") else s
                    if ts == "budget" and s not in plans:
                        out0, _ = run_json([a.bin, "--step", s] + step_args[:-2] + ["--reps", "1"], env)
                        plans[s] = out0["checkpointed_layers"]
                    extra = ["--layers-checkpointed", ",".join(map(str, plans.get(s, [])))] if ts == "budget" else []
                    out, _ = run_json([a.python, torch_py, "--step", ts] + step_args + extra, env)
                out["load"] = loads[-1]
                out["round"] = r
                raw.append(out)
                res.setdefault((s, side), []).append(out)
                print(f"  round {r} {s:<10} {side:<5} load {loads[-1]:5.2f}: step ms "
                      f"{', '.join(f'{t * 1e3:.0f}' for t in out['step_s'])}", flush=True)
    samples = {}
    if a.sample:
        for r in range(a.rounds):
            for side in (["remat", "torch"] if r % 2 == 0 else ["torch", "remat"]):
                loads.append(load())
                sa = common + ["--sample", str(a.sample), "--prompt", str(a.prompt), "--reps", str(a.sample_reps)]
                cmd = [a.bin] + sa if side == "remat" else [a.python, torch_py] + sa
                out, _ = run_json(cmd, env)
                out["load"] = loads[-1]
                raw.append(out)
                samples.setdefault(side, []).append(out)
                print(f"  round {r} sample {side:<5} load {loads[-1]:5.2f}: "
                      f"{', '.join(f'{a.sample / t:.1f}' for t in out['run_s'])} tokens/s", flush=True)
    print(f"\nload average during the runs: {min(loads):.2f}-{max(loads):.2f} "
          f"(median {statistics.median(loads):.2f})")
    print("memory: the peak of live bytes over a step above those live at its start: remat's\n"
          "allocator (every tensor byte; its block cache keeps freed blocks off the C heap), PyTorch's\n"
          "C heap (its CPU tensors are malloc'd; build/libremat_heap_peak.so counts them)")
    print(f"{'strategy':<10} {'remat step ms':>24} {'PyTorch step ms':>24} {'remat/PT':>8} "
          f"{'remat MiB':>10} {'PyTorch MiB':>11} {'remat/PT':>8}  loss0 remat / PyTorch")
    for s in a.strategies.split(","):
        rm, pt = res.get((s, "remat"), []), res.get((s, "torch"), [])
        if not rm or not pt:
            continue
        tr = [t * 1e3 for o in rm for t in o["step_s"]]
        tp = [t * 1e3 for o in pt for t in o["step_s"]]
        mr = max(o["alloc_peak_bytes"] for o in rm) / 2**20
        hp = [o["heap_peak_bytes"] for o in pt if o["heap_peak_bytes"] is not None]
        mp = f"{max(hp) / 2**20:11.1f}" if hp else f"{'-':>11}"
        ratio = f"{mr / (max(hp) / 2**20):8.3f}" if hp else f"{'-':>8}"
        print(f"{s:<10} {spread(tr):>24} {spread(tp):>24} {statistics.median(tr) / statistics.median(tp):8.3f} "
              f"{mr:10.1f} {mp} {ratio}  {rm[0]['loss0']:.6f} / {pt[0]['loss0']:.6f}")
        if s.startswith("budget"):
            print(f"{'':<10} checkpointed layers: {plans.get(s)}")
    if samples:
        rr = [a.sample / t for o in samples["remat"] for t in o["run_s"]]
        tt = [a.sample / t for o in samples["torch"] for t in o["run_s"]]
        same = samples["remat"][0]["ids"] == samples["torch"][0]["ids"]
        print(f"sampling {a.sample} tokens after {a.prompt} (greedy, KV cache): remat "
              f"{spread(rr)} tokens/s, transformers generate {spread(tt)} tokens/s; "
              f"remat/PT {statistics.median(rr) / statistics.median(tt):.3f}; "
              f"ids {'the same' if same else 'DIFFER'}")
    pt_any = next((o for o in raw if o.get("side") == "torch"), {})
    print(f"PyTorch {pt_any.get('torch', '?')} (attention: {pt_any.get('attn', '?')}), eager")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"raw": raw, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    main()
