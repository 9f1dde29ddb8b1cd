#!/usr/bin/env python3
"""The WGAN-GP critic step of examples/gradient_penalty.c in PyTorch, for the
memory of a create_graph step side by side (issue 18).

Same critic (D=32 -> 256 -> 256 -> 256 -> 1, tanh-GELU blocks, f32), same
step: x_hat = eps*x_real + (1-eps)*x_fake, g = dC(x_hat)/dx_hat with
create_graph, loss = mean(C(x_fake)) - mean(C(x_real)) + 10*mean((||g||-1)^2),
backward, SGD. --checkpoint runs each block through
torch.utils.checkpoint.checkpoint(use_reentrant=False).

Memory: the growth of the C heap over the step (peak live bytes minus those
at its start), counted by build/libremat_heap_peak.so (bench/preload/heap_peak.c)
when preloaded -- the same counter the example prints as "heap+":

  LD_PRELOAD=build/libremat_heap_peak.so /usr/bin/python3 bench/pytorch/gradient_penalty.py [--checkpoint] [batch]
  LD_PRELOAD=build/libremat_heap_peak.so build/example_gradient_penalty 3 [batch]
"""

import ctypes
import sys

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

D, H, BLOCKS, LAMBDA, LR = 32, 256, 3, 10.0, 1e-3


def heap_counters():
    try:
        lib = ctypes.CDLL(None)
        reset, peak = lib.remat_heap_peak_reset, lib.remat_heap_peak_bytes
    except (OSError, AttributeError):
        return None
    reset.restype = peak.restype = ctypes.c_int64
    return reset, peak


def main():
    ck = "--checkpoint" in sys.argv
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    batch = int(args[0]) if args else 64
    torch.manual_seed(42)
    ws = [((torch.rand(H, D if i == 0 else H) * 2 - 1) / (5.66 if i == 0 else 16.0)).requires_grad_()
          for i in range(BLOCKS)]
    bs = [((torch.rand(H) * 2 - 1) * 0.05).requires_grad_() for _ in range(BLOCKS)]
    w_out = ((torch.rand(1, H) * 2 - 1) / 16.0).requires_grad_()
    b_out = ((torch.rand(1) * 2 - 1) * 0.05).requires_grad_()
    params = [p for pair in zip(ws, bs) for p in pair] + [w_out, b_out]

    def block(i, x):
        return F.gelu(F.linear(x, ws[i], bs[i]), approximate="tanh")

    def critic(x):
        for i in range(BLOCKS):
            x = checkpoint(block, i, x, use_reentrant=False) if ck else block(i, x)
        return F.linear(x, w_out, b_out)

    heap = heap_counters()
    print(f"PyTorch {torch.__version__} critic ({'checkpointed' if ck else 'plain'}), batch {batch}:")
    for step in range(3):
        xr = torch.randn(batch, D) * 0.5 + 1
        xf = torch.randn(batch, D)
        eps = torch.rand(batch, 1)
        base = heap[0]() if heap else 0
        x_hat = (eps * xr + (1 - eps) * xf).requires_grad_()
        g, = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
        pen = ((g.pow(2).sum(1) + 1e-12).sqrt() - 1).pow(2).mean()
        loss = critic(xf).mean() - critic(xr).mean() + LAMBDA * pen
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-LR)
                p.grad = None
        del x_hat, g, pen, loss
        line = f"  step {step}"
        if heap:
            line += f"  heap+ {heap[1]() - base} bytes"
        print(line)


if __name__ == "__main__":
    main()
