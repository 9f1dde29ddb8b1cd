"""The remat program's models in PyTorch, layer for layer (tools/train/models.c).

GPT (byte-level, vocab 256):
    x = wte[idx] + wpe
    block: x = x + proj(causal_attention(ln1(x)));  x = x + fc2(gelu_tanh(fc(ln2(x))))
    logits = ln_f(x) @ wte.T (tied) ; loss = cross_entropy(logits, targets, ignore_index=-100)
Llama (`remat --model llama`: the library's Llama of the flags, model_llama_config):
    x = embed[idx]
    block: x = x + o(causal_attention(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))
           x = x + down(silu(gate(n2(x))) * up(n2(x)))      (n: RMSNorm, eps 1e-6)
    logits = lm_head(norm(x)) (untied); loss as the GPT's. No biases; heads = kv heads;
    SwiGLU width 8/3 x width rounded up to 64; RoPE theta 10000, rotate_half convention.
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


def rms_norm(x, weight, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, width, heads, intermediate, eps=1e-6):
        super().__init__()
        self.heads, self.eps = heads, eps
        self.n1 = nn.Parameter(torch.ones(width))
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.n2 = nn.Parameter(torch.ones(width))
        self.gate = nn.Linear(width, intermediate, bias=False)
        self.up = nn.Linear(width, intermediate, bias=False)
        self.down = nn.Linear(intermediate, width, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        h = rms_norm(x, self.n1, self.eps)
        q = self.q(h).reshape(B, T, H, D).transpose(1, 2)
        k = self.k(h).reshape(B, T, H, D).transpose(1, 2)
        v = self.v(h).reshape(B, T, H, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        h = rms_norm(x, self.n2, self.eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


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


class Llama(nn.Module):
    def __init__(self, layers, width, heads, context, vocab=256, theta=10000.0):
        super().__init__()
        intermediate = (8 * width // 3 + 63) // 64 * 64
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(LlamaBlock(width, heads, intermediate) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(width))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        D = width // heads
        inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        ang = torch.outer(torch.arange(context, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def loss(self, idx, targets, strategy="none", reentrant=False):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        blocks = [lambda y, b=b: b(y, cos, sin) for b in self.blocks]
        x = run_blocks(blocks, self.embed(idx), strategy, reentrant)
        logits = self.lm_head(rms_norm(x, self.norm, 1e-6))
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
    if model in ("gpt", "llama"):
        m = (GPT if model == "gpt" else Llama)(layers, width, heads, context)
        idx = torch.randint(0, 128, (batch, context))
        targets = torch.randint(0, 128, (batch, context))
        targets[:, ::3] = -100
        return m, (idx, targets)
    m = MLP(layers, width)
    x = torch.randn(batch, width)
    return m, (x, torch.sin(2 * x) * torch.cos(torch.roll(x, -1, 1)))
