#!/usr/bin/env python3
"""Generates the PyTorch fixtures of remat/optim.h for tests/test_optim.c.

Usage:  python3 scripts/gen_optim_fixtures.py tests/fixtures/optim   (make fixtures runs it)

Each case runs a few steps of torch.optim.SGD / torch.optim.AdamW (PyTorch
1.13, single-tensor loops), with torch.nn.utils.clip_grad_norm_, a warm-up +
cosine schedule (SequentialLR of LinearLR and CosineAnnealingLR) and gradient
accumulation over micro-batches where the case says so, and writes one file
per case in the format of docs/fixtures.md:

    param kind adamw|sgd, lr, weight_decay, ...  the optimizer's settings
    param steps S                                 optimizer updates
    param micro M                                 micro-batches per update
    param decay D0 D1 ...                         each parameter's weight decay (its group's)
    input p<i>                                    parameter i before the first update
    input g<s>_<j>_<i>                            the gradient of parameter i from micro-batch
                                                  j of update s (absent: no gradient)
    output p<i>_<s>                               parameter i after update s (1-based)
    output exp_avg<i> / exp_avg_sq<i>             the state after the last update
    output lr / norm                              each update's rate / gradient norm (f64)

A micro-batch's gradient is produced by a real backward of sum(p * g) / M (so
gradients accumulate in .grad as a training loop's would); the remat test
runs sum(p * g) per micro-batch and lets the optimizer take the mean.
CI has no PyTorch: the files are committed.
"""

import math
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_fixtures as gf  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)

torch = gf.torch
COMMAND = "python3 scripts/gen_optim_fixtures.py tests/fixtures/optim"

CASES = []


def case(name, kind, shapes, steps, micro=1, decay=None, opts=None, clip=0.0, schedule=None,
         skip=(), large=False):
    CASES.append(dict(name=name, kind=kind, shapes=shapes, steps=steps, micro=micro,
                      decay=decay, opts=opts or {}, clip=clip, schedule=schedule,
                      skip=set(skip), large=large))


# Schedules run to their last step (k = N: min_lr); past it remat holds min_lr while
# CosineAnnealingLR rises again, so no case goes further.
# AdamW: PyTorch's defaults but a larger lr, then groups (no-decay), then a
# parameter without a gradient at one update (its state and step stay).
case("adamw_basic", "adamw", [(3, 4), (4,)], 5, opts=dict(lr=1e-2, weight_decay=0.1))
case("adamw_groups", "adamw", [(2, 5), (5,), (3,)], 4, decay=[0.05, 0.0, 0.0],
     opts=dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-6))
case("adamw_skip", "adamw", [(4, 3), (3,)], 4, skip=[(1, 1), (2, 1)],
     opts=dict(lr=1e-2, weight_decay=0.01))
case("sgd_plain", "sgd", [(3, 3), (3,)], 3, opts=dict(lr=0.1))
case("sgd_momentum", "sgd", [(3, 4), (4,)], 4,
     opts=dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01))
case("sgd_nesterov", "sgd", [(2, 3), (3,)], 4, opts=dict(lr=0.05, momentum=0.8, nesterov=True))
case("clip_sgd", "sgd", [(3, 4), (4,)], 3, clip=0.5, opts=dict(lr=0.1, momentum=0.5))
case("clip_unclipped", "sgd", [(3, 4)], 2, clip=100.0, opts=dict(lr=0.1))
case("clip_large", "sgd", [(300, 300)], 1, clip=1.0, large=True, opts=dict(lr=0.5))
case("schedule_cosine", "adamw", [(3, 2)], 9, schedule=(3, 8, 1e-4),
     opts=dict(lr=5e-2, weight_decay=0.01))
case("schedule_no_warmup", "sgd", [(4,)], 6, schedule=(0, 5, 0.0), opts=dict(lr=0.2))
case("accum_adamw_clip", "adamw", [(3, 4), (4,)], 3, micro=3, clip=0.3,
     opts=dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1))


def make_optimizer(c, params, dt):
    o = dict(c["opts"])
    decay = c["decay"]
    if decay is None:
        wd = o.get("weight_decay", 0.01 if c["kind"] == "adamw" else 0.0)
        decay = [wd] * len(params)
    groups = [dict(params=[p], weight_decay=d) for p, d in zip(params, decay)]
    o.pop("weight_decay", None)
    if c["kind"] == "adamw":
        opt = torch.optim.AdamW(groups, foreach=False, **o)
    else:
        opt = torch.optim.SGD(groups, foreach=False, **o)
    return opt, decay


def make_scheduler(c, opt):
    if not c["schedule"]:
        return None
    w, n, min_lr = c["schedule"]
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=n - w, eta_min=min_lr)
    if w == 0:
        return cos
    lin = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0,
                                            total_iters=w - 1)
    return torch.optim.lr_scheduler.SequentialLR(opt, [lin, cos], milestones=[w])


def closed_form_lr(c, lr, k):
    """remat_lr_at's formula (remat/optim.h), to check PyTorch's schedulers agree."""
    w, n, min_lr = c["schedule"]
    if k < w:
        return lr * (k + 1) / w
    if k >= n:
        return min_lr
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * (k - w) / (n - w)))


def run_case(c, dname):
    dt = gf.DTYPES[dname]
    name = c["name"]
    seed = zlib.crc32(name.encode())
    r = gf.Rng(seed)
    recipes = {}

    def tensor(key, shape, lo, hi):
        if c["large"]:
            rec = r.recipe(shape, lo, hi, dt)
            recipes[key] = rec
            return rec.tensor()
        return r.uniform(shape, lo, hi).to(dt)

    params = [tensor("p%d" % i, s, -1.0, 1.0).clone().requires_grad_(True)
              for i, s in enumerate(c["shapes"])]
    init = [p.detach().clone() for p in params]
    grads = {}
    for s in range(c["steps"]):
        for j in range(c["micro"]):
            for i, shp in enumerate(c["shapes"]):
                if (s, i) in c["skip"]:
                    continue
                grads[(s, j, i)] = tensor("g%d_%d_%d" % (s, j, i), shp, -2.0, 2.0)
    opt, decay = make_optimizer(c, params, dt)
    sched = make_scheduler(c, opt)
    lrs, norms, after = [], [], []
    for s in range(c["steps"]):
        opt.zero_grad(set_to_none=True)
        for j in range(c["micro"]):
            terms = [(p * grads[(s, j, i)]).sum() for i, p in enumerate(params)
                     if (s, j, i) in grads]
            loss = sum(terms) / c["micro"]
            loss.backward()
        lr = opt.param_groups[0]["lr"]
        lrs.append(lr)
        if c["schedule"]:
            want = closed_form_lr(c, c["opts"]["lr"], s)
            assert abs(lr - want) <= 1e-12 * max(1.0, abs(want)), (name, s, lr, want)
        if c["clip"] > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, c["clip"])))
        opt.step()
        if sched:
            sched.step()
        after.append([p.detach().clone() for p in params])

    k = c["kind"]
    o = c["opts"]
    lines = [
        "# remat optimizer fixture -- generated by scripts/gen_optim_fixtures.py, do not edit",
        "# torch %s" % torch.__version__,
        "# command: %s" % COMMAND,
        "case %s_%s" % (name, dname),
        "op %s" % k,
        "dtype %s" % dname,
        "param kind %s" % k,
        "param lr %r" % float(o["lr"]),
        "param steps %d" % c["steps"],
        "param micro %d" % c["micro"],
        "param decay " + " ".join(repr(float(d)) for d in decay),
        "param clip %r" % float(c["clip"]),
    ]
    if k == "adamw":
        b1, b2 = o.get("betas", (0.9, 0.999))
        lines += ["param betas %r %r" % (float(b1), float(b2)), "param eps %r" % float(o.get("eps", 1e-8))]
    else:
        lines += ["param momentum %r" % float(o.get("momentum", 0.0)),
                  "param dampening %r" % float(o.get("dampening", 0.0)),
                  "param nesterov %d" % int(bool(o.get("nesterov", False)))]
    if c["schedule"]:
        w, n, min_lr = c["schedule"]
        lines.append("param schedule %d %d %r" % (w, n, float(min_lr)))
    for i, p in enumerate(init):
        lines.append(gf.tensor_line("input", "p%d" % i, p, recipe=recipes.get("p%d" % i)))
    for (s, j, i), g in sorted(grads.items()):
        key = "g%d_%d_%d" % (s, j, i)
        lines.append(gf.tensor_line("input", key, g, recipe=recipes.get(key)))
    for s, ps in enumerate(after):
        for i, p in enumerate(ps):
            lines.append(gf.tensor_line("output", "p%d_%d" % (i, s + 1), p, sample=c["large"]))
    for i, p in enumerate(params):
        st = opt.state[p]
        slots = [("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")] if k == "adamw" else \
            [("exp_avg", "momentum_buffer")]
        for ours, theirs in slots:
            if st.get(theirs) is not None:
                lines.append(gf.tensor_line("output", "%s%d" % (ours, i), st[theirs], sample=c["large"]))
    lines.append(gf.tensor_line("output", "lr", torch.tensor(lrs, dtype=torch.float64)))
    if norms:
        lines.append(gf.tensor_line("output", "norm", torch.tensor(norms, dtype=torch.float64)))
    lines.append("end")
    return "%s_%s" % (name, dname), "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s OUTPUT_DIR   (tests/fixtures/optim)\n" % argv[0])
        return 2
    outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for f in os.listdir(outdir):
        if f.endswith(".txt"):
            os.remove(os.path.join(outdir, f))
    names = []
    for c in CASES:
        for dname in gf.DTYPES:
            cname, text = run_case(c, dname)
            with open(os.path.join(outdir, cname + ".txt"), "w") as fh:
                fh.write(text)
            names.append(cname)
    with open(os.path.join(outdir, "index.txt"), "w") as fh:
        fh.write("# remat optimizer fixtures, one line per file <case>.txt\n")
        fh.write("# torch %s; command: %s\n" % (torch.__version__, COMMAND))
        fh.write("\n".join(names) + "\n")
    print("gen_optim_fixtures: wrote %d cases to %s" % (len(names), outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
