#!/usr/bin/python3
"""PyTorch DDP (gloo) on the GPT of models.py: the counterpart of
`mpirun -np N remat train` for bench/dist/scaling.sh's comparison.

Each of --world processes (torch.multiprocessing, gloo over localhost, one
thread each) trains the same GPT with AdamW on its own random batch of
--batch sequences for --steps steps, under --checkpoint none|block
(torch.utils.checkpoint, use_reentrant as --reentrant says; DDP with
reentrant checkpointing needs static_graph=True in PyTorch, which is set
then). Prints one JSON line: world size, median step ms over the steps
after the first, global tokens/s, and the peak RSS (VmHWM) of each rank.

    /usr/bin/python3 bench/pytorch/ddp_torch.py --world 2 --checkpoint block
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def worker(rank, a, q):
    # DDP wraps forward(): make forward the loss under the strategy
    models.GPT.forward = lambda self, idx, tgt: self.loss(idx, tgt, strategy=a.checkpoint,
                                                          reentrant=a.reentrant)
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    m, _ = models.make("gpt", a.layers, a.width, a.heads, a.context, a.batch, seed=1)
    # gloo cannot broadcast the bool causal-mask buffers (identical anyway)
    DDP._set_params_and_buffers_to_ignore_for_model(
        m, [n for n, _ in m.named_buffers() if n.endswith("mask")])
    static = a.checkpoint != "none" and a.reentrant and not a.find_unused
    ddp = DDP(m, static_graph=static, find_unused_parameters=a.find_unused)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(100 + rank)
    times = []
    for _ in range(a.steps):
        idx = torch.randint(0, 128, (a.batch, a.context), generator=g)
        tgt = torch.randint(0, 128, (a.batch, a.context), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx, tgt)  # forward() is the loss (set in main)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    q.put((rank, statistics.median(times[1:]) * 1e3, vm_hwm()))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--checkpoint", default="none", choices=["none", "block"])
    ap.add_argument("--reentrant", action="store_true")
    ap.add_argument("--find-unused", action="store_true",
                    help="find_unused_parameters=True (no static graph): with --reentrant this is "
                         "PyTorch's 'Expected to mark a variable ready only once' failure")
    ap.add_argument("--port", type=int, default=29517)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, a, q)) for r in range(a.world)]
    for p in ps:
        p.start()
    res = sorted(q.get() for _ in ps)
    for p in ps:
        p.join()
    step_ms = max(r[1] for r in res)
    print(json.dumps({"world_size": a.world, "checkpoint": a.checkpoint, "step_ms": step_ms,
                      "tokens_per_s": a.world * a.batch * a.context / (step_ms / 1e3),
                      "peak_rss_bytes_per_rank": [r[2] for r in res]}))


if __name__ == "__main__":
    main()
