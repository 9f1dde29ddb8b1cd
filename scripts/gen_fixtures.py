#!/usr/bin/env python3
"""Generates the PyTorch golden fixtures for tests/test_fixtures.c.

Usage:  python3 scripts/gen_fixtures.py tests/fixtures      (or: make fixtures)
        python3 scripts/gen_fixtures.py --only REGEX tests/fixtures
                (the cases whose names match REGEX alone; the other files and their
                index lines are kept as they are, whatever torch made them)

For every remat op (include/remat/ops.h) it builds small deterministic inputs
(seeded per case, so cases do not depend on each other or on their order),
runs the PyTorch forward, runs backward with a fixed random upstream gradient
and writes inputs, outputs, upstream gradients and input gradients into one
text file per case, tests/fixtures/<case>.txt, plus tests/fixtures/index.txt
listing every case. The format is described in docs/fixtures.md; in short:

    # comment lines (torch version, generation command)
    case <name>
    op <op>
    dtype f32|f64
    param <name> <token>...            (zero or more)
    input <name> <dtype> <ndim> <shape>... <values>...
    view <input> <kind> <int>...       (zero or more, applied in order)
    output <name> <dtype> <ndim> <shape>... <values>...
    grad_output <output> <dtype> <ndim> <shape>... <values>...
    grad <input> <dtype> <ndim> <shape>... <values>...
    end

Values are row-major; f32 as %.9g, f64 as the shortest repr that round-trips
(at most 17 significant digits), i64 as integers. The `*_large` cases (sizes
above the kernels' OpenMP thresholds) write their inputs and upstream
gradients as generator recipes ("@uniform SEED LO HI", "@randint SEED LO HI",
regenerated bit for bit by tests/support/fixtures.c) and their outputs and
gradients as samples ("@sample STRIDE v0 v1 ..." = flat elements 0, STRIDE,
2*STRIDE, ...). A `grad` line exists for
exactly the inputs that require grad; it is the gradient of the stored
(base) tensor, i.e. after the views of that input were differentiated
through. Dropout in training mode is not generated (remat and PyTorch draw
from different generators); its eval / p == 0 forms are.

CI has no PyTorch: the generated files are committed. Debian's python3-torch
lives in /usr/bin/python3; if the `python3` on PATH cannot import torch (a
pyenv shim, a venv) the script re-executes itself with /usr/bin/python3.
"""

import math
import os
import re
import sys
import zlib

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
        "/usr/bin/python3"
    ) and not os.environ.get("REMAT_GEN_FIXTURES_REEXEC"):
        os.environ["REMAT_GEN_FIXTURES_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.stderr.write(
        "gen_fixtures.py: PyTorch is not importable; install it (Debian: apt-get install python3-torch)\n"
    )
    sys.exit(1)

COMMAND = "python3 scripts/gen_fixtures.py tests/fixtures"
DTYPES = {"f32": torch.float32, "f64": torch.float64}


# ---------------------------------------------------------------------------
# case description
# ---------------------------------------------------------------------------
class Case:
    """One fixture: op, params, inputs (base tensors + views), forward fn."""

    def __init__(self, op, fn, inputs, params=(), views=None, nograd=(), check=None, large=False):
        self.op = op
        self.large = large  # inputs/grad_outputs as recipes, outputs/grads sampled
        self.fn = fn  # fn(dict name -> viewed input) -> tensor or tuple of tensors
        self.inputs = inputs  # list of (name, base tensor)
        self.params = list(params)  # list of (name, [tokens])
        self.views = views or {}  # name -> [(kind, [ints])]
        self.nograd = set(nograd)  # float inputs that must not require grad
        self.check = check  # optional fn(outputs) asserting something about torch's result


M64 = (1 << 64) - 1


def splitmix64(seed, n):
    """The splitmix64 stream that tests/support/fixtures.c reproduces bit for bit."""
    s = seed & M64
    out = []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


def is_pow2(x):
    m, _ = math.frexp(x)
    return x > 0 and m == 0.5


class Recipe:
    """A large tensor written as a generator recipe instead of its values:
    "@uniform SEED LO HI" = LO + (HI-LO) * ((z >> 11) * 2^-53) for the splitmix64
    stream z of SEED (HI-LO a power of two, so the product is exact and C,
    with or without FMA contraction, gets the same doubles), converted to the
    dtype; "@randint SEED LO HI" = LO + (z >> 11) % (HI-LO) as i64."""

    def __init__(self, kind, shape, seed, lo, hi, dt):
        self.kind, self.shape, self.seed, self.lo, self.hi, self.dt = kind, tuple(shape), seed, lo, hi, dt
        if kind == "uniform":
            assert is_pow2(float(hi) - float(lo)), "recipe span must be a power of two"

    def tensor(self):
        n = math.prod(self.shape)
        zs = splitmix64(self.seed, n)
        if self.kind == "uniform":
            lo, span = float(self.lo), float(self.hi) - float(self.lo)
            vals = [lo + span * ((z >> 11) * 2.0 ** -53) for z in zs]
            return torch.tensor(vals, dtype=torch.float64).reshape(self.shape).to(self.dt)
        vals = [int(self.lo) + (z >> 11) % (int(self.hi) - int(self.lo)) for z in zs]
        return torch.tensor(vals, dtype=torch.int64).reshape(self.shape)

    def tail(self):
        if self.kind == "uniform":
            return ["@uniform", str(self.seed), repr(float(self.lo)), repr(float(self.hi))]
        return ["@randint", str(self.seed), str(int(self.lo)), str(int(self.hi))]


class Rng:
    """Per-case deterministic values (a private torch.Generator)."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.n_recipes = 0

    def recipe(self, shape, lo, hi, dt):
        self.n_recipes += 1
        return Recipe("uniform", shape, (self.seed << 8) + self.n_recipes, lo, hi, dt)

    def recipe_int(self, shape, lo, hi):
        self.n_recipes += 1
        return Recipe("randint", shape, (self.seed << 8) + self.n_recipes, lo, hi, torch.int64)

    def uniform(self, shape, lo=-2.0, hi=2.0):
        return torch.rand(shape, generator=self.g, dtype=torch.float64) * (hi - lo) + lo

    def normal(self, shape):
        return torch.randn(shape, generator=self.g, dtype=torch.float64)

    def away0(self, shape, lo=0.5, hi=2.0):
        """Magnitudes in [lo, hi) with random signs (divisors)."""
        mag = self.uniform(shape, lo, hi)
        sign = torch.where(self.uniform(shape, 0.0, 1.0) < 0.5, -1.0, 1.0).to(torch.float64)
        return mag * sign

    def ints(self, shape, lo, hi):
        return torch.randint(lo, hi, shape, generator=self.g, dtype=torch.int64)


def apply_view(t, kind, args):
    if kind == "transpose":
        return t.transpose(args[0], args[1])
    if kind == "permute":
        return t.permute(*args)
    if kind == "slice":
        dim, start, end, step = args
        idx = [slice(None)] * t.dim()
        idx[dim] = slice(start, end, step)
        return t[tuple(idx)]
    if kind == "expand":
        return t.expand(*args)
    raise ValueError("unknown view kind " + kind)


# ---------------------------------------------------------------------------
# the cases: each builder gets (rng, torch dtype) and returns a Case
# ---------------------------------------------------------------------------
BUILDERS = []  # (name, builder)


def case(name):
    def deco(f):
        BUILDERS.append((name, f))
        return f

    return deco


def T(x, dt):
    return x.to(dt)


# ---- binary -----------------------------------------------------------------
BIN = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
}


def bin_inputs(op, r, dt, sa, sb):
    if op == "pow":
        a = r.uniform(sa, 0.5, 2.0)  # base > 0: b is not an integer
        b = r.uniform(sb, -2.0, 2.0)
    elif op == "div":
        a = r.uniform(sa)
        b = r.away0(sb)
    else:
        a = r.uniform(sa)
        b = r.uniform(sb)
    return T(a, dt), T(b, dt)


def make_binary(op, sa, sb, views=None):
    def build(r, dt):
        a, b = bin_inputs(op, r, dt, sa, sb)
        return Case(op, lambda x: BIN[op](x["a"], x["b"]), [("a", a), ("b", b)], views=views)

    return build


for _op in BIN:
    case(_op + "_same")(make_binary(_op, (2, 3), (2, 3)))
    case(_op + "_broadcast")(make_binary(_op, (2, 1, 3), (4, 1)))
    case(_op + "_scalar_tensor")(make_binary(_op, (2, 3), ()))
    # a is the transpose of a stored (3, 2) tensor; b (3,) broadcasts
    case(_op + "_transposed")(make_binary(_op, (3, 2), (3,), views={"a": [("transpose", [0, 1])]}))
    # b is every other column of a stored (2, 6) tensor (non-unit stride)
    case(_op + "_sliced")(make_binary(_op, (2, 3), (2, 6), views={"b": [("slice", [1, 0, 6, 2])]}))
case("add_expanded")(make_binary("add", (2, 3), (2, 1), views={"b": [("expand", [2, 3])]}))
case("mul_both_views")(
    make_binary(
        "mul", (4, 2, 3), (3, 2, 4),
        views={"a": [("permute", [1, 2, 0])], "b": [("transpose", [0, 1])]},
    )
)

# ---- scalar variants ------------------------------------------------------------
SCALAR = {
    "add_scalar": lambda a, s: a + s,
    "sub_scalar": lambda a, s: a - s,
    "rsub_scalar": lambda a, s: s - a,
    "mul_scalar": lambda a, s: a * s,
    "div_scalar": lambda a, s: a / s,
}


def make_scalar(op, s, shape=(2, 3), views=None, positive=False):
    def build(r, dt):
        a = T(r.uniform(shape, 0.5, 2.0) if positive else r.uniform(shape), dt)
        if op == "pow_scalar":
            fn = lambda x: torch.pow(x["a"], s)
            params = [("exponent", [s])]
        else:
            fn = lambda x: SCALAR[op](x["a"], s)
            params = [("s", [s])]
        return Case(op, fn, [("a", a)], params=params, views=views)

    return build


for _op in SCALAR:
    case(_op)(make_scalar(_op, 1.75))
    case(_op + "_neg")(make_scalar(_op, -0.625, shape=(2, 2, 3)))
case("mul_scalar_transposed")(make_scalar("mul_scalar", -1.5, shape=(3, 4),
                                          views={"a": [("transpose", [0, 1])]}))
case("pow_scalar_2")(make_scalar("pow_scalar", 2.0))
case("pow_scalar_3")(make_scalar("pow_scalar", 3.0))
case("pow_scalar_half")(make_scalar("pow_scalar", 0.5, positive=True))
case("pow_scalar_m1p5")(make_scalar("pow_scalar", -1.5, positive=True))
case("pow_scalar_sliced")(make_scalar("pow_scalar", 2.5, shape=(3, 4), positive=True,
                                      views={"a": [("slice", [1, 1, 4, 2])]}))

# ---- unary ------------------------------------------------------------------------
UNARY = {
    "neg": (torch.neg, False),
    "exp": (torch.exp, False),
    "log": (torch.log, True),
    "sqrt": (torch.sqrt, True),
    "tanh": (torch.tanh, False),
    "sigmoid": (torch.sigmoid, False),
    "relu": (torch.relu, False),
}


def make_unary(op, shape=(2, 3, 4), views=None, params=(), fn=None):
    def build(r, dt):
        positive = UNARY[op][1] if op in UNARY else False
        a = T(r.uniform(shape, 0.25, 3.0) if positive else r.uniform(shape, -3.0, 3.0), dt)
        f = fn or UNARY[op][0]
        return Case(op, lambda x: f(x["a"]), [("a", a)], params=params, views=views)

    return build


for _op in UNARY:
    case(_op)(make_unary(_op))
    case(_op + "_transposed")(make_unary(_op, shape=(4, 3), views={"a": [("transpose", [0, 1])]}))
case("exp_expanded")(make_unary("exp", shape=(3, 1), views={"a": [("expand", [2, 3, 4])]}))
case("tanh_sliced")(make_unary("tanh", shape=(3, 8), views={"a": [("slice", [1, 1, 8, 3])]}))
_gelu_erf = lambda t: F.gelu(t)
_gelu_tanh = lambda t: F.gelu(t, approximate="tanh")
case("gelu_erf")(make_unary("gelu", params=[("approximate", ["erf"])], fn=_gelu_erf))
case("gelu_tanh")(make_unary("gelu", params=[("approximate", ["tanh"])], fn=_gelu_tanh))
case("gelu_erf_transposed")(make_unary("gelu", shape=(4, 3), views={"a": [("transpose", [0, 1])]},
                                       params=[("approximate", ["erf"])], fn=_gelu_erf))
case("gelu_tanh_expanded")(make_unary("gelu", shape=(1, 4), views={"a": [("expand", [3, 4])]},
                                      params=[("approximate", ["tanh"])], fn=_gelu_tanh))



# bias_gelu: gelu(x + bias), bias along the last dim (the MLP's first linear's bias, fused)
def make_bias_gelu(shape, form, views=None):
    torch_form = "none" if form == "erf" else "tanh"

    def build(r, dt):
        x = T(r.uniform(shape, -3.0, 3.0), dt)
        n = shape[0] if views else shape[-1]  # the viewed x's last dim
        b = T(r.uniform((n,), -1.0, 1.0), dt)
        return Case("bias_gelu", lambda v: F.gelu(v["x"] + v["bias"], approximate=torch_form),
                    [("x", x), ("bias", b)], params=[("approximate", [form])], views=views)

    return build


case("bias_gelu_erf")(make_bias_gelu((2, 3, 5), "erf"))
case("bias_gelu_tanh")(make_bias_gelu((4, 6), "tanh"))
case("bias_gelu_erf_transposed")(make_bias_gelu((5, 3), "erf", views={"x": [("transpose", [0, 1])]}))


# ---- matmul / linear -----------------------------------------------------------------
def make_matmul(sa, sb, views=None):
    def build(r, dt):
        a, b = T(r.uniform(sa), dt), T(r.uniform(sb), dt)
        return Case("matmul", lambda x: torch.matmul(x["a"], x["b"]), [("a", a), ("b", b)], views=views)

    return build


case("matmul_dot")(make_matmul((4,), (4,)))
case("matmul_mm")(make_matmul((3, 4), (4, 5)))
case("matmul_mv")(make_matmul((3, 4), (4,)))
case("matmul_vm")(make_matmul((4,), (4, 5)))
case("matmul_bmm")(make_matmul((2, 3, 4), (2, 4, 5)))
case("matmul_batched_broadcast")(make_matmul((2, 1, 3, 4), (3, 4, 5)))
case("matmul_3d_2d")(make_matmul((2, 3, 4), (4, 5)))
case("matmul_2d_3d")(make_matmul((3, 4), (2, 4, 5)))
case("matmul_1d_3d")(make_matmul((4,), (2, 4, 5)))
case("matmul_3d_1d")(make_matmul((2, 3, 4), (4,)))
case("matmul_transposed")(make_matmul((4, 3), (5, 4), views={"a": [("transpose", [0, 1])],
                                                             "b": [("transpose", [0, 1])]}))
case("matmul_batched_transposed")(make_matmul((2, 4, 3), (4, 5), views={"a": [("transpose", [1, 2])]}))
case("matmul_expanded")(make_matmul((2, 3, 4), (1, 4, 5), views={"b": [("expand", [2, 4, 5])]}))


def make_linear(sx, out_f, bias=True, views=None):
    def build(r, dt):
        x = T(r.uniform(sx), dt)
        in_f = (apply_view(x, *views["x"][0]) if views else x).shape[-1]
        w = T(r.uniform((out_f, in_f), -1.0, 1.0), dt)
        inputs = [("x", x), ("weight", w)]
        if bias:
            inputs.append(("bias", T(r.uniform((out_f,)), dt)))
            fn = lambda v: F.linear(v["x"], v["weight"], v["bias"])
        else:
            fn = lambda v: F.linear(v["x"], v["weight"])
        return Case("linear", fn, inputs, views=views)

    return build


case("linear_bias")(make_linear((3, 4), 5))
case("linear_nobias")(make_linear((3, 4), 5, bias=False))
case("linear_3d_bias")(make_linear((2, 3, 4), 5))
case("linear_1d")(make_linear((4,), 3))
case("linear_x_transposed")(make_linear((4, 3), 2, views={"x": [("transpose", [0, 1])]}))


# ---- softmax / log_softmax / layer_norm / dropout -----------------------------------------
def make_softmax(op, dim, shape=(2, 3, 4), views=None):
    f = torch.softmax if op == "softmax" else torch.log_softmax

    def build(r, dt):
        a = T(r.uniform(shape, -3.0, 3.0), dt)
        return Case(op, lambda x: f(x["a"], dim), [("a", a)], params=[("dim", [dim])], views=views)

    return build


for _op in ("softmax", "log_softmax"):
    case(_op + "_last")(make_softmax(_op, -1))
    case(_op + "_dim0")(make_softmax(_op, 0))
    case(_op + "_dim1")(make_softmax(_op, 1))
    case(_op + "_transposed")(make_softmax(_op, -1, shape=(5, 3), views={"a": [("transpose", [0, 1])]}))


def make_attention(sq, sk, dv, causal, scale, views=None):
    """remat_attention against the attention of PyTorch's ops (1.13 has no
    F.scaled_dot_product_attention): softmax(q·kᵀ·scale, causal) · v."""

    def build(r, dt):
        q, k = T(r.uniform(sq, -1.5, 1.5), dt), T(r.uniform(sk, -1.5, 1.5), dt)
        v = T(r.uniform(tuple(sk[:-1]) + (dv,)), dt)

        def fn(x):
            qq, kk, vv = x["q"], x["k"], x["v"]
            s = (qq @ kk.transpose(-2, -1)) * (scale or 1.0 / math.sqrt(qq.shape[-1]))
            if causal:
                tq, tk = qq.shape[-2], kk.shape[-2]
                s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
            return torch.softmax(s, -1) @ vv

        return Case("attention", fn, [("q", q), ("k", k), ("v", v)],
                    params=[("causal", [int(causal)]), ("scale", [scale])], views=views)

    return build


case("attention_causal")(make_attention((2, 2, 5, 3), (2, 2, 5, 3), 4, True, 0.0))
case("attention_full_scaled")(make_attention((2, 4, 3), (2, 6, 3), 2, False, 0.4))
case("attention_causal_blocks")(make_attention((1, 70, 4), (1, 70, 4), 3, True, 0.0))
case("attention_transposed")(make_attention((2, 5, 3, 4), (2, 5, 3, 4), 4, True, 0.0,
                                            views={"q": [("transpose", [1, 2])],
                                                   "k": [("transpose", [1, 2])],
                                                   "v": [("transpose", [1, 2])]}))


def make_layer_norm(shape, n_norm, affine, eps=1e-5, views=None):
    def build(r, dt):
        x = T(r.uniform(shape, -2.0, 2.0), dt)
        ns = tuple(shape[len(shape) - n_norm:])
        if views and "x" in views:  # normalized shape of the viewed x
            ns = tuple(apply_view(x, *views["x"][0]).shape[-n_norm:])
        inputs = [("x", x)]
        if affine:
            inputs += [("weight", T(r.uniform(ns, 0.5, 1.5), dt)), ("bias", T(r.uniform(ns, -0.5, 0.5), dt))]
            fn = lambda v: F.layer_norm(v["x"], ns, v["weight"], v["bias"], eps)
        else:
            fn = lambda v: F.layer_norm(v["x"], ns, None, None, eps)
        return Case("layer_norm", fn, inputs, params=[("n_norm", [n_norm]), ("eps", [eps])], views=views)

    return build


case("layer_norm_affine")(make_layer_norm((2, 3, 5), 1, True))
case("layer_norm_plain")(make_layer_norm((2, 3, 5), 1, False))
case("layer_norm_2d_affine")(make_layer_norm((2, 3, 4), 2, True))
case("layer_norm_2d_plain")(make_layer_norm((2, 3, 4), 2, False))
case("layer_norm_eps")(make_layer_norm((3, 4), 1, True, eps=0.1))
case("layer_norm_transposed")(make_layer_norm((6, 3), 1, True, views={"x": [("transpose", [0, 1])]}))


def make_dropout(p, train):
    def build(r, dt):
        a = T(r.uniform((2, 3, 4)), dt)
        return Case("dropout", lambda x: F.dropout(x["a"], p, train), [("a", a)],
                    params=[("p", [p]), ("train", [1 if train else 0])])

    return build


case("dropout_eval")(make_dropout(0.3, False))
case("dropout_p0_train")(make_dropout(0.0, True))


# ---- embedding / losses ---------------------------------------------------------------------
def make_embedding(idx_shape, num=6, dim=3, views=None):
    def build(r, dt):
        w = T(r.uniform((num, dim)), dt)
        idx = r.ints(idx_shape, 0, num)
        idx.view(-1)[0] = idx.view(-1)[-1]  # a repeated index: gradients accumulate
        return Case("embedding", lambda x: F.embedding(x["indices"], x["weight"]),
                    [("weight", w), ("indices", idx)], views=views)

    return build


case("embedding_2d")(make_embedding((2, 4)))
case("embedding_1d")(make_embedding((5,)))
case("embedding_weight_transposed")(make_embedding((3,), num=4, dim=5, views={"weight": [("transpose", [0, 1])]}))


def make_cross_entropy(n, c, ignore_index, ignored_rows=(), transposed=False):
    def build(r, dt):
        # transposed: logits stored as (C, N) and viewed as (N, C)
        logits = T(r.uniform((c, n) if transposed else (n, c), -3.0, 3.0), dt)
        tgt = r.ints((n,), 0, c)
        if ignore_index >= 0:  # keep ignore_index only where we put it
            tgt = torch.where(tgt == ignore_index, (tgt + 1) % c, tgt)
        for i in ignored_rows:
            tgt[i] = ignore_index
        return Case("cross_entropy",
                    lambda x: F.cross_entropy(x["logits"], x["targets"], ignore_index=ignore_index),
                    [("logits", logits), ("targets", tgt)], params=[("ignore_index", [ignore_index])],
                    views={"logits": [("transpose", [0, 1])]} if transposed else None)

    return build


case("cross_entropy_plain")(make_cross_entropy(5, 4, -100))
case("cross_entropy_ignore_m100")(make_cross_entropy(6, 4, -100, ignored_rows=(1, 4)))
case("cross_entropy_ignore_2")(make_cross_entropy(5, 3, 2, ignored_rows=(0,)))
case("cross_entropy_transposed")(make_cross_entropy(4, 3, -100, ignored_rows=(2,), transposed=True))


def make_mse(shape, views=None, sb=None):
    def build(r, dt):
        a = T(r.uniform(shape), dt)
        b = T(r.uniform(sb or shape), dt)
        return Case("mse_loss", lambda x: F.mse_loss(x["a"], x["b"]), [("a", a), ("b", b)], views=views)

    return build


case("mse_loss")(make_mse((2, 3, 4)))
case("mse_loss_b_transposed")(make_mse((3, 4), sb=(4, 3), views={"b": [("transpose", [0, 1])]}))


# ---- reductions -------------------------------------------------------------------------------
def make_reduce(op, dims, keepdim, shape=(2, 3, 4), views=None):
    f = torch.sum if op == "sum" else torch.mean

    def build(r, dt):
        a = T(r.uniform(shape), dt)

        def fn(x):
            t = x["a"]
            d = tuple(dims) if dims else tuple(range(t.dim()))
            return f(t, dim=d, keepdim=keepdim)

        return Case(op, fn, [("a", a)], params=[("dims", list(dims)), ("keepdim", [1 if keepdim else 0])],
                    views=views)

    return build


for _op in ("sum", "mean"):
    case(_op + "_alldims")(make_reduce(_op, [], False))
    case(_op + "_alldims_keepdim")(make_reduce(_op, [], True))
    case(_op + "_dim1")(make_reduce(_op, [1], False))
    case(_op + "_dims02")(make_reduce(_op, [0, 2], False))
    case(_op + "_last_keepdim")(make_reduce(_op, [-1], True))
    case(_op + "_dims_neg_keepdim")(make_reduce(_op, [-3, -2], True))
    case(_op + "_transposed")(make_reduce(_op, [0], False, shape=(4, 3), views={"a": [("transpose", [0, 1])]}))


def make_sum_all(shape, views=None):
    def build(r, dt):
        return Case("sum_all", lambda x: torch.sum(x["a"]), [("a", T(r.uniform(shape), dt))], views=views)

    return build


case("sum_all")(make_sum_all((2, 3, 4)))
case("sum_all_expanded")(make_sum_all((3, 1), views={"a": [("expand", [2, 3, 4])]}))


def make_max(dim, keepdim, shape=(2, 3, 4), views=None, ties=False):
    def build(r, dt):
        if ties:  # small integers: many ties; gradient goes to the first maximum
            a = T(r.ints(shape, 0, 3).to(torch.float64), dt)
        else:
            a = T(r.uniform(shape), dt)

        def check(outs):
            v, i = outs
            x = a
            for kind, args in (views or {}).get("a", []):
                x = apply_view(x, kind, args)
            xd = x.detach()
            vv = v if keepdim else v.unsqueeze(dim)
            first = (xd == vv).to(torch.int64).argmax(dim=dim, keepdim=keepdim)  # first True
            assert torch.equal(first, i), "torch.max did not return the first maximum"

        return Case("max", lambda x: torch.max(x["a"], dim, keepdim), [("a", a)],
                    params=[("dim", [dim]), ("keepdim", [1 if keepdim else 0])], views=views, check=check)

    return build


case("max_dim1")(make_max(1, False))
case("max_last_keepdim")(make_max(-1, True))
case("max_dim0")(make_max(0, False))
case("max_ties")(make_max(2, False, shape=(3, 2, 5), ties=True))
case("max_transposed")(make_max(1, False, shape=(5, 3), views={"a": [("transpose", [0, 1])]}))


# ---- views and shape ops -----------------------------------------------------------------------
def make_shape_op(op, shape, params, fn, views=None):
    def build(r, dt):
        return Case(op, lambda x: fn(x["a"]), [("a", T(r.uniform(shape), dt))], params=params, views=views)

    return build


case("reshape")(make_shape_op("reshape", (2, 3, 4), [("shape", [6, 4])], lambda t: t.reshape(6, 4)))
case("reshape_infer")(make_shape_op("reshape", (2, 3, 4), [("shape", [4, -1])], lambda t: t.reshape(4, -1)))
case("reshape_transposed")(make_shape_op("reshape", (3, 4), [("shape", [2, 6])], lambda t: t.reshape(2, 6),
                                         views={"a": [("transpose", [0, 1])]}))
case("reshape_to_scalar")(make_shape_op("reshape", (1, 1), [("shape", [])], lambda t: t.reshape(())))
case("view")(make_shape_op("view", (2, 3, 4), [("shape", [3, 8])], lambda t: t.view(3, 8)))
case("view_flat")(make_shape_op("view", (2, 3, 4), [("shape", [-1])], lambda t: t.view(-1)))
case("transpose")(make_shape_op("transpose", (2, 3, 4), [("dim0", [0]), ("dim1", [2])],
                                lambda t: t.transpose(0, 2)))
case("transpose_neg")(make_shape_op("transpose", (2, 3, 4), [("dim0", [-1]), ("dim1", [-2])],
                                    lambda t: t.transpose(-1, -2)))
case("permute")(make_shape_op("permute", (2, 3, 4), [("perm", [2, 0, 1])], lambda t: t.permute(2, 0, 1)))
case("permute_4d")(make_shape_op("permute", (2, 1, 3, 2), [("perm", [3, 1, 0, 2])],
                                 lambda t: t.permute(3, 1, 0, 2)))
case("slice")(make_shape_op("slice", (2, 5, 3), [("dim", [1]), ("start", [1]), ("end", [4]), ("step", [1])],
                            lambda t: t[:, 1:4]))
case("slice_step")(make_shape_op("slice", (7, 3), [("dim", [0]), ("start", [0]), ("end", [7]), ("step", [2])],
                                 lambda t: t[0:7:2]))
case("slice_clamp")(make_shape_op("slice", (2, 5), [("dim", [-1]), ("start", [2]), ("end", [100]), ("step", [2])],
                                  lambda t: t[:, 2:100:2]))
case("expand")(make_shape_op("expand", (3, 1), [("shape", [2, 3, 4])], lambda t: t.expand(2, 3, 4)))
case("expand_keep")(make_shape_op("expand", (1, 3, 1), [("shape", [2, -1, 4])], lambda t: t.expand(2, -1, 4)))
case("contiguous")(make_shape_op("contiguous", (3, 4), [], lambda t: t.contiguous(),
                                 views={"a": [("transpose", [0, 1])]}))
case("contiguous_noop")(make_shape_op("contiguous", (2, 3), [], lambda t: t.contiguous()))
case("unsqueeze")(make_shape_op("unsqueeze", (2, 3), [("dim", [1])], lambda t: t.unsqueeze(1)))
case("unsqueeze_last")(make_shape_op("unsqueeze", (2, 3), [("dim", [-1])], lambda t: t.unsqueeze(-1)))
case("squeeze")(make_shape_op("squeeze", (2, 1, 3), [("dim", [1])], lambda t: t.squeeze(1)))
case("squeeze_neg")(make_shape_op("squeeze", (2, 3, 1), [("dim", [-1])], lambda t: t.squeeze(-1)))


# ---- copies and names: clone, to_dtype, to_device, tag --------------------------------------
# to_dtype's target is a param (f32 / f64); its gradient is the output's cast back. The first
# f64 case of each op is plain (no views) with gradients: the registry test runs it.
def make_to_dtype(target, shape=(2, 3), views=None):
    def build(r, dt):
        tdt = DTYPES[target]
        return Case("to_dtype", lambda x: x["a"].to(tdt), [("a", T(r.uniform(shape), dt))],
                    params=[("dtype", [target])], views=views)

    return build


case("clone")(make_shape_op("clone", (2, 3), [], lambda t: t.clone()))
case("clone_transposed")(make_shape_op("clone", (3, 4), [], lambda t: t.clone(),
                                       views={"a": [("transpose", [0, 1])]}))
case("to_dtype")(make_to_dtype("f64"))
case("to_dtype_narrow")(make_to_dtype("f32", shape=(3, 4)))
case("to_dtype_transposed")(make_to_dtype("f64", shape=(3, 4), views={"a": [("transpose", [0, 1])]}))
case("to_device")(make_shape_op("to_device", (2, 3), [("device", ["cpu"])], lambda t: t.to("cpu")))
case("to_device_sliced")(make_shape_op("to_device", (4, 3), [("device", ["cpu"])], lambda t: t.to("cpu"),
                                       views={"a": [("slice", [0, 1, 4, 2])]}))
case("tag")(make_shape_op("tag", (2, 3), [("name", ["h"])], lambda t: t.view_as(t)))
case("tag_transposed")(make_shape_op("tag", (3, 4), [("name", ["attn_out"])], lambda t: t.view_as(t),
                                     views={"a": [("transpose", [0, 1])]}))

def make_cat(shapes, dim, views=None):
    def build(r, dt):
        inputs = [("t%d" % i, T(r.uniform(s), dt)) for i, s in enumerate(shapes)]
        return Case("cat", lambda x: torch.cat([x["t%d" % i] for i in range(len(shapes))], dim),
                    inputs, params=[("dim", [dim])], views=views)

    return build


case("cat_dim1")(make_cat([(2, 1, 3), (2, 2, 3), (2, 3, 3)], 1))
case("cat_last")(make_cat([(2, 3), (2, 2)], -1))
case("cat_dim0")(make_cat([(1, 4), (3, 4)], 0))
case("cat_single")(make_cat([(2, 3)], 0))
case("cat_transposed")(make_cat([(2, 3), (3, 2)], 0, views={"t1": [("transpose", [0, 1])]}))


def make_split(shape, split_size, dim, views=None):
    def build(r, dt):
        return Case("split", lambda x: tuple(torch.split(x["a"], split_size, dim)),
                    [("a", T(r.uniform(shape), dt))], params=[("split_size", [split_size]), ("dim", [dim])],
                    views=views)

    return build


case("split_dim1")(make_split((2, 5, 3), 2, 1))
case("split_dim0_even")(make_split((6, 2), 3, 0))
case("split_last")(make_split((2, 7), 3, -1))
case("split_whole")(make_split((2, 3), 5, 0))
case("split_transposed")(make_split((4, 3), 2, 0, views={"a": [("transpose", [0, 1])]}))


# ---- selection --------------------------------------------------------------------------------
def make_masked_fill(sa, sm, value, float_mask=False, views=None):
    def build(r, dt):
        a = T(r.uniform(sa), dt)
        m = r.ints(sm, 0, 2)
        mask = T(m.to(torch.float64), dt) if float_mask else m
        return Case("masked_fill", lambda x: x["a"].masked_fill(x["mask"] != 0, value),
                    [("a", a), ("mask", mask)], params=[("value", [value])], nograd=("mask",), views=views)

    return build


case("masked_fill")(make_masked_fill((2, 3, 4), (2, 3, 4), -3.5))
case("masked_fill_broadcast")(make_masked_fill((2, 3, 4), (3, 1), 7.25))
case("masked_fill_float_mask")(make_masked_fill((2, 3), (2, 3), 0.0, float_mask=True))
case("masked_fill_transposed")(make_masked_fill((4, 3), (3, 4), -1.0, views={"a": [("transpose", [0, 1])]}))


def make_where(sc, sa, sb, views=None):
    def build(r, dt):
        cond = r.ints(sc, 0, 2)
        a, b = T(r.uniform(sa), dt), T(r.uniform(sb), dt)
        return Case("where", lambda x: torch.where(x["cond"] != 0, x["a"], x["b"]),
                    [("cond", cond), ("a", a), ("b", b)], views=views)

    return build


case("where")(make_where((2, 3), (2, 3), (2, 3)))
case("where_broadcast")(make_where((2, 1, 4), (2, 3, 4), (3, 1)))
case("where_transposed")(make_where((3, 2), (2, 3), (2,), views={"a": [("transpose", [0, 1])]}))


# ---- in-place (on a clone of the input, so the leaf is untouched) ---------------------------------
def make_inplace(op, sa, sb=None, params=(), fn=None, views=None):
    def build(r, dt):
        inputs = [("a", T(r.uniform(sa), dt))]
        if sb is not None:
            inputs.append(("b", T(r.uniform(sb), dt)))

        def f(x):
            y = x["a"].clone()
            fn(y, x)
            return y

        return Case(op, f, inputs, params=params, views=views)

    return build


case("add_")(make_inplace("add_", (2, 3), (3,), [("alpha", [0.5])], lambda y, x: y.add_(x["b"], alpha=0.5)))
case("add__same")(make_inplace("add_", (2, 3), (2, 3), [("alpha", [-2.0])], lambda y, x: y.add_(x["b"], alpha=-2.0)))
case("mul_")(make_inplace("mul_", (2, 3), (2, 3), [], lambda y, x: y.mul_(x["b"])))
case("mul__broadcast")(make_inplace("mul_", (2, 3), (2, 1), [], lambda y, x: y.mul_(x["b"])))
case("mul_scalar_")(make_inplace("mul_scalar_", (2, 3), None, [("s", [-1.5])], lambda y, x: y.mul_(-1.5)))
case("relu_")(make_inplace("relu_", (2, 3, 4), None, [], lambda y, x: y.relu_()))
case("zero_")(make_inplace("zero_", (2, 3), None, [], lambda y, x: y.zero_()))
case("copy_")(make_inplace("copy_", (2, 3), (2, 3), [], lambda y, x: y.copy_(x["b"])))
case("copy__broadcast")(make_inplace("copy_", (2, 3), (3,), [], lambda y, x: y.copy_(x["b"])))


# ---- issue 31's ops: silu, rms_norm, rope, grouped-query / lower-right attention -------------
# Made with a PyTorch 2.x (F.rms_norm appeared in 2.4, SDPA's enable_gqa in 2.5; this file
# falls back to the compositions for an older torch): each file's header names the torch
# that wrote it (`--only` regenerates these cases alone).
case("silu")(make_unary("silu", fn=F.silu))
case("silu_transposed")(make_unary("silu", shape=(4, 3), views={"a": [("transpose", [0, 1])]}, fn=F.silu))


def _rms_norm(x, ns, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, ns, w, eps)
    dims = tuple(range(-len(ns), 0))  # Llama's RMSNorm, for a torch without F.rms_norm
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * w if w is not None else y


def make_rms_norm(shape, n_norm, weight, eps=1e-6, views=None):
    def build(r, dt):
        x = T(r.uniform(shape, -2.0, 2.0), dt)
        ns = tuple(shape[len(shape) - n_norm:])
        if views and "x" in views:  # normalized shape of the viewed x
            ns = tuple(apply_view(x, *views["x"][0]).shape[-n_norm:])
        inputs = [("x", x)]
        if weight:
            inputs.append(("weight", T(r.uniform(ns, 0.5, 1.5), dt)))
        fn = lambda v: _rms_norm(v["x"], ns, v.get("weight"), eps)
        return Case("rms_norm", fn, inputs, params=[("n_norm", [n_norm]), ("eps", [eps])], views=views)

    return build


case("rms_norm_weight")(make_rms_norm((2, 3, 5), 1, True))
case("rms_norm_plain")(make_rms_norm((2, 3, 5), 1, False))
case("rms_norm_2d_weight")(make_rms_norm((2, 3, 4), 2, True))
case("rms_norm_eps")(make_rms_norm((3, 4), 1, True, eps=0.1))
case("rms_norm_wide")(make_rms_norm((2, 37), 1, True))  # lane blocks and a tail
case("rms_norm_transposed")(make_rms_norm((6, 3), 1, True, views={"x": [("transpose", [0, 1])]}))


def _rope(x, pos, theta):
    """Hugging Face Llama's apply_rotary_pos_emb (rotate_half, non-interleaved), with the
    angles, cosines and sines in float64, rounded to x's dtype (as remat computes them)."""
    D = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(torch.float64) / D))
    ang = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def make_rope(shape, theta, positions=None, views=None):
    def build(r, dt):
        x = T(r.uniform(shape, -2.0, 2.0), dt)
        tn = shape[-2] if not (views and "x" in views) else apply_view(x, *views["x"][0]).shape[-2]
        inputs = [("x", x)]
        if positions is not None:
            inputs.append(("positions", torch.tensor(positions, dtype=torch.int64)))
        fn = lambda v: _rope(v["x"], v["positions"] if positions is not None else torch.arange(tn), theta)
        return Case("rope", fn, inputs, params=[("theta", [theta])], views=views)

    return build


case("rope")(make_rope((2, 3, 5, 4), 10000.0))
case("rope_positions")(make_rope((1, 2, 4, 6), 10000.0, positions=[7, 3, 100, 0]))
case("rope_small_theta")(make_rope((2, 2, 6, 8), 10.0))
case("rope_large_theta")(make_rope((1, 3, 5, 16), 500000.0, positions=[1000, 1001, 1002, 1003, 1004]))
case("rope_3d")(make_rope((3, 7, 2), 100.0))
case("rope_transposed")(make_rope((2, 5, 3, 4), 10000.0, views={"x": [("transpose", [1, 2])]}))


def _attention_ref(q, k, v, causal, scale, lower_right):
    """softmax(q·kᵀ·scale + mask) · v with k and v repeated over their query groups
    (repeat_interleave: query head h uses kv head h // (Hq / Hkv)); SDPA's enable_gqa
    where this torch has it."""
    tq, tk = q.shape[-2], k.shape[-2]
    mask = None
    if causal:
        mask = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq if lower_right else 0)
    sc = scale or 1.0 / math.sqrt(q.shape[-1])
    if q.shape[-3] != k.shape[-3]:
        try:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sc, enable_gqa=True)
        except (TypeError, AttributeError):  # no SDPA (1.13) or no enable_gqa (< 2.5)
            g = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    s = (q @ k.transpose(-2, -1)) * sc
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def make_attention_gqa(sq, sk, dv, causal, scale, lower_right=False, views=None):
    def build(r, dt):
        q, k = T(r.uniform(sq, -1.5, 1.5), dt), T(r.uniform(sk, -1.5, 1.5), dt)
        v = T(r.uniform(tuple(sk[:-1]) + (dv,)), dt)
        fn = lambda x: _attention_ref(x["q"], x["k"], x["v"], causal, scale, lower_right)
        params = [("causal", [int(causal)]), ("scale", [scale])]
        if lower_right:
            params.append(("lower_right", [1]))
        return Case("attention", fn, [("q", q), ("k", k), ("v", v)], params=params, views=views)

    return build


case("attention_gqa_causal")(make_attention_gqa((2, 4, 5, 3), (2, 2, 5, 3), 3, True, 0.0))
case("attention_mqa")(make_attention_gqa((1, 4, 3, 4), (1, 1, 6, 4), 2, False, 0.5))
case("attention_gqa_blocks")(make_attention_gqa((1, 6, 70, 4), (1, 2, 70, 4), 3, True, 0.0))
case("attention_lower_right")(make_attention_gqa((2, 2, 3, 4), (2, 2, 7, 4), 4, True, 0.0, lower_right=True))
case("attention_gqa_lower_right")(make_attention_gqa((1, 4, 2, 4), (1, 2, 6, 4), 4, True, 0.0,
                                                     lower_right=True))
case("attention_gqa_transposed")(make_attention_gqa((2, 5, 4, 4), (2, 5, 2, 4), 4, True, 0.0,
                                                    views={"q": [("transpose", [1, 2])],
                                                           "k": [("transpose", [1, 2])],
                                                           "v": [("transpose", [1, 2])]}))


# ---- large cases: sizes above the kernels' OpenMP thresholds (RM_OMP_MIN = 32768
# elements and fractions of it) and GEMM blocking, so the parallel paths are
# compared too. Inputs are recipes, outputs and gradients are sampled (see Recipe
# and docs/fixtures.md) to keep the files small.
def large(op, fn, specs, params=(), views=None, nograd=()):
    """specs: list of (name, shape, lo, hi) for float inputs or (name, shape, 'int', lo, hi)."""

    def build(r, dt):
        inputs = []
        for sp in specs:
            if sp[2] == "int":
                inputs.append((sp[0], r.recipe_int(sp[1], sp[3], sp[4])))
            else:
                inputs.append((sp[0], r.recipe(sp[1], sp[2], sp[3], dt)))
        return Case(op, fn, inputs, params=params, views=views, nograd=nograd, large=True)

    return build


_R = (72, 1024)  # 73728 elements > 65536
case("add_large")(large("add", lambda x: x["a"] + x["b"], [("a", _R, -2.0, 2.0), ("b", (1024,), -2.0, 2.0)]))
case("mul_large_transposed")(large("mul", lambda x: x["a"] * x["b"],
                                   [("a", (1024, 72), -2.0, 2.0), ("b", (72, 1), -2.0, 2.0)],
                                   views={"a": [("transpose", [0, 1])]}))
case("div_large")(large("div", lambda x: x["a"] / x["b"], [("a", _R, -2.0, 2.0), ("b", _R, 0.5, 2.5)]))
case("pow_large")(large("pow", lambda x: torch.pow(x["a"], x["b"]),
                        [("a", (48, 1024), 0.5, 2.5), ("b", (48, 1024), -2.0, 2.0)]))
case("exp_large")(large("exp", lambda x: torch.exp(x["a"]), [("a", _R, -2.0, 2.0)]))
case("tanh_large")(large("tanh", lambda x: torch.tanh(x["a"]), [("a", _R, -2.0, 2.0)]))
case("gelu_erf_large")(large("gelu", lambda x: F.gelu(x["a"]), [("a", _R, -4.0, 4.0)],
                             params=[("approximate", ["erf"])]))
case("bias_gelu_erf_large")(large("bias_gelu", lambda x: F.gelu(x["x"] + x["bias"]),
                                  [("x", (96, 1024), -4.0, 4.0), ("bias", (1024,), -1.0, 1.0)],
                                  params=[("approximate", ["erf"])]))
case("bias_gelu_tanh_large")(large("bias_gelu", lambda x: F.gelu(x["x"] + x["bias"], approximate="tanh"),
                                   [("x", (96, 1024), -4.0, 4.0), ("bias", (1024,), -1.0, 1.0)],
                                   params=[("approximate", ["tanh"])]))
case("gelu_tanh_large")(large("gelu", lambda x: F.gelu(x["a"], approximate="tanh"), [("a", _R, -4.0, 4.0)],
                              params=[("approximate", ["tanh"])]))
case("mul_scalar_large")(large("mul_scalar", lambda x: x["a"] * -1.5, [("a", _R, -2.0, 2.0)],
                               params=[("s", [-1.5])]))
case("matmul_large")(large("matmul", lambda x: torch.matmul(x["a"], x["b"]),
                           [("a", (192, 64), -1.0, 1.0), ("b", (64, 192), -1.0, 1.0)]))
case("matmul_batched_large")(large("matmul", lambda x: torch.matmul(x["a"], x["b"]),
                                   [("a", (3, 96, 64), -1.0, 1.0), ("b", (64, 128), -1.0, 1.0)]))
case("linear_large")(large("linear", lambda x: F.linear(x["x"], x["weight"], x["bias"]),
                           [("x", (256, 64), -1.0, 1.0), ("weight", (160, 64), -1.0, 1.0),
                            ("bias", (160,), -1.0, 1.0)]))
case("softmax_large")(large("softmax", lambda x: torch.softmax(x["a"], -1), [("a", (128, 160), -4.0, 4.0)],
                            params=[("dim", [-1])]))
case("softmax_dim0_large")(large("softmax", lambda x: torch.softmax(x["a"], 0), [("a", (160, 128), -4.0, 4.0)],
                                 params=[("dim", [0])]))
case("log_softmax_large")(large("log_softmax", lambda x: torch.log_softmax(x["a"], -1),
                                [("a", (128, 160), -4.0, 4.0)], params=[("dim", [-1])]))
case("layer_norm_large")(large("layer_norm", lambda x: F.layer_norm(x["x"], (288,), x["weight"], x["bias"], 1e-5),
                               [("x", (128, 288), -2.0, 2.0), ("weight", (288,), 0.5, 1.5),
                                ("bias", (288,), -0.5, 0.5)], params=[("n_norm", [1]), ("eps", [1e-5])]))
case("cross_entropy_large")(large("cross_entropy", lambda x: F.cross_entropy(x["logits"], x["targets"], ignore_index=3),
                                  [("logits", (256, 40), -4.0, 4.0), ("targets", (256,), "int", 0, 40)],
                                  params=[("ignore_index", [3])]))
case("embedding_large")(large("embedding", lambda x: F.embedding(x["indices"], x["weight"]),
                              [("weight", (50, 64), -1.0, 1.0), ("indices", (600,), "int", 0, 50)]))
case("mse_loss_large")(large("mse_loss", lambda x: F.mse_loss(x["a"], x["b"]),
                             [("a", _R, -2.0, 2.0), ("b", _R, -2.0, 2.0)]))
case("sum_dim0_large")(large("sum", lambda x: torch.sum(x["a"], dim=(0,)), [("a", (80, 1000), -2.0, 2.0)],
                             params=[("dims", [0]), ("keepdim", [0])]))
case("mean_dim1_large")(large("mean", lambda x: torch.mean(x["a"], dim=(1,), keepdim=True),
                              [("a", (80, 1000), -2.0, 2.0)], params=[("dims", [1]), ("keepdim", [1])]))
case("sum_all_large")(large("sum_all", lambda x: torch.sum(x["a"]), [("a", (80, 1000), -2.0, 2.0)]))
case("max_large")(large("max", lambda x: torch.max(x["a"], 1), [("a", (80, 1000), -2.0, 2.0)],
                        params=[("dim", [1]), ("keepdim", [0])]))
case("max_dim0_large")(large("max", lambda x: torch.max(x["a"], 0), [("a", (80, 1000), -2.0, 2.0)],
                             params=[("dim", [0]), ("keepdim", [0])]))
case("cat_large")(large("cat", lambda x: torch.cat([x["t0"], x["t1"]], 1),
                        [("t0", (72, 512), -2.0, 2.0), ("t1", (72, 512), -2.0, 2.0)], params=[("dim", [1])]))
case("where_large")(large("where", lambda x: torch.where(x["cond"] != 0, x["a"], x["b"]),
                          [("cond", (72, 1), "int", 0, 2), ("a", _R, -2.0, 2.0), ("b", (1024,), -2.0, 2.0)]))
case("masked_fill_large")(large("masked_fill", lambda x: x["a"].masked_fill(x["mask"] != 0, 0.5),
                                [("a", _R, -2.0, 2.0), ("mask", _R, "int", 0, 2)], params=[("value", [0.5])]))
case("contiguous_large")(large("contiguous", lambda x: x["a"].contiguous(), [("a", (1024, 72), -2.0, 2.0)],
                               views={"a": [("transpose", [0, 1])]}))
case("relu__large")(large("relu_", lambda x: x["a"].clone().relu_(), [("a", _R, -2.0, 2.0)]))
case("silu_large")(large("silu", lambda x: F.silu(x["a"]), [("a", _R, -8.0, 8.0)]))
case("rms_norm_large")(large("rms_norm", lambda x: _rms_norm(x["x"], (288,), x["weight"], 1e-6),
                             [("x", (128, 288), -2.0, 2.0), ("weight", (288,), 0.5, 1.5)],
                             params=[("n_norm", [1]), ("eps", [1e-6])]))
case("rope_large")(large("rope", lambda x: _rope(x["x"], torch.arange(64), 10000.0),
                         [("x", (2, 8, 64, 64), -2.0, 2.0)], params=[("theta", [10000.0])]))
case("attention_gqa_large")(large("attention", lambda x: _attention_ref(x["q"], x["k"], x["v"], True, 0.0, False),
                                  [("q", (2, 8, 96, 16), -1.0, 1.0), ("k", (2, 2, 96, 16), -1.0, 1.0),
                                   ("v", (2, 2, 96, 16), -2.0, 2.0)], params=[("causal", [1]), ("scale", [0.0])]))


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------
def dtype_name(t):
    return {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64"}[t.dtype]


def fmt_values(t):
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.float32:
        vals = ["%.9g" % float(v) for v in t.tolist()]
    elif t.dtype == torch.float64:
        vals = [repr(float(v)) for v in t.tolist()]
    else:
        vals = [str(int(v)) for v in t.tolist()]
    for v in vals:
        assert v not in ("nan", "inf", "-inf"), "non-finite value in a fixture"
    return vals


def is_prime(n):
    return n >= 2 and all(n % k for k in range(2, int(n ** 0.5) + 1))


def sample_stride(n):
    """Large outputs/gradients keep about 100 elements: flat indices 0, s, 2s, ...
    with s prime, so the samples fall on every row and column pattern."""
    if n <= 128:
        return 1
    s = max(2, n // 100)
    while not is_prime(s):
        s += 1
    return s


def tensor_line(key, name, t, recipe=None, sample=False):
    head = [key, name, dtype_name(t), str(t.dim())] + [str(s) for s in t.shape]
    if recipe is not None:
        return " ".join(head + recipe.tail())
    stride = sample_stride(t.numel()) if sample else 1
    if stride > 1:
        return " ".join(head + ["@sample", str(stride)] + fmt_values(t.detach().reshape(-1)[::stride]))
    return " ".join(head + fmt_values(t))


def fmt_param(v):
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


def run_case(name, build, dname):
    dt = DTYPES[dname]
    torch.manual_seed(zlib.crc32(name.encode()))
    r = Rng(zlib.crc32(name.encode()))
    c = build(r, dt)
    bases = {}
    recipes = {}
    for iname, t in c.inputs:
        if isinstance(t, Recipe):
            recipes[iname] = t
            t = t.tensor()
        t = t.detach().clone()
        if t.is_floating_point() and iname not in c.nograd:
            t.requires_grad_(True)
        bases[iname] = t
    viewed = {}
    for iname, t in bases.items():
        for kind, args in c.views.get(iname, []):
            t = apply_view(t, kind, args)
        viewed[iname] = t
    outs = c.fn(viewed)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    outs = tuple(outs)
    if c.check:
        c.check(outs)
    if c.op == "max":
        out_names = ["values", "indices"]
    elif len(outs) == 1:
        out_names = ["out"]
    else:
        out_names = ["out%d" % i for i in range(len(outs))]

    g = torch.Generator().manual_seed(zlib.crc32((name + ":grad").encode()))
    diff_outs, grad_outs, go_recipes = [], [], {}
    for oname, o in zip(out_names, outs):
        if o.is_floating_point():
            if c.large:
                go_recipes[oname] = r.recipe(o.shape, -1.0, 1.0, o.dtype)
                go = go_recipes[oname].tensor()
            else:
                go = torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)
            diff_outs.append((oname, o))
            grad_outs.append((oname, go))
    torch.autograd.backward([o for _, o in diff_outs], [go for _, go in grad_outs])

    lines = [
        "# remat golden fixture -- generated by scripts/gen_fixtures.py, do not edit",
        "# torch %s" % torch.__version__,
        "# command: %s" % COMMAND,
        "case %s_%s" % (name, dname),
        "op %s" % c.op,
        "dtype %s" % dname,
    ]
    for pname, vals in c.params:
        lines.append(" ".join(["param", pname] + [fmt_param(v) for v in vals]))
    for iname, _ in c.inputs:
        lines.append(tensor_line("input", iname, bases[iname], recipe=recipes.get(iname)))
        for kind, args in c.views.get(iname, []):
            lines.append(" ".join(["view", iname, kind] + [str(a) for a in args]))
    for oname, o in zip(out_names, outs):
        lines.append(tensor_line("output", oname, o, sample=c.large))
    for oname, go in grad_outs:
        lines.append(tensor_line("grad_output", oname, go, recipe=go_recipes.get(oname)))
    for iname, _ in c.inputs:
        b = bases[iname]
        if b.requires_grad:
            gr = b.grad if b.grad is not None else torch.zeros_like(b)
            lines.append(tensor_line("grad", iname, gr, sample=c.large))
    lines.append("end")
    return "%s_%s" % (name, dname), c.op, "\n".join(lines) + "\n"


def main(argv):
    args = argv[1:]
    only = None
    if len(args) == 3 and args[0] == "--only":
        only, args = re.compile(args[1]), args[2:]
        global COMMAND
        COMMAND = "python3 scripts/gen_fixtures.py --only '%s' %s" % (only.pattern, args[0])
    if len(args) != 1:
        sys.stderr.write("usage: %s [--only REGEX] OUTPUT_DIR   (e.g. tests/fixtures)\n" % argv[0])
        return 2
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)  # reductions in a fixed order
    names = [n for n, _ in BUILDERS]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, "duplicate case names: %s" % sorted(dup)
    # --only REGEX: the cases whose name matches are (re)written, every other file and index
    # line is kept as it is (cases made by another torch stay as that torch made them).
    kept = {}
    index_path = os.path.join(outdir, "index.txt")
    if only and os.path.exists(index_path):
        with open(index_path) as fh:
            for ln in fh:
                if ln.strip() and not ln.startswith("#"):
                    kept[ln.split()[0]] = ln.rstrip("\n")
    # Stale fixtures of cases that no longer exist must not linger.
    for f in os.listdir(outdir):
        if f.endswith(".txt") and f != "index.txt" and (not only or only.fullmatch(f[:-4].rsplit("_", 1)[0])):
            os.remove(os.path.join(outdir, f))
    index = []
    total = written = 0
    for name, build in BUILDERS:
        for dname in DTYPES:
            if only and not only.fullmatch(name):
                cname = "%s_%s" % (name, dname)
                assert cname in kept, "case %s is not in %s: run without --only" % (cname, index_path)
                index.append(kept[cname])
                continue
            cname, op, text = run_case(name, build, dname)
            with open(os.path.join(outdir, cname + ".txt"), "w") as fh:
                fh.write(text)
            total += len(text)
            written += 1
            index.append("%s %s %s" % (cname, op, dname))
    header = ["# remat golden fixtures: <case> <op> <dtype>, one line per file <case>.txt\n",
              "# torch %s; command: %s\n" % (torch.__version__, COMMAND)]
    if only and os.path.exists(index_path):  # the first lines say which torch made what
        with open(index_path) as fh:
            header = [ln for ln in fh if ln.startswith("#")]
        note = "# torch %s: the cases matching %s (--only)\n" % (torch.__version__, only.pattern)
        header = [h for h in header if h != note] + [note]
    with open(index_path, "w") as fh:
        fh.writelines(header)
        fh.write("\n".join(index) + "\n")
    print("gen_fixtures: wrote %d cases (%d bytes) to %s" % (written, total, outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
