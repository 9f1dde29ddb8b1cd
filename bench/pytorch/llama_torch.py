#!/usr/bin/env python3
"""bench/pytorch/llama_torch.py — PyTorch's side of the Llama benchmark
(bench/llama_vs_torch.py runs both sides interleaved; bench/bench_llama.c is
remat's): transformers' LlamaForCausalLM, eager PyTorch (no torch.compile),
loaded from the directory `bench_llama --export` wrote, so both start from the
same weights, on the same token ids.

    V/bin/python bench/pytorch/llama_torch.py --dir DIR --step none|block|budget \
        [--layers-checkpointed 0,1,...] [--batch B] [--context T] [--reps N] [--threads T]
    V/bin/python bench/pytorch/llama_torch.py --dir DIR --sample N [--prompt P] [--reps R]

--step: forward, cross-entropy against the next tokens, backward,
torch.optim.AdamW (lr 1e-4, PyTorch's defaults otherwise); block checkpoints
every decoder layer (model.gradient_checkpointing_enable, use_reentrant=False);
budget checkpoints the layers --layers-checkpointed lists (those remat's budget
plan does not store: eager PyTorch has no planner), each on its own. Prints one
JSON line as bench_llama does: each step's seconds after a warm-up step, the
first step's loss, the C heap's peak growth over the step (with
build/libremat_heap_peak.so preloaded: the same counter remat's side reads) and
RSS growth. --sample: greedy model.generate of N new tokens after a P-token
prompt with the KV cache; the seconds of each run and the ids.
"""
import argparse
import ctypes
import json
import resource
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM


def heap_counters():
    try:
        lib = ctypes.CDLL(None)
        reset, peak = lib.remat_heap_peak_reset, lib.remat_heap_peak_bytes
    except AttributeError:
        return None
    reset.restype = peak.restype = ctypes.c_int64
    return reset, peak


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def token_ids(b, t, vocab, shift):
    # bench_llama.c's formula
    return torch.tensor([[((i * (t + 1) + j + shift) * 7919 + 13) % vocab for j in range(t)]
                         for i in range(b)], dtype=torch.long)


def run_steps(a, model):
    vocab = model.config.vocab_size
    x, y = token_ids(a.batch, a.context, vocab, 0), token_ids(a.batch, a.context, vocab, 1)
    model.train()
    if a.step in ("block", "budget"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if a.step == "budget":
            keep = {int(i) for i in a.layers_checkpointed.split(",") if i != ""}
            for i, layer in enumerate(model.model.layers):
                layer.gradient_checkpointing = i in keep
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    loss0 = step()  # warm-up: the optimizer state
    heap = heap_counters()
    times, heap_peak, rss0 = [], 0, rss_kib()
    rss_peak = rss0
    for _ in range(a.reps):
        h0 = heap[0]() if heap else 0
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if heap:
            heap_peak = max(heap_peak, heap[1]() - h0)
        rss_peak = max(rss_peak, rss_kib())
    print(json.dumps({"side": "torch", "strategy": a.step, "threads": torch.get_num_threads(),
                      "batch": a.batch, "context": a.context, "loss0": loss0, "step_s": times,
                      "heap_peak_bytes": heap_peak if heap else None,
                      "rss_growth_kib": rss_peak - rss0, "torch": torch.__version__,
                      "attn": model.config._attn_implementation}))


def run_sample(a, model):
    model.eval()
    vocab = model.config.vocab_size
    prompt = token_ids(1, a.prompt, vocab, 0)
    times, out = [], None
    with torch.no_grad():
        for r in range(a.reps + 1):  # run 0: warm-up
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=a.sample, min_new_tokens=a.sample,
                                 do_sample=False, use_cache=True, pad_token_id=0)
            if r:
                times.append(time.perf_counter() - t0)
    print(json.dumps({"side": "torch", "sample": a.sample, "prompt": a.prompt,
                      "threads": torch.get_num_threads(), "run_s": times,
                      "ids": out[0, a.prompt:].tolist(), "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--step", choices=["none", "block", "budget"])
    ap.add_argument("--layers-checkpointed", default="")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--prompt", type=int, default=16)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.float32)
    if a.step:
        run_steps(a, model)
    elif a.sample:
        run_sample(a, model)
    else:
        ap.error("--step or --sample")


if __name__ == "__main__":
    main()
