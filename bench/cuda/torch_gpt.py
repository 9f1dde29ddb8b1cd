#!/usr/bin/env python3
"""The H100 yardstick: PyTorch 2.x on CUDA, the GPT of bench/pytorch/models.py, one
training step (forward + backward) per strategy, step time and peak allocated bytes.

Strategies as `remat bench --device cuda` names them:
  none             plain forward
  block            torch.utils.checkpoint around every block (non-reentrant)
  selective=dots   every block checkpointed with a selective policy that keeps the outputs
                   of the matmuls (aten.mm / addmm / bmm / baddbmm, as remat's `dots`) and
                   of the fused attention (create_selective_checkpoint_contexts)
  budget=N%        no eager counterpart in PyTorch: torch.compile with
                   torch._functorch.config.activation_memory_budget = N/100 (the min-cut
                   partitioner's budget; reported with "compiled": true)
  compile          torch.compile of the plain forward, default partitioner (the stretch
                   yardstick: PyTorch's fused kernels; "compiled": true)

Method: a warm-up step per strategy, then --reps timed steps, interleaved across
strategies; a step is timed with CUDA events and torch.cuda.synchronize; peak memory is
torch.cuda.max_memory_allocated over one step after reset_peak_memory_stats, minus the
bytes allocated before it (the parameters, their gradients and the batch), as remat's
peak counts the step. TF32 follows --tf32 (off by default, as remat's default);
--autocast bf16 runs the forward under torch.autocast('cuda', torch.bfloat16), as remat's
--autocast bf16 does.

Writes one JSON object (bench/results/<date>-h100-torch.json by default) with the exact
command, the GPU, torch and CUDA versions, and per strategy the median and spread of the
step times and the peak bytes.

    python3 bench/cuda/torch_gpt.py --layers 12 --width 768 --heads 12 --context 1024 \\
        --batch 8 --reps 10
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
import models  # noqa: E402

DOTS = None


def dots_policy():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    keep = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_cudnn_attention"):
        op = getattr(aten, name, None)
        if op is not None:
            keep.add(op.default)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return lambda: create_selective_checkpoint_contexts(policy)


def run_blocks(blocks, x, strategy):
    if strategy == "none":
        for b in blocks:
            x = b(x)
        return x
    if strategy == "block":
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x
    if strategy == "selective=dots":
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=False, context_fn=DOTS)
        return x
    raise ValueError(strategy)


def loss_fn(m, idx, targets, strategy):
    T = idx.shape[1]
    x = m.wte(idx) + m.wpe[:T]
    x = run_blocks(m.blocks, x, strategy)
    logits = m.ln_f(x) @ m.wte.weight.t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100)


def main():
    global DOTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls")
    ap.add_argument("--autocast", choices=("off", "bf16"), default="off",
                    help="bf16: torch.autocast('cuda', torch.bfloat16) around the forward")
    ap.add_argument("--strategies", default="none,block,selective=dots,budget=50%")
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/DATE-GPU-torch.json)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, N steps of the first strategy under torch.profiler: "
                         "its GPU kernels by total time (what remat bench --profile sets "
                         "against remat's)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpt.py: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device("cuda")
    DOTS = dots_policy()
    m, (idx, targets) = models.make("gpt", a.layers, a.width, a.heads, a.context, a.batch, a.seed)
    m = m.to(dev)
    idx, targets = idx.to(dev), targets.to(dev)
    strategies = a.strategies.split(",")
    fns, budgets = {}, {}
    for s in strategies:
        if s.startswith("budget=") or s == "compile":
            # each compiled strategy its own function, compiled at its warm-up step under its
            # own activation_memory_budget (the partitioner reads the config then)
            budgets[s] = float(s[len("budget="):].rstrip("%")) / 100 if s != "compile" else 1.0
            # a code object of its own: dynamo caches compiled graphs per code object, so
            # strategies sharing one would share the first one's partition
            ns = {}
            exec(compile("def f(i, t):\n    return loss_fn(m, i, t, 'none')\n",
                         f"<torch_gpt {s}>", "exec"), {"loss_fn": loss_fn, "m": m}, ns)
            fns[s] = torch.compile(ns["f"])
        else:
            fns[s] = (lambda s_: (lambda i, t: loss_fn(m, i, t, s_)))(s)

    def step(s):
        for p in m.parameters():
            p.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = fns[s](idx, targets)
        loss.backward()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1), torch.cuda.max_memory_allocated() - base, loss.item()

    times = {s: [] for s in strategies}
    peaks, losses = {}, {}
    for s in strategies:  # warm-up (and compilation)
        if s in budgets:
            import torch._functorch.config as fc
            with fc.patch(activation_memory_budget=budgets[s]):
                step(s)
        else:
            step(s)
    for _ in range(a.reps):
        for s in strategies:
            ms, pk, lo = step(s)
            times[s].append(ms)
            peaks[s] = max(peaks.get(s, 0), pk)
            losses[s] = lo
    if a.profile > 0:
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(a.profile):
                    step(strategies[0])
            print(f"torch.profiler: {strategies[0]}, {a.profile} steps; GPU kernels, ms per step")
            rows = [(e.key, e.device_time_total / 1000 / a.profile, e.count // a.profile)
                    for e in prof.key_averages() if e.device_time_total > 0]
            rows.sort(key=lambda r: -r[1])
            total = sum(r[1] for r in rows)
            print(f"{'ms/step':>8s} {'%':>6s} {'calls':>6s}  kernel (total {total:.3f} ms)")
            for k, ms, n in rows[:40]:
                print(f"{ms:8.3f} {100 * ms / total:5.1f}% {n:6d}  {k[:110]}")
        except Exception as e:  # a profiler that fails must not lose the timings
            print("torch.profiler failed:", repr(e))
    gpu = torch.cuda.get_device_name(0)
    res = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "tf32": a.tf32,
        "autocast": a.autocast,
        "model": {"layers": a.layers, "width": a.width, "heads": a.heads,
                  "context": a.context, "batch": a.batch},
        "strategies": [{
            "name": s, "compiled": s in budgets,
            "step_ms_median": statistics.median(times[s]),
            "step_ms_min": min(times[s]), "step_ms_max": max(times[s]),
            "peak_allocated_bytes": peaks[s], "loss": losses[s],
        } for s in strategies],
    }
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results",
                                datetime.date.today().isoformat() + "-"
                                + gpu.replace(" ", "_") + "-torch.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    for s in res["strategies"]:
        print(f"{s['name']:16s} {s['step_ms_median']:9.2f} ms  [{s['step_ms_min']:.2f}, "
              f"{s['step_ms_max']:.2f}]  peak {s['peak_allocated_bytes'] / 2**20:9.1f} MiB")
    print("wrote", out)


if __name__ == "__main__":
    main()
