"""The remat program's two models in PyTorch, layer for layer (tools/train/models.c).

GPT (byte-level, vocab 256):
    x = wte[idx] + wpe
    block: x = x + proj(causal_attention(ln1(x)));  x = x + fc2(gelu_tanh(fc(ln2(x))))
    logits = ln_f(x) @ wte.T (tied) ; loss = cross_entropy(logits, targets, ignore_index=-100)
MLP (width W):
    x = linear_in(input); block: x = x + gelu(linear(layer_norm(x))); out = head(ln_f(x)); mse
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class GPTBlock(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1))

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        q = q.reshape(B, T, H, D).transpose(1, 2)
        k = k.reshape(B, T, H, D).transpose(1, 2)
        v = v.reshape(B, T, H, D).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            # PyTorch >= 2.0: its fused attention, the counterpart of remat_attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # PyTorch 1.13 (Debian bookworm) has no fused attention: the ops
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class MLPBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + F.gelu(self.lin(self.ln(x)))


def run_blocks(blocks, x, strategy, reentrant):
    """Runs x through blocks under a remat strategy name: none, block, sequential=N.

    sequential=N cuts the blocks as torch.utils.checkpoint.checkpoint_sequential
    does (N-1 checkpointed chunks of len//N blocks, the rest plain); written out
    here because torch 1.13's checkpoint_sequential is reentrant only."""
    if strategy == "none":
        for b in blocks:
            x = b(x)
        return x
    if strategy == "block":
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=reentrant)
        return x
    if strategy.startswith("sequential="):
        segments = int(strategy.split("=", 1)[1])
        size = len(blocks) // segments
        end = -1

        def chunk(lo, hi):
            def f(y):
                for j in range(lo, hi + 1):
                    y = blocks[j](y)
                return y
            return f

        for start in range(0, size * (segments - 1), size):
            end = start + size - 1
            x = checkpoint(chunk(start, end), x, use_reentrant=reentrant)
        return chunk(end + 1, len(blocks) - 1)(x)
    raise ValueError(f"unknown strategy {strategy}")


class GPT(nn.Module):
    def __init__(self, layers, width, heads, context, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(GPTBlock(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe, std=0.02)
        for n, p in self.blocks.named_parameters():
            if n.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if ("proj" in n or "fc2" in n) else 0.02
                nn.init.normal_(p, std=std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def loss(self, idx, targets, strategy="none", reentrant=False):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe[:T]
        x = run_blocks(self.blocks, x, strategy, reentrant)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-100)


class MLP(nn.Module):
    def __init__(self, layers, width):
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, width)

    def loss(self, x, y, strategy="none", reentrant=False):
        h = run_blocks(self.blocks, self.inp(x), strategy, reentrant)
        return F.mse_loss(self.head(self.ln_f(h)), y)


def make(model, layers, width, heads, context, batch, seed=1):
    """Model and one batch (the addition task's shape; values do not matter for timing)."""
    torch.manual_seed(seed)
    if model == "gpt":
        m = GPT(layers, width, heads, context)
        idx = torch.randint(0, 128, (batch, context))
        targets = torch.randint(0, 128, (batch, context))
        targets[:, ::3] = -100
        return m, (idx, targets)
    m = MLP(layers, width)
    x = torch.randn(batch, width)
    return m, (x, torch.sin(2 * x) * torch.cos(torch.roll(x, -1, 1)))
