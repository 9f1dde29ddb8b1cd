#!/usr/bin/env python3
"""bench/pytorch/safetensors_load.py — the Python side of bench/bench_safetensors.c:
loading a safetensors file with the `safetensors` package, time and peak resident
memory (VmHWM growth over the RSS before the load).

    V/bin/python bench/pytorch/safetensors_load.py FILE [rounds]

Two ways of loading into parameters made beforehand (as bench_safetensors makes
them; what model.load_state_dict(load_file(FILE)) amounts to), each run cold (the
file dropped from the page cache with posix_fadvise) and warm, interleaved:
  load_file   safetensors.torch.load_file(FILE), then copy_ into the parameters
              (load_file alone maps the file and reads nothing: the copy reads it)
  safe_open   safe_open(FILE) + get_tensor + copy_, tensor by tensor
The last line is JSON. FILE: the one `bench_safetensors MiB rounds DIR --keep` leaves.
"""
import json
import os
import statistics
import sys
import time

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return -1


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    with safe_open(path, "pt") as f:
        params = {k: torch.zeros(f.get_slice(k).get_shape(), dtype=torch.float32) for k in f.keys()}
    ways = ("load_file", "safe_open")
    res = {(w, t): [] for w in ways for t in ("cold", "warm")}
    growth = {w: 0 for w in ways}
    for r in range(rounds):
        for way in ways:
            for temp in ("cold", "warm"):
                if temp == "cold":
                    drop(path)
                reset_hwm()
                before = status_kib("VmRSS:")
                t0 = time.perf_counter()
                if way == "load_file":
                    sd = load_file(path)
                    with torch.no_grad():
                        for k, v in sd.items():
                            params[k].copy_(v)
                    dt = time.perf_counter() - t0
                    g = status_kib("VmHWM:") - before
                    del sd
                else:
                    with torch.no_grad(), safe_open(path, "pt") as f:
                        for k in f.keys():
                            params[k].copy_(f.get_tensor(k))
                    dt = time.perf_counter() - t0
                    g = status_kib("VmHWM:") - before
                res[(way, temp)].append(dt)
                growth[way] = max(growth[way], g)
                print(f"round {r} {way} {temp}: {dt:.3f} s, peak +{g / 1024:.1f} MiB "
                      f"over RSS {before / 1024:.0f} MiB")
    out = {"model_mib": sum(p.numel() for p in params.values()) * 4 / 2**20}
    for (way, temp), v in res.items():
        out[f"{way}_{temp}_s_median"] = round(statistics.median(v), 4)
        out[f"{way}_{temp}_s_min"] = round(min(v), 4)
        out[f"{way}_{temp}_s_max"] = round(max(v), 4)
    for way, g in growth.items():
        out[f"{way}_peak_growth_mib"] = round(g / 1024, 1)
    out["torch"] = torch.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
