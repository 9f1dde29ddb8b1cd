#!/usr/bin/env python3
"""scripts/gen_safetensors_fixtures.py — safetensors files written by the real
`safetensors` package (and a sharded checkpoint by huggingface_hub), for
tests/test_safetensors.c. Offline; not run by CI or `make test`.

    python3 -m venv V && V/bin/pip install torch safetensors huggingface_hub
    V/bin/python scripts/gen_safetensors_fixtures.py tests/fixtures/safetensors \
        [--remat-copy build/example_safetensors_copy]

Each float tensor NAME comes with NAME.f64, its exact values as F64 (every
F16/BF16/F32 value is a double), so that the C tests compare without a
formula of their own. With --remat-copy, remat's example program copies each
fixture into a file remat writes, and this script checks that `safetensors`
loads remat's file with the same names, dtypes, values and metadata.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def floats(n, dtype):
    # values across the range, with the awkward ones: -0.0, a subnormal of the
    # dtype, its largest finite value, infinities and a NaN
    base = torch.linspace(-3.0, 3.0, n, dtype=torch.float64) * 1.2345
    info = torch.finfo(dtype)
    special = torch.tensor([-0.0, info.tiny / 4, info.max, float("inf"), float("-inf"), float("nan"),
                            1.0 / 3.0, -2.5e-3], dtype=torch.float64)
    v = torch.cat([special, base])[:n]
    return v.to(dtype)


def dtypes_file(out):
    t = {}
    for name, dt, shape in [("f32", torch.float32, (3, 5)), ("f16", torch.float16, (4, 3)),
                            ("bf16", torch.bfloat16, (2, 2, 3)), ("f64", torch.float64, (11,))]:
        n = 1
        for s in shape:
            n *= s
        x = floats(n, dt).reshape(shape)
        t[name] = x
        t[name + ".f64"] = x.to(torch.float64).clone()
    t["i64"] = torch.tensor([0, 1, -1, 2**40 + 3, -(2**62), 2**63 - 1, 7], dtype=torch.int64)
    t["i32"] = torch.tensor([[-(2**31), 2**31 - 1], [5, -6]], dtype=torch.int32)
    t["i16"] = torch.tensor([-32768, 32767, 3], dtype=torch.int16)
    t["i8"] = torch.tensor([-128, 127, 0, -1], dtype=torch.int8)
    t["u8"] = torch.tensor([0, 255, 17], dtype=torch.uint8)
    t["bool"] = torch.tensor([True, False, True, True], dtype=torch.bool)
    t["scalar"] = torch.tensor(2.75, dtype=torch.float32)
    t["empty"] = torch.zeros((0, 4), dtype=torch.float32)
    save_file(t, os.path.join(out, "dtypes.safetensors"),
              metadata={"format": "pt", "note": "h\u00e9llo \u2713"})


def sharded(out):
    from huggingface_hub import save_torch_state_dict
    g = torch.Generator().manual_seed(31)
    sd = {
        "embed.weight": torch.randn(16, 8, generator=g),
        "layers.0.w": torch.randn(8, 8, generator=g),
        "layers.0.b": torch.randn(8, generator=g),
        "layers.1.w": torch.randn(8, 8, generator=g),
        "layers.1.b": torch.randn(8, generator=g),
        "head.weight": torch.randn(16, 8, generator=g).to(torch.bfloat16),
    }
    d = os.path.join(out, "sharded")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    save_torch_state_dict(sd, d, max_shard_size=400)
    files = sorted(os.listdir(d))
    assert "model.safetensors.index.json" in files and len(files) >= 3, files
    # every value once more, in one file beside the shards, as F64
    save_file({k: v.to(torch.float64) for k, v in sd.items()},
              os.path.join(out, "sharded_expected.safetensors"))


def check_remat_copy(exe, path):
    """remat reads `path` and writes a copy; safetensors must load the copy."""
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "copy.safetensors")
        subprocess.run([exe, path, dst], check=True)
        ref = load_file(path)
        got = load_file(dst)
        # remat has no f16 (it loads F16 as f32), and writes bool as U8
        widened = {torch.float16: torch.float32, torch.bool: torch.uint8, torch.int32: torch.int64,
                   torch.int16: torch.int64, torch.int8: torch.int64}
        assert set(ref) == set(got), (set(ref) ^ set(got))
        for k, v in ref.items():
            w = got[k]
            assert w.dtype == widened.get(v.dtype, v.dtype), (k, v.dtype, w.dtype)
            assert w.shape == v.shape, (k, v.shape, w.shape)
            assert torch.equal(w.to(torch.float64).nan_to_num(7.0), v.to(torch.float64).nan_to_num(7.0)), k
        with safe_open(path, "pt") as a, safe_open(dst, "pt") as b:
            assert a.metadata() == b.metadata(), (a.metadata(), b.metadata())
        print(f"checked: safetensors loads remat's copy of {os.path.basename(path)} "
              f"({len(ref)} tensors, same values and metadata)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--remat-copy", help="build/example_safetensors_copy: check files remat writes")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dtypes_file(a.out)
    sharded(a.out)
    if a.remat_copy:
        check_remat_copy(a.remat_copy, os.path.join(a.out, "dtypes.safetensors"))
        for f in sorted(os.listdir(os.path.join(a.out, "sharded"))):
            if f.endswith(".safetensors"):
                check_remat_copy(a.remat_copy, os.path.join(a.out, "sharded", f))
    print("wrote", a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
