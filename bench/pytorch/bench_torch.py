#!/usr/bin/python3
"""`remat bench`, in PyTorch: the same model, the same strategies, the same method.

Runs one forward+backward step of the GPT, Llama or MLP of models.py under each
strategy (none, block, sequential=N; torch.utils.checkpoint with an explicit
use_reentrant), interleaved repetitions, medians; prints a table or (--json)
one JSON object with the keys of `remat bench --json`. With PyTorch 2.x
(bench/pytorch/setup_venv.sh) also `compile` (torch.compile, default
partitioner) and `compile-budget=F` (torch.compile with
torch._functorch.config.activation_memory_budget = F, PyTorch's automatic
rematerialisation); their compilation runs before anything is measured
(compile_s in the JSON).

Memory: PyTorch has no allocator counters on cpu, so, as remat's RSS column,
the growth of the process's resident memory over the step, sampled every
~0.2 ms by a thread and, where /proc/self/clear_refs can reset it, taken from
the kernel's high-water mark (VmHWM) too: a sampler sharing one pinned core
with the step misses short peaks (compare.py --threads 1). glibc malloc is set
(mallopt) to give every tensor above 64 KiB its own mapping so freed memory
leaves the RSS at once. Timed
repetitions run with large malloc thresholds (the fast setting), as remat's.
Run with build/libremat_heap_peak.so preloaded (bench/preload/heap_peak.c;
compare.py does it), the measured step also reports heap_growth_bytes: the
peak of the bytes live on the C heap over the step, minus those at its start,
counted exactly as for `remat bench`. Unlike RSS it does not depend on which
pages were touched or reused.

Needs python3-torch (Debian: /usr/bin/python3). Example:
    /usr/bin/python3 bench/pytorch/bench_torch.py --model gpt --threads 2
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

_libc = ctypes.CDLL("libc.so.6")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
PAGE = os.sysconf("SC_PAGE_SIZE")


def malloc_mode(track_rss):
    if track_rss:
        _libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
        _libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)
    else:
        _libc.mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        _libc.mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024)


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def heap_counters():
    """(reset, peak) of bench/preload/heap_peak.c when this process runs with it
    preloaded (compare.py does that), else None: the C heap's live bytes and
    peak, counted the same way for remat (`remat bench`: heap_growth_bytes)."""
    try:
        lib = ctypes.CDLL(None)
        reset, peak = lib.remat_heap_peak_reset, lib.remat_heap_peak_bytes
    except (OSError, AttributeError):
        return None
    reset.restype = peak.restype = ctypes.c_int64
    return reset, peak


HEAP = heap_counters()


def reset_hwm():
    """Resets VmHWM to the current RSS; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Max RSS over a block: sampled by a thread (torch releases the GIL in
    kernels) and the kernel's high-water mark, as remat bench does."""

    def __enter__(self):
        self.hwm = reset_hwm()
        self.heap_start = HEAP[0]() if HEAP else None
        self.start = self.peak = rss()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, rss())
            time.sleep(0.0002)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, rss(), hwm() if self.hwm else 0)
        self.heap_growth = max(0, HEAP[1]() - self.heap_start) if HEAP else None


AUTOCAST = False  # --autocast bf16


COMPILED = {}  # strategy name -> compiled loss function (compile, compile-budget=F)


def compile_budget(strategy):
    """The activation memory budget of a compile strategy, or None for an eager one.
    "compile" is torch.compile with PyTorch's default budget (1.0: keep what the
    min-cut partitioner keeps); "compile-budget=F" sets
    torch._functorch.config.activation_memory_budget = F (0 <= F <= 1): PyTorch 2.x's own
    automatic rematerialisation, which recomputes activations until the saved ones fit
    F of what the default keeps."""
    if strategy == "compile":
        return 1.0
    if strategy.startswith("compile-budget="):
        return float(strategy.split("=", 1)[1])
    return None


def make_compiled(model, batch, strategy):
    """Compiles a loss for the strategy under its budget: torch.compile traces and
    partitions on the first call (forward and backward), so that call runs inside the
    config patch. Each strategy gets its own code object, hence its own graph.
    Returns the seconds the compilation took."""
    budget = compile_budget(strategy)
    if not hasattr(torch, "compile"):
        sys.exit(f"{strategy}: torch.compile needs PyTorch 2.x (this is {torch.__version__}); "
                 "see bench/pytorch/setup_venv.sh")
    import torch._functorch.config as fconfig
    ns = {}
    name = f"loss_{len(COMPILED)}"
    # the autocast region inside the compiled function (--autocast bf16), so that the graph
    # torch.compile partitions is the bf16 one, as eager's forward under autocast
    exec(f"def {name}(model, *batch):\n"
         f"    with torch.autocast('cpu', dtype=torch.bfloat16, enabled={AUTOCAST}):\n"
         f"        return model.loss(*batch, strategy='none')\n", {"torch": torch}, ns)
    fn = torch.compile(ns[name])
    t0 = time.perf_counter()
    with fconfig.patch(activation_memory_budget=budget):
        model.zero_grad(set_to_none=True)
        fn(model, *batch).backward()
    COMPILED[strategy] = fn
    return time.perf_counter() - t0


def step(model, batch, strategy, reentrant):
    model.zero_grad(set_to_none=True)
    if strategy in COMPILED:
        loss = COMPILED[strategy](model, *batch)
    else:
        # --autocast bf16: the forward under torch.autocast('cpu', bfloat16), as remat's
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
            loss = model.loss(*batch, strategy=strategy, reentrant=reentrant)
    loss.backward()
    return loss.item()


def grads(model):
    return [p.grad.detach().clone() if p.grad is not None else None for p in model.parameters()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["gpt", "mlp", "llama"], default="gpt")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--strategies", default="none,block,sequential=2,sequential=4")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reentrant", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off")
    a = ap.parse_args()
    global AUTOCAST
    AUTOCAST = a.autocast == "bf16"
    # the defaults of `remat bench`
    gpt = a.model in ("gpt", "llama")  # the sequence models share the defaults
    a.layers = a.layers or (8 if gpt else 32)
    a.width = a.width or (128 if gpt else 512)
    a.context = a.context or (128 if gpt else 1)
    a.batch = a.batch or (8 if gpt else 256)
    if a.threads:
        torch.set_num_threads(a.threads)
    strategies = a.strategies.split(",")

    model, batch = models.make(a.model, a.layers, a.width, a.heads, a.context, a.batch, a.seed)
    malloc_mode(True)
    step(model, batch, "none", a.reentrant)  # warm-up
    ref = grads(model)
    compile_s = {}
    for s in strategies:  # compiled before anything is measured
        if compile_budget(s) is not None:
            compile_s[s] = make_compiled(model, batch, s)
        # and every strategy runs once, warm: its first step allocates what later steps
        # reuse (block: ~26 MiB more heap growth at L=12 on its first step than on any
        # later one), and the measured step below is a steady one, as remat bench's
        step(model, batch, s, a.reentrant)
    res = {s: {"times": [], "cpu": []} for s in strategies}
    for s in strategies:
        model.zero_grad(set_to_none=True)
        # as remat bench: free heap pages an earlier step left resident would be
        # reused without a page fault and hide part of this step from RSS+
        _libc.malloc_trim(0)
        # and collect garbage cycles first, so that a collection the step triggers cannot
        # free older tensors inside the window and hide as many bytes of its growth
        gc.collect()
        with RssSampler() as r:
            loss = step(model, batch, s, a.reentrant)
        g = grads(model)
        res[s]["rss_growth_bytes"] = max(0, r.peak - r.start)
        res[s]["heap_growth_bytes"] = r.heap_growth
        res[s]["loss"] = loss
        res[s]["grads_bitwise_equal"] = all(
            (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
            for x, y in zip(ref, g))
        # compiled kernels fuse and reorder: equal up to rounding, not to the bit
        res[s]["grads_max_abs_diff"] = max(
            (float((x - y).abs().max()) for x, y in zip(ref, g) if x is not None and y is not None),
            default=0.0)
    malloc_mode(False)
    n = len(strategies)
    for rep in range(a.reps):
        for k in range(n):
            s = strategies[(rep + k) % n]
            t0, c0 = time.perf_counter(), time.process_time()
            step(model, batch, s, a.reentrant)
            res[s]["times"].append(time.perf_counter() - t0)
            res[s]["cpu"].append(time.process_time() - c0)  # every thread, as remat's
    base = statistics.median(res[strategies[0]]["times"]) if "none" not in res else \
        statistics.median(res["none"]["times"])
    out = []
    for s in strategies:
        ms = 1e3 * statistics.median(res[s]["times"])
        name = s + ("(reentrant)" if a.reentrant and s != "none" else "")
        out.append({"strategy": name, "step_ms": ms, "overhead": ms / (1e3 * base),
                    "rss_growth_bytes": res[s]["rss_growth_bytes"],
                    "heap_growth_bytes": res[s]["heap_growth_bytes"], "loss": res[s]["loss"],
                    "grads_bitwise_equal": res[s]["grads_bitwise_equal"],
                    "grads_max_abs_diff": res[s]["grads_max_abs_diff"],
                    "step_ms_all": [1e3 * t for t in res[s]["times"]],
                    "step_cpu_ms": 1e3 * statistics.median(res[s]["cpu"]),
                    "step_cpu_ms_all": [1e3 * t for t in res[s]["cpu"]]})
        if s in compile_s:
            out[-1]["compile_s"] = compile_s[s]
            out[-1]["activation_memory_budget"] = compile_budget(s)
    params = sum(p.numel() for p in model.parameters())
    doc = {"command": "bench_torch", "torch": torch.__version__, "model": a.model,
           "layers": a.layers, "width": a.width, "heads": a.heads, "context": a.context,
           "batch": a.batch, "params": params, "threads": torch.get_num_threads(),
           "reps": a.reps, "strategies": out}
    if a.json:
        print(json.dumps(doc))
        return
    print(f"PyTorch {torch.__version__}: {a.model.upper()}, {a.layers} layers, width {a.width}, "
          f"batch {a.batch} ({params / 1e6:.2f}M parameters), {torch.get_num_threads()} threads, "
          f"{a.reps} reps")
    heap = f" {'heap+ MiB':>10}" if HEAP else ""
    print(f"{'strategy':<24} {'step ms':>9} {'time':>8} {'RSS+ MiB':>10}{heap}  gradients")
    for o in out:
        h = f" {o['heap_growth_bytes'] / 2**20:>10.1f}" if HEAP else ""
        print(f"{o['strategy']:<24} {o['step_ms']:>9.1f} {o['overhead']:>7.2f}x "
              f"{o['rss_growth_bytes'] / 2**20:>10.1f}{h}  "
              f"{'bitwise equal' if o['grads_bitwise_equal'] else 'max |diff| %.2g' % o['grads_max_abs_diff']}")


if __name__ == "__main__":
    main()
