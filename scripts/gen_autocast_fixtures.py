#!/usr/bin/python3
"""Golden outputs and gradients of remat's autocast ops from PyTorch 1.13's cpu autocast.

Writes tests/fixtures/autocast/ops.txt (read by tests/test_autocast_fixtures.c). Each case runs
one op under torch.autocast('cpu', dtype=torch.bfloat16) on inputs of the dtype given, then
backward of sum(out.float() * gout). For the ops remat keeps in f32 that PyTorch 1.13's cpu
list leaves in bf16 (softmax, log_softmax, layer_norm, sum: docs/autocast.md), the reference
is the op on the input cast to f32 (PyTorch's CUDA policy). Inputs are generated from a
formula both sides compute (x[i] = lo + (hi - lo) * frac(i * 0.6180339887 + seed * 0.1)).
Format, one item per line:  case NAME OP ATOL RTOL / in DTYPE NDIM SHAPE... / gout NDIM
SHAPE... VALUES / out NDIM SHAPE... VALUES / grad INDEX NDIM SHAPE... VALUES / end.
Usage: /usr/bin/python3 scripts/gen_autocast_fixtures.py tests/fixtures/autocast/ops.txt
       PYTHON scripts/gen_autocast_fixtures.py --only REGEX tests/fixtures/autocast/ops.txt
       (the matching cases alone, the others kept: rms_norm_bf16_in and attention_gqa_causal
       were written so by a PyTorch 2.x, the file's header lines say which)
"""
import math
import re
import sys

import torch


def gen(shape, seed, lo=-2.0, hi=2.0):
    n = math.prod(shape)
    v = [lo + (hi - lo) * ((i * 0.6180339887 + seed * 0.1) % 1.0) for i in range(n)]
    return torch.tensor(v, dtype=torch.float32).reshape(shape)


def fmt(t):
    t = t.detach().float().contiguous()
    return " ".join([str(t.dim())] + [str(s) for s in t.shape] + ["%.9g" % x for x in t.flatten().tolist()])


CASES = []


def case(name, op, atol, rtol, ins, fn):
    CASES.append((name, op, atol, rtol, ins, fn))


def causal_attention(q, k, v):  # composed: PyTorch 1.13 has no fused SDPA
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    T = q.shape[-2]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    p = torch.softmax(s.float().masked_fill(mask, float("-inf")), -1)
    return torch.matmul(p, v)


case("linear", "linear", 2e-2, 2e-2, [("f32", (4, 5, 24), 1), ("f32", (16, 24), 2), ("f32", (16,), 3)],
     lambda x, w, b: torch.nn.functional.linear(x, w, b))
case("matmul_batched", "matmul", 2e-2, 2e-2, [("f32", (3, 8, 20), 4), ("f32", (3, 20, 12), 5)],
     lambda a, b: torch.matmul(a, b))
case("attention_causal", "attention", 3e-2, 3e-2,
     [("f32", (2, 2, 8, 16), 6), ("f32", (2, 2, 8, 16), 7), ("f32", (2, 2, 8, 16), 8)],
     causal_attention)
case("softmax_bf16_in", "softmax", 1e-3, 1e-3, [("bf16", (4, 10), 9)],
     lambda x: torch.softmax(x.float(), -1))
case("log_softmax_bf16_in", "log_softmax", 1e-3, 1e-3, [("bf16", (4, 10), 10)],
     lambda x: torch.log_softmax(x.float(), -1))
case("layer_norm_bf16_in", "layer_norm", 1e-3, 1e-3, [("bf16", (3, 16), 11), ("f32", (16,), 12), ("f32", (16,), 13)],
     lambda x, w, b: torch.nn.functional.layer_norm(x.float(), (16,), w, b, 1e-5))
case("cross_entropy_bf16_in", "cross_entropy", 1e-3, 1e-3, [("bf16", (6, 7), 14)],
     lambda x: torch.nn.functional.cross_entropy(x, torch.tensor([0, 3, 6, 2, 1, 5])))
case("mse_loss_bf16_in", "mse_loss", 1e-3, 1e-3, [("bf16", (5, 6), 15), ("f32", (5, 6), 16)],
     lambda a, b: torch.nn.functional.mse_loss(a, b))
case("sum_bf16_in", "sum_all", 1e-3, 1e-3, [("bf16", (7, 9), 17)], lambda x: x.float().sum())


def rms_norm_f32(x, w):  # remat's f32 category, as Hugging Face's LlamaRMSNorm computes
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


# issue 31's ops (written with --only by a PyTorch 2.x: see the file's header lines)
case("rms_norm_bf16_in", "rms_norm", 1e-3, 1e-3, [("bf16", (3, 16), 18), ("f32", (16,), 19)], rms_norm_f32)


def gqa_causal_attention(q, k, v):  # each kv head repeated over its 2 query heads
    return causal_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1))


case("attention_gqa_causal", "attention", 3e-2, 3e-2,
     [("f32", (2, 4, 8, 16), 20), ("f32", (2, 2, 8, 16), 21), ("f32", (2, 2, 8, 16), 22)],
     gqa_causal_attention)


# remat_layer_norm_to / remat_add_layer_norm_to (bf16): the norm in f32, its output cast to bf16
case("layer_norm_to_bf16", "layer_norm_to", 1e-2, 1e-2, [("f32", (3, 16), 23), ("f32", (16,), 24), ("f32", (16,), 25)],
     lambda x, w, b: torch.nn.functional.layer_norm(x.float(), (16,), w, b, 1e-5).to(torch.bfloat16))
case("add_layer_norm_to_bf16", "add_layer_norm_to", 1e-2, 1e-2,
     [("f32", (3, 16), 26), ("bf16", (3, 16), 27), ("f32", (16,), 28), ("f32", (16,), 29)],
     lambda x, r, w, b: torch.nn.functional.layer_norm(x + r.float(), (16,), w, b, 1e-5).to(torch.bfloat16))


def read_cases(path):
    """The header lines and each case's lines, by name, of an existing file."""
    head, cases, cur = [], {}, None
    with open(path) as f:
        for ln in f.read().splitlines():
            if ln.startswith("#") and cur is None and not cases:
                head.append(ln)
            elif ln.startswith("case "):
                cur = ln.split()[1]
                cases[cur] = [ln]
            elif cur is not None:
                cases[cur].append(ln)
    return head, cases


def main(path, only=None):
    """Every case, or (only: a regex) the matching ones, the others kept as they are."""
    lines = ["# torch %s cpu autocast (bf16); scripts/gen_autocast_fixtures.py" % torch.__version__]
    kept = {}
    if only:
        head, kept = read_cases(path)
        note = "# torch %s cpu autocast (bf16): the cases matching %s (--only)" % (torch.__version__, only.pattern)
        lines = [h for h in head if h != note] + [note]
    for name, op, atol, rtol, ins, fn in CASES:
        if only and not only.fullmatch(name):
            assert name in kept, "case %s is not in %s: run without --only" % (name, path)
            lines += kept[name]
            continue
        xs = []
        for dt, shape, seed in ins:
            x = gen(shape, seed)
            if dt == "bf16":
                x = x.bfloat16()
            xs.append(x.requires_grad_())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(*xs)
        gout = gen(tuple(y.shape), 99, -1.0, 1.0)
        (y.float() * gout).sum().backward()
        lines.append("case %s %s %g %g" % (name, op, atol, rtol))
        for (dt, shape, seed) in ins:
            lines.append("in %s %d %s %d" % (dt, len(shape), " ".join(map(str, shape)), seed))
        lines.append("gout " + fmt(gout))
        lines.append("out " + fmt(y))
        for i, x in enumerate(xs):
            lines.append("grad %d %s" % (i, fmt(x.grad)))
        lines.append("end")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    only = None
    if len(args) >= 2 and args[0] == "--only":
        only, args = re.compile(args[1]), args[2:]
    main(args[0] if args else "tests/fixtures/autocast/ops.txt", only)
